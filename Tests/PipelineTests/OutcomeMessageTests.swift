import APNsProtocol
import Foundation
import Kafka
import Redis
import Sender
import TestSupport
import Testing

@testable import Pipeline

/// The outcomes stream's messages (design §3.5) as bytes, and which outcomes make which message,
/// without a server.
@Suite struct OutcomeMessageTests {
    static let token = try! DeviceToken(hex: String(repeating: "ab", count: 32))

    static func parse(_ m: OutcomeMessage, at: Int64 = 1_764_000_000) throws -> [String: JSONValue] {
        let bytes = m.value(at: at)
        // Valid JSON for another parser too, not only ours.
        _ = try JSONSerialization.jsonObject(with: Data(bytes))
        let value = try JSONParser.parse(bytes)
        return Dictionary(uniqueKeysWithValues: try #require(value.objectValue).map { ($0.key, $0.value) })
    }

    @Test func everyKeyIsWrittenUnknownOnesAsNull() throws {
        let m = OutcomeMessage(id: "job-1", app: "com.example.shop", token: Self.token.hex, campaign: nil, outcome: .accepted)
        let fields = try Self.parse(m)
        #expect(
            fields.keys.sorted() == ["apns_id", "app", "at", "campaign", "code", "id", "outcome", "reason", "since", "token"].sorted())
        #expect(fields["id"] == "job-1")
        #expect(fields["outcome"] == "accepted")
        #expect(fields["at"]?.intValue == 1_764_000_000)
        for key in ["campaign", "reason", "code", "apns_id", "since"] { #expect(fields[key] == .null, "\(key)") }
        #expect(m.key == Array(Self.token.hex.utf8))
        // The keys in the documented order.
        let text = String(decoding: m.value(at: 5), as: UTF8.self)
        #expect(
            text
                == #"{"id":"job-1","app":"com.example.shop","token":"\#(Self.token.hex)","campaign":null,"outcome":"accepted","reason":null,"code":null,"apns_id":null,"since":null,"at":5}"#
        )
    }

    @Test func idsAndCampaignsAreEscaped() throws {
        let id = "quote \" backslash \\ newline \n tab \t nul \u{0} é 🚀"
        let m = OutcomeMessage(id: id, app: "com.example.shop", token: Self.token.hex, campaign: "c\"1", outcome: .rejected, code: "8")
        let fields = try Self.parse(m)
        #expect(fields["id"]?.stringValue == id)
        #expect(fields["campaign"]?.stringValue == "c\"1")
        #expect(fields["code"] == "8")
    }

    @Test func aBroadcastNamesItsChannelInPlaceOfAToken() throws {
        let m = OutcomeMessage(id: "b-1", app: "com.example.shop", channel: "dHdpbnM=", outcome: .accepted, apnsID: "x")
        let fields = try Self.parse(m)
        #expect(fields["channel"] == "dHdpbnM=")
        #expect(fields["token"] == nil)
        #expect(m.key == Array("dHdpbnM=".utf8))
    }

    @Test func aMessageThatWasNoJobHasNoKey() throws {
        let m = OutcomeMessage(outcome: .deadLettered, reason: "invalid-json")
        #expect(m.key == nil)
        let fields = try Self.parse(m)
        #expect(fields["id"] == .null && fields["token"] == .null && fields["app"] == .null)
        #expect(fields["reason"] == "invalid-json")
    }

    static func outcome(_ id: String, _ delivery: Delivery, code: String? = nil, attempts: Int = 1, offset: Int64) -> Sender.Outcome {
        Sender.Outcome(
            notification: PushNotification(
                jobID: id, app: "com.example.shop", token: token, payload: [], expiry: 0, priority: .immediate, campaign: "c",
                position: SourcePosition(partition: 3, offset: offset)),
            delivery: delivery, code: code, attempts: attempts, connection: 2)
    }

