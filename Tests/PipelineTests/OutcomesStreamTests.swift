import APNsProtocol
import Foundation
import GatewaySimulator
import HTTP2Simulator
import Kafka
import Logging
import Pipeline
import Redis
import ServiceLifecycle
import TestSupport
import Testing

/// `kafka.outcomes_topic` (issue 30, item 4): one message per settled job, keyed by token, against real
/// servers — the Kafka mock cluster over TCP, redis-server, the HTTP/2 simulator over TLS.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct OutcomesStreamTests {
    static let topic = "apns.outcomes"

    /// A message read from the outcomes topic: its key and its JSON value.
    struct Read {
        var key: String?
        var value: JSONValue
        var id: String? { value["id"]?.stringValue }
        var outcome: String? { value["outcome"]?.stringValue }
    }

    /// Reads the outcomes topic from its start until `done` says enough.
    static func read(_ stack: Stack, group: String, until done: @escaping ([Read]) -> Bool) async throws -> [Read] {
        let consumer = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: stack.cluster.bootstrapServers, groupID: group, topics: [topic], sessionTimeout: .seconds(6)),
            logger: testLogger)
        var all: [Read] = []
        do {
            try await eventually("outcome messages read (\(all.count) so far)", timeout: .seconds(300)) {
                if let batch = await consumer.nextBatch() {
                    for m in batch {
                        all.append(Read(key: m.key.map { String(decoding: $0, as: UTF8.self) }, value: try JSONParser.parse(m.value)))
                    }
                }
                return done(all)
            }
        } catch {
            await consumer.close()
            throw error
        }
        await consumer.close()
        return all
    }

    @Test func oneMessagePerSettledJobWithItsOutcome() async throws {
        let unregisteredAt = Int64(Date().timeIntervalSince1970) - 3600
        var faults = HTTP2FaultScript()
        faults.invalidTokens = [token(3).hex]
        faults.uninstalledTokens = [token(4).hex]
        faults.unregisteredTimestampMillis = unregisteredAt * 1000
        let stack = try await Stack()
        try stack.cluster.createTopic(Self.topic, partitions: 2)
        let sim = try await HTTP2PipelineTests.simulator(faults)
        var config = HTTP2PipelineTests.configuration(stack, sim)
        config.kafka.outcomesTopic = Self.topic
        let pipeline = RunningPipeline(config)

        func job(_ id: String, _ t: Int, alert: String = "x") -> String {
            #"{"id":"\#(id)","app":"com.example.shop","token":"\#(token(t).hex)","payload":{"aps":{"alert":"\#(alert)"}}}"#
        }
        // Accepted, rejected twice (400 BadDeviceToken, 410 Unregistered), dead-lettered at the send stage
        // (too large for HTTP/2) and by the decoder (not JSON: no id), and a campaign's three jobs.
        try await stack.publishRaw([
            job("o-acc", 1), job("o-bad", 3), job("o-gone", 4), job("o-big", 5, alert: String(repeating: "x", count: 4100)),
            "not json",
        ])
        let audience = [token(10), token(11), token(12)]
        try await stack.publish(campaign: "c", template: template, tokens: audience)
        let first = try await Self.read(stack, group: "reader-1") { $0.count >= 8 }
        // Then: the accepted job again (deduped) and a new job for the 410 token (suppressed).
        try await stack.publishRaw([job("o-acc", 1), job("o-gone-2", 4)])
        let all = try await Self.read(stack, group: "reader-2") { $0.count >= 10 }
        try await pipeline.stop()

        // Exactly one message per settled job, each with its outcome.
        let outcomes = all.map { "\($0.id ?? "null") \($0.outcome ?? "-")" }.sorted()
        let campaignIDs = audience.map { "c:\($0.hex) accepted" }
        #expect(
            outcomes
                == ([
                    "null dead_lettered", "o-acc accepted", "o-acc deduped", "o-bad rejected", "o-big dead_lettered", "o-gone rejected",
                    "o-gone-2 suppressed",
                ] + campaignIDs).sorted(), "\(outcomes)")
        #expect(first.count == 8)
        func message(_ id: String?, _ outcome: String) throws -> Read {
            try #require(all.first { $0.id == id && $0.outcome == outcome }, "\(id ?? "null") \(outcome)")
        }

        // Accepted: key = token, the request's apns-id (the simulator recorded the same), no refusal.
        let accepted = try message("o-acc", "accepted")
        #expect(accepted.key == token(1).hex)
        #expect(accepted.value["token"]?.stringValue == token(1).hex)
        #expect(accepted.value["app"]?.stringValue == shop)
        #expect(accepted.value["apns_id"]?.stringValue == sim.records.first { $0.jobID == "o-acc" }?.apnsID)
        #expect(accepted.value["apns_id"]?.stringValue?.count == 36)
        for key in ["campaign", "reason", "code", "since"] { #expect(accepted.value[key] == .null, "\(key)") }
        let at = try #require(accepted.value["at"]?.intValue)
        #expect(abs(Int64(at) - Int64(Date().timeIntervalSince1970)) < 600, "at is the settle time in epoch seconds")

        // Rejected: the gateway's code, what it means, and for a 410 Apple's timestamp in seconds.
        let bad = try message("o-bad", "rejected")
        #expect(bad.value["code"]?.stringValue == "BadDeviceToken")
        #expect(bad.value["reason"]?.stringValue == "invalid-token")
        #expect(bad.value["since"] == .null)
        let gone = try message("o-gone", "rejected")
        #expect(gone.key == token(4).hex)
        #expect(gone.value["code"]?.stringValue == "Unregistered")
        #expect(gone.value["reason"]?.stringValue == "unregistered")
        #expect(gone.value["since"]?.intValue == Int(unregisteredAt))
        #expect(gone.value["apns_id"]?.stringValue?.count == 36)

        // Settled before a gateway: no apns-id, no code.
        let suppressed = try message("o-gone-2", "suppressed")
        #expect(suppressed.key == token(4).hex)
        #expect(suppressed.value["apns_id"] == .null)
        #expect(try message("o-acc", "deduped").value["apns_id"] == .null)
        let big = try message("o-big", "dead_lettered")
        #expect(big.value["reason"]?.stringValue == "payload-too-large")
        #expect(big.key == token(5).hex)
        let notJSON = try message(nil, "dead_lettered")
        #expect(notJSON.key == nil)
        #expect(notJSON.value["reason"]?.stringValue == "invalid-json")
        #expect(notJSON.value["token"] == .null && notJSON.value["app"] == .null)

        // A campaign's jobs: their ids (made from campaign and token) and the campaign.
        for t in audience {
            let m = try message("c:\(t.hex)", "accepted")
            #expect(m.value["campaign"]?.stringValue == "c")
            #expect(m.key == t.hex)
        }

        #expect(pipeline.runner.observations.finalCommitPositions.values.reduce(0, +) == 10)
        try await sim.stop()
        await stack.stop()
    }

    /// The same over the binary interface: status 8 is `rejected` with code `8`, no apns-id (the binary
    /// interface has none), a campaign's accepted jobs settled by time or by the drain probe.
    @Test func overTheBinaryInterface() async throws {
        var faults = FaultScript()
        faults.invalidTokens = [token(2).hex]
        let stack = try await Stack(faults: faults)
        try stack.cluster.createTopic(Self.topic, partitions: 2)
        var config = stack.configuration()
        config.kafka.outcomesTopic = Self.topic
        let pipeline = RunningPipeline(config)
        let audience = (0..<4).map(token)
        try await stack.publish(campaign: "b", template: template, tokens: audience)
        let all = try await Self.read(stack, group: "reader") { $0.count >= 4 }
        try await pipeline.stop()
        let outcomes = all.map { "\($0.id ?? "null") \($0.outcome ?? "-")" }.sorted()
        #expect(outcomes == audience.map { "b:\($0.hex) \($0 == token(2) ? "rejected" : "accepted")" }.sorted(), "\(outcomes)")
        for m in all {
            #expect(m.key == m.value["token"]?.stringValue)
            #expect(m.value["apns_id"] == .null)
            #expect(m.value["campaign"] == "b")
        }
        let rejected = try #require(all.first { $0.outcome == "rejected" })
        #expect(rejected.value["code"] == "8" && rejected.value["reason"] == "invalid-token" && rejected.value["since"] == .null)
        #expect(pipeline.runner.observations.finalCommitPositions.values.reduce(0, +) == 4)
        await stack.stop()
    }

    /// An outcomes topic that refuses writes holds the settle back (logged; nothing recorded, nothing
    /// committed), and once it takes them again the job settles with its message.
    @Test func aFailingOutcomesTopicHoldsTheSettleBack() async throws {
        let stack = try await Stack()
        try stack.cluster.createTopic(Self.topic, partitions: 2)
        stack.cluster.setTopicError(Self.topic, code: 29)  // TOPIC_AUTHORIZATION_FAILED
        let sim = try await HTTP2PipelineTests.simulator(HTTP2FaultScript())
        var config = HTTP2PipelineTests.configuration(stack, sim)
        config.kafka.outcomesTopic = Self.topic
        config.kafka.deadLetterTimeoutMs = 1000
        let captured = CapturedLog()
        var logger = Logger(label: "outcomes-test") { _ in CapturingLogHandler(captured) }
        logger.logLevel = .notice
        let pipeline = RunningPipeline(config, logger: logger)
        let t = token(7).hex
        try await stack.publishRaw([
            #"{"id":"late","app":"com.example.shop","token":"\#(t)","payload":{"aps":{"alert":"x"}}}"#
        ])
        try await eventually("the job was sent") { sim.records.contains { $0.jobID == "late" } }
        // Logged at once, then at most every 10 s however often it is retried (SinkReadinessTests).
        try await eventually("the failed outcome write was logged") {
            captured.lines.contains { $0.hasPrefix("outcome messages not delivered") }
        }
        #expect(
            try await stack.store.readStats().totals[.accepted] == 0, "not recorded in Redis before its outcome message is delivered")
        #expect(captured.lines.contains { $0.contains("outcomes.topic=\(Self.topic)") })

        stack.cluster.setTopicError(Self.topic, code: 0)
        try await eventually("settled once the outcomes topic takes it") { try await stack.store.readStats().totals[.accepted] == 1 }
        let read = try await Self.read(stack, group: "reader") { $0.contains { $0.id == "late" } }
        #expect(read.filter { $0.id == "late" }.allSatisfy { $0.outcome == "accepted" && $0.key == t })
        #expect(captured.lines.contains { $0.hasPrefix("outcome messages delivered after") })
        try await pipeline.stop()
        #expect(pipeline.runner.observations.finalCommitPositions.values.reduce(0, +) == 1)
        try await sim.stop()
        await stack.stop()
    }
}
