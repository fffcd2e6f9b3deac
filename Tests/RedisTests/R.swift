import Testing
@Test func r() {}