    /// A transport's outcomes make messages only when asked (the topic is set), each with what it knows:
    /// code and meaning of a refusal, a 410's time, the apns-id of HTTP/2 requests actually written.
    @Test func transportOutcomesMakeMessagesOnlyWhenTheTopicIsSet() {
        let batch = OutcomeBatch(
            app: "com.example.shop", connection: 2,
            outcomes: [
                Self.outcome("ok", .accepted, offset: 10),
                Self.outcome(
                    "h410", .rejected(.invalidToken(since: 1_700_000_000, reason: "unregistered")), code: "Unregistered", offset: 11),
                Self.outcome("bad", .rejected(.badRequest(reason: "BadTopic")), code: "BadTopic", offset: 12),
                Self.outcome("busy", .rejected(.transient(reason: "ServiceUnavailable")), code: "ServiceUnavailable", offset: 13),
                Self.outcome("c:" + Self.token.hex, .rejected(.badRequest(reason: "PayloadTooLarge")), attempts: 0, offset: 14),
            ],
            events: SenderEvents())
        let without = OutcomeRecords.settlerShare(batch, topic: "jobs")
        #expect(without.item.messages.isEmpty && without.deadLetterItem.messages.isEmpty)

        let share = OutcomeRecords.settlerShare(
            batch, topic: "jobs", messages: OutcomeMessageOptions(appsWithRequestIDs: ["com.example.shop"]))
        let apnsID = { (id: String) in Self.outcome(id, .accepted, offset: 0).notification.apnsID }
        #expect(
            share.item.messages == [
                OutcomeMessage(
                    id: "ok", app: "com.example.shop", token: Self.token.hex, campaign: "c", outcome: .accepted, apnsID: apnsID("ok")),
                OutcomeMessage(
                    id: "h410", app: "com.example.shop", token: Self.token.hex, campaign: "c", outcome: .rejected, reason: "unregistered",
                    code: "Unregistered", apnsID: apnsID("h410"), since: 1_700_000_000),
            ])
        // Dead-lettered ones settle with their letters, with the letters' reason; one never written has no apns-id.
        #expect(
            share.deadLetterItem.messages == [
                OutcomeMessage(
                    id: "bad", app: "com.example.shop", token: Self.token.hex, campaign: "c", outcome: .deadLettered,
                    reason: "gateway-bad-request", code: "BadTopic", apnsID: apnsID("bad")),
                OutcomeMessage(
                    id: "busy", app: "com.example.shop", token: Self.token.hex, campaign: "c", outcome: .deadLettered,
                    reason: "gateway-gave-up", code: "ServiceUnavailable", apnsID: apnsID("busy")),
                OutcomeMessage(
                    id: "c:" + Self.token.hex, app: "com.example.shop", token: Self.token.hex, campaign: "c", outcome: .deadLettered,
                    reason: "gateway-bad-request"),
            ])
        // A binary app's outcomes carry no apns-id.
        let binary = OutcomeRecords.settlerShare(batch, topic: "jobs", messages: OutcomeMessageOptions(appsWithRequestIDs: []))
        #expect(binary.item.messages.allSatisfy { $0.apnsID == nil })
        // The apns-id is the one the request carries (HTTP2Request's, from the job id).
        #expect(apnsID("ok").count == 36 && apnsID("ok") != apnsID("h410"))
    }

    /// A broadcast's outcome names its channel (the key too), never a token; its answer that would
    /// suppress a device is a dead letter, and says so.
    @Test func aBroadcastsOutcomesNameItsChannel() throws {
        let channel = BroadcastChannelID("dHN0LXNyY2gtMDAwMDAx")!
        func outcome(_ id: String, _ delivery: Delivery, code: String?, offset: Int64) -> Sender.Outcome {
            Sender.Outcome(
                notification: PushNotification(
                    jobID: id, app: "com.example.shop", recipient: .channel(channel), payload: Array(#"{"aps":{}}"#.utf8), expiry: 7,
                    priority: .conservePower, pushType: .liveactivity, position: SourcePosition(partition: 1, offset: offset)),
                delivery: delivery, code: code, attempts: 1, connection: 0)
        }
        let batch = OutcomeBatch(
            app: "com.example.shop", connection: 0,
            outcomes: [
                outcome("ok", .accepted, code: nil, offset: 1),
                outcome("gone", .rejected(.invalidToken(since: 1_700_000_000, reason: "unregistered")), code: "Unregistered", offset: 2),
            ],
            events: SenderEvents())
        let share = OutcomeRecords.settlerShare(
            batch, topic: "jobs", messages: OutcomeMessageOptions(appsWithRequestIDs: ["com.example.shop"]))
        let accepted = try #require(share.item.messages.first)
        #expect(accepted.channel == channel.value && accepted.token == nil && accepted.key == Array(channel.value.utf8))
        #expect(accepted.apnsID == batch.outcomes[0].notification.apnsID)
        let fields = try Self.parse(accepted)
        #expect(fields["channel"]?.stringValue == channel.value && fields["token"] == nil)
        #expect(
            share.deadLetterItem.messages == [
                OutcomeMessage(
                    id: "gone", app: "com.example.shop", channel: channel.value, outcome: .deadLettered, reason: "gateway-bad-request",
                    code: "Unregistered", apnsID: batch.outcomes[1].notification.apnsID)
            ])
    }

    @Test func gateVerdictsMakeMessagesOnlyWhenAsked() {
        struct TestJob: GatedJob {
            var id: String
            var app = "com.example.shop"
            var tokenHex = String(repeating: "cd", count: 32)
            var campaign: String? = nil
        }
        let jobs = [TestJob(id: "a"), TestJob(id: "b"), TestJob(id: "c")]
        let decisions: [GateDecision] = [.deduped, .suppressed, .admitted(language: nil)]
        let ref = { (i: Int) in MessageRef(topic: "apns.jobs", partition: 0, offset: Int64(i)) }
        #expect(GateVerdicts(decisions: decisions, jobs: jobs, isRetry: false, received: 3, ref: ref).settled.messages.isEmpty)
        let v = GateVerdicts(decisions: decisions, jobs: jobs, isRetry: false, received: 3, outcomeMessages: true, ref: ref)
        #expect(
            v.settled.messages == [
                OutcomeMessage(id: "a", app: "com.example.shop", token: jobs[0].tokenHex, outcome: .deduped),
                OutcomeMessage(id: "b", app: "com.example.shop", token: jobs[1].tokenHex, outcome: .suppressed),
            ])
    }

    @Test func theInboxKeepsEveryMessageOfWhatItMerges() async {
        let inbox = SettlerInbox()
        var one = SettlerInbox.Item()
        one.messages = [OutcomeMessage(id: "1", outcome: .accepted)]
        var two = SettlerInbox.Item()
        two.messages = [OutcomeMessage(id: "2", outcome: .deduped)]
        inbox.put(one)
        inbox.put(SettlerInbox.Item())
        inbox.put(two)
        inbox.close()
        let item = await inbox.take()
        #expect(item?.messages.map(\.id) == ["1", "2"])
    }
}

