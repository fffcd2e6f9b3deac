import APNsProtocol
import Testing

@Suite struct NotificationIdentifierTests {
    @Test func wrapSafeOrder() {
        #expect(NotificationIdentifier.precedes(1, 2))
        #expect(!NotificationIdentifier.precedes(2, 1))
        #expect(!NotificationIdentifier.precedes(5, 5))
        #expect(NotificationIdentifier.precedesOrEquals(5, 5))
        // Across the wrap: 0xFFFFFFFF was issued before 0 and 2.
        #expect(NotificationIdentifier.precedes(0xFFFF_FFFF, 0))
        #expect(NotificationIdentifier.precedes(0xFFFF_FFFE, 2))
        #expect(!NotificationIdentifier.precedes(2, 0xFFFF_FFFE))
        #expect(NotificationIdentifier.distance(from: 0xFFFF_FFFE, to: 2) == 4)
        #expect(NotificationIdentifier.distance(from: 2, to: 0xFFFF_FFFE) == -4)
    }
}
