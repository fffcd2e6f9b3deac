import APNsProtocol
import Foundation
import Jobs
import Testing

/// Issue 31: today's `aps` keys, Live Activities per event, priority 1 — decoder rules, each with the
/// reason and the key it names. Apple's documented example payloads are fixtures (Fixtures/Apple).
@Suite struct TodaysPayloadTests {
    let decoder = JobDecoder(payloadLimit: 4096)
    let now = Fixtures.now

    /// An Apple example payload, as raw JSON text.
    static func apple(_ name: String) throws -> String {
        let url = try #require(Bundle.module.url(forResource: name, withExtension: "json", subdirectory: "Apple"))
        return try String(contentsOf: url, encoding: .utf8)
    }

    func decode(_ changes: [String: String?]) throws(JobError) -> Job {
        try decoder.checkedDecode(Fixtures.job(changes), now: now)
    }

    /// The error for a job with `changes` (nil when accepted: the caller's #expect then fails).
    func error(_ changes: [String: String?], sourceLocation: SourceLocation = #_sourceLocation) -> JobError? {
        decoder.refusal(Fixtures.job(changes), now: now, sourceLocation: sourceLocation)
    }

    static let liveActivity = Fixtures.quoted("liveactivity")

    // MARK: Apple's examples

    @Test(arguments: [
        "live-activity-start", "live-activity-start-input-push-token", "live-activity-start-input-push-channel", "live-activity-update",
        "live-activity-update-relevance-score", "live-activity-update-curl", "live-activity-end",
    ])
    func appleLiveActivityExamplesAreAccepted(_ name: String) throws {
        let payload = try Self.apple(name)
        for priority in ["10", "5"] {
            let job = try decode(["payload": payload, "push_type": Self.liveActivity, "priority": priority])
            #expect(job.pushType == .liveactivity)
            #expect(try LiveActivityPayload.validate(job.payload).rawValue == name.split(separator: "-")[2].description)
        }
    }

    @Test func appleNotificationExamplesAreAccepted() throws {
        // Critical alert: the sound dictionary is refused by the 2015 rules ("expected a string").
        let critical = try decode(["payload": try Self.apple("critical-alert")])
        #expect(critical.payload.aps.other.first?.key == "sound")
        #expect(critical.payload.isContentAvailableOnly == false)
        // Title, subtitle, body and category; localized body; background; widgets.
        let game = try decode(["payload": try Self.apple("alert-title-subtitle")])
        #expect(game.payload.aps.category == "GAME_INVITATION")
        _ = try decode(["payload": try Self.apple("alert-localized")])
        #expect(try decode(["payload": try Self.apple("sound-badge")]).payload.aps.sound == "bingbong.aiff")
        let silent = try decode(["payload": try Self.apple("background"), "push_type": Fixtures.quoted("background")])
        #expect(silent.priority == .conservePower)
        _ = try decode(["payload": try Self.apple("widgets"), "push_type": Fixtures.quoted("widgets"), "priority": "5"])
    }