/// `kafka.outcomes_topic` in the pipeline file: optional, a legal topic name, a topic of its own.
@Suite struct OutcomesTopicConfigurationTests {
    func load(_ kafka: String) throws -> PipelineConfiguration {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        let certs = TestCertificates.directory
        try
            ("kafka:\n" + kafka
            + "apps:\n  - bundle_id: \(shop)\n    certificate: \(certs)/\(shop).pem\n    key: \(certs)/\(shop).key\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: path, environment: [:])
    }

    func refusal(_ kafka: String) throws -> ConfigurationError {
        do {
            let c = try load(kafka)
            Issue.record("loaded: \(c.kafka.outcomesTopic ?? "nil")")
            throw TestFailure("loaded")
        } catch let error as ConfigurationError {
            return error
        }
    }

    @Test func offByDefaultAndGiven() throws {
        #expect(try load("  group: g\n").kafka.outcomesTopic == nil)
        #expect(try load("  outcomes_topic: apns.outcomes\n").kafka.outcomesTopic == "apns.outcomes")
    }

    @Test func badNamesAndTopicsInUseAreRefusedByKey() throws {
        // The reader refuses an empty string itself, with the same key.
        #expect(try refusal("  outcomes_topic: \"\"\n").key == "kafka.outcomes_topic")
        for bad in ["\"has space\"", "a/b", "..", String(repeating: "x", count: 250)] {
            let error = try refusal("  outcomes_topic: \(bad)\n")
            #expect(error.key == "kafka.outcomes_topic", "\(error)")
            #expect(error.problem.contains("expected a Kafka topic name"), "\(error)")
        }
        let jobs = try refusal("  outcomes_topic: apns.jobs\n")
        #expect(jobs.key == "kafka.outcomes_topic" && jobs.problem.contains("kafka.jobs_topic"), "\(jobs)")
        let dlq = try refusal("  dead_letter_topic: dlq\n  outcomes_topic: dlq\n")
        #expect(dlq.problem.contains("kafka.dead_letter_topic"), "\(dlq)")
        let registrations = try refusal("  outcomes_topic: apns.registrations\n")
        #expect(registrations.problem.contains("kafka.registrations_topic"), "\(registrations)")
        // With the registrations consumer off, its topic is free.
        #expect(
            try load("  consume_registrations: false\n  outcomes_topic: apns.registrations\n").kafka.outcomesTopic == "apns.registrations")
    }
}
