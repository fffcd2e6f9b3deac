import APNsProtocol
import Testing

@testable import Sender

/// What the grace window keeps of a settled notification: enough to write it again and name its job.
@Suite struct SettledNotificationTests {
    static let token = try! DeviceToken(bytes: (0..<32).map { UInt8($0 * 8 + 7) })

    func notification(jobID: String, campaign: String?) -> PushNotification {
        PushNotification(
            jobID: jobID, app: "com.example.shop", token: Self.token, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8),
            expiry: 1_900_000_000, priority: .conservePower, campaign: campaign, collapseID: "c", pushType: .alert,
            position: SourcePosition(partition: 3, offset: 42))
    }

    /// A campaign's job id (`<campaign>:<token hex>`) is kept as its campaign and rebuilt exactly; the
    /// notification to resend carries what the wire and the logs need.
    @Test func aCampaignJobIDIsRebuiltFromItsCampaign() {
        let n = notification(jobID: "spring-sale:\(Self.token.hex)", campaign: "spring-sale")
        let s = SettledNotification(n, attempts: 2, processingFailures: 1)
        #expect(s.jobIDIsCampaignToken && s.jobID == n.jobID)
        let again = s.notification(app: "com.example.shop")
        #expect(again.jobID == n.jobID && again.app == n.app && again.token == n.token && again.payload == n.payload)
        #expect(again.expiry == n.expiry && again.priority == n.priority && again.campaign == "spring-sale")
        #expect(again.position == nil, "the settler had it when it was reported")
        #expect(s.attempts == 2 && s.processingFailures == 1)
    }

    /// Any other id is kept as it is: another campaign's prefix, upper-case hex, another token, no
    /// campaign, an id of another shape.
    @Test func otherJobIDsAreKeptAsTheyAre() {
        let hex = Self.token.hex
        let ids: [(String, String?)] = [
            ("spring-salf:\(hex)", "spring-sale"), ("spring-sale:\(hex.uppercased())", "spring-sale"),
            ("spring-sale:\(String(repeating: "0", count: 64))", "spring-sale"), ("spring-sale-\(hex)", "spring-sale"),
            ("spring-sale:\(hex)", nil), ("order-1234", "spring-sale"), ("spring-sale:\(hex)0", "spring-sale"),
        ]
        for (id, campaign) in ids {
            let s = SettledNotification(notification(jobID: id, campaign: campaign), attempts: 1, processingFailures: 0)
            #expect(!s.jobIDIsCampaignToken && s.jobID == id && s.notification(app: "com.example.shop").jobID == id, "\(id)")
            #expect(s.notification(app: "com.example.shop").campaign == nil)
        }
    }

    /// The grace window holds tens of thousands of these per shard: they stay this small.
    @Test func itStaysSmall() {
        #expect(MemoryLayout<SettledNotification>.stride <= 64)
        #expect(SettledNotification(notification(jobID: "x", campaign: nil), attempts: 300, processingFailures: 0).attempts == 255)
    }
}
