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
        // The Live Activity rules apply: an update needs its content-state.
        #expect(error(try changes(["payload": #"{"aps":{"event":"update","timestamp":1767000000}}"#]))?.reason == .invalidLiveActivity)
    }

    /// "Sending broadcast push notification requests to APNs" lists priority 1 for a broadcast ("Specify 1
    /// to prioritize the device's power considerations over all other factors for delivery"); a Live
    /// Activity to a device keeps 10 or 5 ("Set the value for the apns-priority header field to 5 or 10").
    @Test func priorityOneIsABroadcastsNotADevicesLiveActivity() throws {
        #expect(try decode(try changes(["priority": "1"])).priority == .powerFirst)
        let device = error([
            "push_type": #""liveactivity""#, "payload": try TodaysPayloadTests.apple("live-activity-update"), "priority": "1",
        ])
        #expect(device?.reason == .invalidPriority)
        #expect(device?.detail.contains("to a device") == true, "\(String(describing: device))")
    }

    /// A broadcast's own expiry is kept apart from the decoder's default: its apns-expiration follows its
    /// channel's storage policy (design §5.5), not the default time to live.
    @Test func aBroadcastKnowsWhetherItsExpiryIsItsOwn() throws {
        let none = try decode(try changes(["expiry": nil]))
        #expect(none.statedExpiry == nil && none.storagePolicy == nil)
        #expect(none.expiry == now + 86_400)  // the default, which a broadcast does not send
        let own = try decode(try changes(["expiry": "\(now + 600)"]))
        #expect(own.statedExpiry == now + 600)
        #expect(try decode(try changes(["expiry": "0"])).statedExpiry == 0)
        #expect(try decode(try changes(["expiry": "null"])).statedExpiry == nil)
    }

    /// `storage_policy`: the channel's policy as `channel create` prints it; with "no-storage", a nonzero
    /// expiry is refused at once (Apple: "Providing a nonzero expiration for a channel created with the No
    /// Message Stored storage policy results in message rejection").
    @Test func aBroadcastMayStateItsChannelsStoragePolicy() throws {
        #expect(try decode(try changes(["storage_policy": #""no-storage""#])).storagePolicy == .noStorage)
        #expect(try decode(try changes(["storage_policy": #""most-recent""#, "expiry": "\(now + 600)"])).storagePolicy == .mostRecent)
        #expect(try decode(try changes(["storage_policy": #""no-storage""#, "expiry": "0"])).statedExpiry == 0)
        let stored = error(try changes(["storage_policy": #""no-storage""#, "expiry": "\(now + 600)"]))
        #expect(stored?.reason == .expiryOnNoStorageChannel)
        #expect(stored?.detail.contains("No Message Stored") == true, "\(String(describing: stored))")
        for bad in [#""none""#, "0", #""NO-STORAGE""#, Fixtures.quoted(String(repeating: "x", count: 40))] {
            #expect(error(try changes(["storage_policy": bad]))?.reason == .invalidStoragePolicy, "\(bad)")
        }
        // A device job has no channel to have a policy.
        let device = error(["storage_policy": #""most-recent""#])
        #expect(device?.reason == .invalidStoragePolicy && device?.detail.contains("with channel") == true, "\(String(describing: device))")
    }
}