    @Test func aDictionarySoundIsSentAsGiven() throws {
        let job = try decode(["payload": try Self.apple("critical-alert")])
        let bytes = try job.encodedPayload(language: nil, encoder: PayloadEncoder(limit: 4096))
        let sent = try JSONParser.parse(bytes)
        #expect(
            sent["aps"]?["sound"] == .object([("critical", .number("1")), ("name", .string("my_sound.wav")), ("volume", .number("1.0"))]))
    }

    // MARK: Live Activities

    /// A valid update with the `aps` keys changed (raw JSON text; nil removes the key).
    static func la(_ changes: [String: String?] = [:], event: String = "update") -> String {
        var members: [(String, String)] = [
            ("event", Fixtures.quoted(event)), ("timestamp", "1767000000"), ("content-state", #"{"home":1,"away":0}"#),
        ]
        if event == "start" {
            members += [
                ("attributes-type", #""ScoreAttributes""#), ("attributes", #"{"match":"A-B"}"#),
                ("alert", #"{"title":"Kick-off","body":"A-B"}"#),
            ]
        }
        for (key, value) in changes.sorted(by: { $0.key < $1.key }) {
            members.removeAll { $0.0 == key }
            if let value { members.append((key, value)) }
        }
        return #"{"aps":{"# + members.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}}"
    }

    func laError(_ aps: String, priority: String = "10", sourceLocation: SourceLocation = #_sourceLocation) -> JobError? {
        error(["payload": aps, "push_type": Self.liveActivity, "priority": priority], sourceLocation: sourceLocation)
    }

    @Test func liveActivityEventsAccepted() throws {
        for event in ["start", "update", "end"] {
            let job = try decode(["payload": Self.la(event: event), "push_type": Self.liveActivity])
            #expect(try LiveActivityPayload.validate(job.payload) == LiveActivityPayload.Event(rawValue: event))
        }
        // Optional keys with their types.
        let full = Self.la(
            ["stale-date": "1767003600", "dismissal-date": "1767007200", "relevance-score": "75.5", "input-push-token": "1"],
            event: "start")
        _ = try decode(["payload": full, "push_type": Self.liveActivity])
        _ = try decode(["payload": Self.la(["input-push-channel": #""dHJ1ZQ==""#], event: "start"), "push_type": Self.liveActivity])
    }

    @Test(
        arguments: [
            // (aps changes, event, the path the detail names)
            (["event": nil], "update", "aps.event"),
            (["event": #""pause""#], "update", "aps.event"),
            (["event": "1"], "update", "aps.event"),
            (["timestamp": nil], "update", "aps.timestamp"),
            (["timestamp": #""1767000000""#], "update", "aps.timestamp"),
            (["timestamp": "1767000000.5"], "end", "aps.timestamp"),
            (["timestamp": "-1"], "end", "aps.timestamp"),
            (["content-state": nil], "update", "aps.content-state"),
            (["content-state": nil], "end", "aps.content-state"),
            (["content-state": "[1]"], "update", "aps.content-state"),
            (["attributes-type": nil], "start", "aps.attributes-type"),
            (["attributes-type": #""""#], "start", "aps.attributes-type"),
            (["attributes": nil], "start", "aps.attributes"),
            (["attributes": #""A-B""#], "start", "aps.attributes"),
            (["alert": nil], "start", "aps.alert"),
            (["stale-date": #""tomorrow""#], "update", "aps.stale-date"),
            (["dismissal-date": "1.5"], "end", "aps.dismissal-date"),
            (["input-push-token": "true"], "start", "aps.input-push-token"),
            (["input-push-channel": "7"], "start", "aps.input-push-channel"),
        ] as [([String: String?], String, String)])
    func liveActivityRefusals(_ changes: [String: String?], _ event: String, _ path: String) {
        let e = laError(Self.la(changes, event: event))
        #expect(e?.reason == .invalidLiveActivity, "\(changes) on \(event)")
        #expect(e?.detail.contains("payload \(path): expected") == true, "\(e?.detail ?? "accepted")")
    }

    @Test func liveActivityPriority() throws {
        #expect(try decode(["payload": Self.la(), "push_type": Self.liveActivity, "priority": "5"]).priority == .conservePower)
        let one = laError(Self.la(), priority: "1")
        #expect(one?.reason == .invalidPriority)
        #expect(one?.detail.contains("Live Activity") == true)
    }

    @Test func liveActivityKeysAreNotCheckedForOtherPushTypes() throws {
        // An alert that happens to carry "event": 7 is not a Live Activity.
        _ = try decode(["payload": #"{"aps":{"alert":"hi","event":7,"timestamp":"x"}}"#])
        // The relevance score of a notification is 0…1, a Live Activity's is any number.
        #expect(error(["payload": #"{"aps":{"alert":"hi","relevance-score":100}}"#])?.reason == .invalidPayload)
        _ = try decode(["payload": Self.la(["relevance-score": "100"]), "push_type": Self.liveActivity])
        // Not a number at all: refused by the payload's own rules, whatever the push type.
        let word = laError(Self.la(["relevance-score": #""high""#]))
        #expect(word == JobError(reason: .invalidPayload, detail: "payload.aps.relevance-score: expected a number"))
    }

    // MARK: Priority 1

    @Test func priorityOne() throws {
        let job = try decode(["priority": "1"])
        #expect(job.priority == .powerFirst)
        #expect(job.priority.binaryValue == 5)  // the binary interface has no 1
        _ = try decode(["priority": "1", "push_type": Fixtures.quoted("alert")])
        // A background push must be 5 (Apple); content-available only is a background push.
        let silent = #"{"aps":{"content-available":1}}"#
        #expect(error(["payload": silent, "priority": "1", "push_type": Fixtures.quoted("background")])?.reason == .invalidPushType)
        let inferred = error(["payload": silent, "priority": "1"])
        #expect(inferred?.reason == .invalidPriority)
        #expect(inferred?.detail.contains("priority 1") == true)
        #expect(error(["priority": "2"])?.detail == "priority must be the number 10, 5 or 1, got 2")
        // A location query is answered by waking the device: 10 or 5.
        let location = error(["payload": #"{"aps":{}}"#, "priority": "1", "push_type": Fixtures.quoted("location")])
        #expect(location == JobError(reason: .invalidPriority, detail: "a location push must have priority 10 or 5, got 1"))
        #expect(
            try decode(["payload": #"{"aps":{}}"#, "priority": "5", "push_type": Fixtures.quoted("location")]).priority == .conservePower)
    }

    // MARK: Today's aps keys

    @Test func todaysApsKeysAccepted() throws {
        for level in ["passive", "active", "time-sensitive", "critical"] {
            _ = try decode(["payload": #"{"aps":{"alert":"hi","interruption-level":"\#(level)"}}"#])
        }
        let all = #"""
            {"aps":{"alert":{"title":"t","subtitle":"s","body":"b","subtitle-loc-key":"K","subtitle-loc-args":["a"],
            "summary-arg":"Bob","summary-arg-count":2},"thread-id":"chat-1","target-content-id":"w-1",
            "filter-criteria":"work","relevance-score":0.75,"mutable-content":1,"category":"MSG","badge":3,
            "sound":{"critical":0,"name":"default","volume":0}}}
            """#
        let job = try decode(["payload": all])
        #expect(job.payload.aps.badge == 3)
        #expect(
            job.payload.aps.other.map(\.key) == [
                "thread-id", "target-content-id", "filter-criteria", "relevance-score", "mutable-content", "sound",
            ])
    }

    @Test(arguments: [
        (#"{"aps":{"sound":7}}"#, "payload.aps.sound: expected a string, or a dictionary (critical, name, volume)"),
        (#"{"aps":{"sound":{"critical":2}}}"#, "payload.aps.sound.critical: expected the number 1 (or 0)"),
        (#"{"aps":{"sound":{"name":1}}}"#, "payload.aps.sound.name: expected a string"),
        (#"{"aps":{"sound":{"volume":1.5}}}"#, "payload.aps.sound.volume: expected a number from 0 to 1"),
        (#"{"aps":{"sound":{"volume":"loud"}}}"#, "payload.aps.sound.volume: expected a number from 0 to 1"),
        (
            #"{"aps":{"alert":"a","interruption-level":"urgent"}}"#,
            #"payload.aps.interruption-level: expected one of "passive", "active", "time-sensitive", "critical""#
        ),
        (#"{"aps":{"alert":"a","relevance-score":1.5}}"#, "payload.aps.relevance-score: expected a number from 0 to 1"),
        (#"{"aps":{"alert":"a","relevance-score":"1"}}"#, "payload.aps.relevance-score: expected a number"),
        (#"{"aps":{"alert":"a","filter-criteria":1}}"#, "payload.aps.filter-criteria: expected a string"),
        (#"{"aps":{"alert":"a","target-content-id":[]}}"#, "payload.aps.target-content-id: expected a string"),
        (#"{"aps":{"alert":"a","thread-id":7}}"#, "payload.aps.thread-id: expected a string"),
        (#"{"aps":{"alert":"a","mutable-content":true}}"#, "payload.aps.mutable-content: expected the number 1 (or 0)"),
        (#"{"aps":{"content-changed":1}}"#, "payload.aps.content-changed: expected true or false"),
        (#"{"aps":{"alert":"a","category":1}}"#, "payload.aps.category: expected a string"),
        (#"{"aps":{"alert":{"subtitle":1}}}"#, "payload.aps.alert.subtitle: expected a string"),
        (#"{"aps":{"alert":{"subtitle-loc-args":"a"}}}"#, "payload.aps.alert.subtitle-loc-args: expected an array of strings"),
        (#"{"aps":{"alert":{"summary-arg":1}}}"#, "payload.aps.alert.summary-arg: expected a string"),
        (#"{"aps":{"alert":{"summary-arg-count":-1}}}"#, "payload.aps.alert.summary-arg-count: expected a whole number ≥ 0"),
        (
            #"{"aps":{"alert":{"title":{"loc-args":["a"]}}}}"#,
            "payload.aps.alert.title: expected a string, or a dictionary with a loc-key string"
        ),
        (#"{"aps":{"alert":{"body":{"loc-key":"K","loc-args":[1]}}}}"#, "payload.aps.alert.body.loc-args: expected an array of strings"),
    ])
    func wrongValuesNameTheKey(_ payload: String, _ detail: String) {
        #expect(error(["payload": payload]) == JobError(reason: .invalidPayload, detail: detail))
    }
}
