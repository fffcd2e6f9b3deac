import APNsProtocol
import Foundation
import Jobs
import Testing

/// Issue 31 item 2: a job may name a broadcast `channel` instead of a `token`. Exactly one of the two,
/// a base64 channel id, and a broadcast is a Live Activity; each refusal with its documented reason.
/// The payload is Apple's example Live Activity update (Fixtures/Apple/live-activity-update.json).
@Suite struct BroadcastJobTests {
    let decoder = JobDecoder(payloadLimit: 4096)
    let now = Fixtures.now
    static let channel = "dHN0LXNyY2gtMDAwMDAx"  // base64, as APNs issues channel ids

    func changes(_ extra: [String: String?] = [:]) throws -> [String: String?] {
        var c: [String: String?] = [
            "token": nil, "channel": Fixtures.quoted(Self.channel), "payload": try TodaysPayloadTests.apple("live-activity-update"),
        ]
        for (k, v) in extra { c[k] = v }
        return c
    }

    func decode(_ changes: [String: String?]) throws(JobError) -> Job {
        try decoder.checkedDecode(Fixtures.job(changes), now: now)
    }

    func error(_ changes: [String: String?], sourceLocation: SourceLocation = #_sourceLocation) -> JobError? {
        decoder.refusal(Fixtures.job(changes), now: now, sourceLocation: sourceLocation)
    }

    @Test func aChannelJobIsABroadcastOfALiveActivity() throws {
        let job = try decode(try changes())
        #expect(job.recipient == .channel(BroadcastChannelID(Self.channel)!))
        #expect(job.channel?.value == Self.channel)
        // The push type is inferred: a broadcast carries a Live Activity and nothing else.
        #expect(job.pushType == .liveactivity)
        // Its Redis records are keyed by the channel id, exactly as given (base64 is case-sensitive).
        #expect(job.recipientKey == Self.channel)
        #expect(job.tokenHex.isEmpty)
        let named = try decode(try changes(["push_type": #""liveactivity""#, "priority": "5"]))
        #expect(named.pushType == .liveactivity && named.priority == .conservePower)
    }

    @Test func aDeviceJobKeepsItsToken() throws {
        let job = try decode([:])
        #expect(job.recipient == .device(Fixtures.token))
        #expect(job.channel == nil && job.recipientKey == Fixtures.tokenHex)
    }

    @Test func bothOrNeitherIsRefused() throws {
        let both = error(try changes(["token": Fixtures.quoted(Fixtures.tokenHex)]))
        #expect(both?.reason == .tokenAndChannel)
        #expect(both?.detail.contains("both a token and a channel") == true, "\(String(describing: both))")
        let neither = error(try changes(["channel": nil]))
        #expect(neither?.reason == .invalidToken)
        #expect(neither?.detail.contains("nor a broadcast channel") == true, "\(String(describing: neither))")
        // null counts as absent, as for every key.
        #expect(error(try changes(["channel": "null"]))?.reason == .invalidToken)
        #expect(try decode(try changes(["token": "null"])).channel != nil)
    }

    @Test func aChannelMustBeBase64() throws {
        for bad in [#""""#, #""not base64!""#, #""ab==cd""#, "42", #"["x"]"#, Fixtures.quoted(String(repeating: "A", count: 257))] {
            let e = error(try changes(["channel": bad]))
            #expect(e?.reason == .invalidChannel, "\(bad): \(String(describing: e))")
        }
        // URL-safe alphabet and padding are base64 too.
        #expect(try decode(try changes(["channel": #""ab-_cd==""#])).channel?.value == "ab-_cd==")
    }

    @Test func aBroadcastIsALiveActivityOnly() throws {
        let e = error(try changes(["push_type": #""alert""#]))
        #expect(e?.reason == .invalidPushType)
        #expect(e?.detail.contains("broadcast") == true, "\(String(describing: e))")
        // The Live Activity rules apply: an update needs its content-state; priority 1 is not allowed.
        #expect(error(try changes(["payload": #"{"aps":{"event":"update","timestamp":1767000000}}"#]))?.reason == .invalidLiveActivity)
        #expect(error(try changes(["priority": "1"]))?.reason == .invalidPriority)
    }
}
