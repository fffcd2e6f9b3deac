import APNsProtocol
import Testing

@testable import Sender

/// The token hex a notification hands to its outcome: the job's own string when given, else made.
@Suite struct PushNotificationTests {
    static let token = try! DeviceToken(bytes: (0..<32).map { UInt8(255 - $0 * 5) })

    func notification(tokenHex: String?) -> PushNotification {
        PushNotification(
            jobID: "job-1", app: "com.example.shop", token: Self.token, tokenHex: tokenHex,
            payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), expiry: 0, priority: .immediate)
    }

    @Test func theGivenHexIsKeptAndAMissingOneIsMade() {
        let given = Self.token.hex
        #expect(notification(tokenHex: given).tokenHex == given)
        #expect(notification(tokenHex: nil).tokenHex == given)
    }

    /// A kept hex never outlives its token: a copy given another token answers that token's hex, and the
    /// original keeps its own.
    @Test func anotherTokenDropsTheKeptHex() throws {
        let original = notification(tokenHex: Self.token.hex)
        var changed = original
        let other = try DeviceToken(hex: String(repeating: "0f", count: 32))
        changed.token = other
        #expect(changed.tokenHex == other.hex)
        #expect(original.tokenHex == Self.token.hex)
    }
}
