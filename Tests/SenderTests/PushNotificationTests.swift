import APNsProtocol
import Testing

@testable import Sender

/// The token hex a notification hands to its outcome (the job's own string when given, else made), and a
/// campaign job's id kept as its campaign and token.
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

    func campaignJob(id: String, campaign: String?) -> PushNotification {
        PushNotification(
            jobID: id, app: "com.example.shop", token: Self.token, payload: Array(#"{"aps":{}}"#.utf8), expiry: 0,
            priority: .immediate, campaign: campaign)
    }

    /// A campaign job's id made from a token of another size (41 bytes: its hex is no multiple of 8
    /// bytes) is answered as the same string and bytes; a prefix or extension of its hex is kept as given.
    @Test func aCampaignJobsIDWithATokenOfAnotherSize() throws {
        let long = try DeviceToken(bytes: (0..<41).map { UInt8($0 * 3) })
        let id = "spring-sale:" + long.hex
        func job(_ id: String) -> PushNotification {
            PushNotification(
                jobID: id, app: "com.example.shop", token: long, payload: Array(#"{"aps":{}}"#.utf8), expiry: 0, priority: .immediate,
                campaign: "spring-sale")
        }
        let made = job(id)
        #expect(made.keptJobID == nil && made.jobID == id && made.tokenHex == long.hex)
        #expect(made.withJobIDBytes { Array($0) } == Array(id.utf8))
        #expect(PushNotification.campaignJobID(campaign: "spring-sale", token: long) == id)
        for other in [String(id.dropLast(2)), id + "00", "spring-sale:" + long.hex.uppercased()] {
            #expect(job(other).keptJobID == other && job(other).jobID == other)
        }
    }

    /// `<campaign>:<token hex>` is not kept as a string but answered the same, as a string and as bytes
    /// (the `apns-id` hashes those); any other id, or one naming another token or campaign, is kept as given.
    @Test func aCampaignJobsIDIsMadeFromItsCampaignAndToken() {
        let id = "spring-sale:" + Self.token.hex
        let made = campaignJob(id: id, campaign: "spring-sale")
        #expect(made.keptJobID == nil)
        #expect(made.jobID == id)
        #expect(made.withJobIDBytes { Array($0) } == Array(id.utf8))
        #expect(PushNotification.campaignJobID(campaign: "spring-sale", token: Self.token) == id)
        #expect(SettledNotification(made, attempts: 1, processingFailures: 0).jobID == id)

        for (other, campaign) in [
            (id, "spring"), ("spring-sale:" + String(repeating: "0f", count: 32), "spring-sale"),
            ("spring-sale:" + Self.token.hex.uppercased(), "spring-sale"), ("spring-sale-" + Self.token.hex, "spring-sale"),
            ("job-7", "spring-sale"),
        ] {
            let kept = campaignJob(id: other, campaign: campaign)
            #expect(kept.keptJobID == other)
            #expect(kept.jobID == other)
            #expect(kept.withJobIDBytes { Array($0) } == Array(other.utf8))
        }
        #expect(campaignJob(id: id, campaign: nil).keptJobID == id)
    }

    /// A made id never changes with the campaign or token it was made from: changing either keeps the
    /// id as it was.
    @Test func aMadeIDOutlivesAChangeOfItsParts() throws {
        let id = "spring-sale:" + Self.token.hex
        var retokened = campaignJob(id: id, campaign: "spring-sale")
        retokened.token = try DeviceToken(hex: String(repeating: "0f", count: 32))
        #expect(retokened.jobID == id)
        var renamed = campaignJob(id: id, campaign: "spring-sale")
        renamed.campaign = nil
        #expect(renamed.jobID == id)
    }
}
