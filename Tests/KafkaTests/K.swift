import Testing
@Test func k() {}
