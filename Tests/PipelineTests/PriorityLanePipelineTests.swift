import APNsProtocol
import Foundation
import HTTP2Simulator
import Kafka
import Redis
import Sender
import TestSupport
import Testing

@testable import Pipeline

/// The priority lane (`kafka.priority_topic`, `docs/design.md §1.4`) end to end: Kafka (mock cluster
/// over TCP) → a real redis-server → the HTTP/2 simulator over TLS.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct PriorityLanePipelineTests {
    static let priorityTopic = "apns.priority"

    static func priorityJob(_ i: Int) -> String {
        #"{"id":"urgent-\#(i)","app":"\#(shop)","token":"\#(token(10_000 + i).hex)","payload":{"aps":{"alert":"code \#(i)"}}}"#
    }

    /// A campaign's backlog fills the bulk lane (its in-flight budget spent, the connections' queues
    /// full, Apple's stand-in answering slowly); single jobs published to the priority topic afterwards
    /// are recorded by the simulator before most of that backlog, each once. A
    /// campaign's job on the priority topic is dead-lettered (`campaign-on-priority-topic`). Order is
    /// read from the simulator's records, never from timings.
    @Test func priorityJobsOvertakeABulkBacklog() async throws {
        let stack = try await Stack(extraTopics: [.init(name: Self.priorityTopic, partitions: 2)])
        let sim = try await HTTP2Simulator.startedForTests { config in
            config.maxConcurrentStreams = 4
            config.faults.responseDelayMillis = 5
        }
        var c = HTTP2PipelineTests.configuration(stack, sim)
        c.kafka.priorityTopic = Self.priorityTopic
        c.priorityMaxInFlight = 50
        let pipeline = RunningPipeline(c)
        // The priority lane is up (its consumer assigned): one job through it first.
        try await stack.publishRaw([Self.priorityJob(999)], topic: Self.priorityTopic)
        try await eventually("the first priority job is recorded", timeout: .seconds(300)) {
            Self.recorded(sim, prefix: "urgent-999") == 1
        }
        let campaignSize = 3000
        try await stack.publish(campaign: "bulk", template: template, tokens: (0..<campaignSize).map(token))
        // The backlog is under way: the first bulk jobs reached the simulator.
        try await eventually("the campaign is being sent", timeout: .seconds(300)) {
            Self.recorded(sim, prefix: "bulk:") >= 100
        }
        let urgent = 20
        try await stack.publishRaw((0..<urgent).map(Self.priorityJob), topic: Self.priorityTopic)
        let campaignJob =
            #"{"id":"oops:1","app":"\#(shop)","token":"\#(token(20_000).hex)","campaign":"oops","payload":{"aps":{"alert":"x"}}}"#
        try await stack.publishRaw([campaignJob], topic: Self.priorityTopic)
        try await eventually("the priority jobs are recorded", timeout: .seconds(300)) {
            Self.recorded(sim, prefix: "urgent-") >= urgent + 1
        }
        try await stack.waitAccepted("bulk", count: Int64(campaignSize), timeout: .seconds(300))
        try await eventually("the campaign job on the priority topic is dead-lettered") {
            (try await stack.campaign("oops")["dead_lettered"] ?? 0) == 1
        }
        try await pipeline.stop()
        try await sim.stop()
        await stack.stop()

        let order = sim.records.compactMap(\.jobID)
        let urgentAt = order.indices.filter { order[$0].hasPrefix("urgent-") && order[$0] != "urgent-999" }
        // Each once (distinct tokens over two partitions and two connections: no order among them).
        #expect(urgentAt.map { order[$0] }.sorted() == (0..<urgent).map { "urgent-\($0)" }.sorted())
        let bulkAfter = order[(urgentAt.last! + 1)...].filter { $0.hasPrefix("bulk:") }.count
        let bulkBefore = order[..<urgentAt.first!].filter { $0.hasPrefix("bulk:") }.count
        // Published when ~100 of 3000 were recorded and the in-flight budget (2000) was spent: without
        // the lane they would come after everything already taken (~2000 more).
        #expect(bulkAfter >= campaignSize / 2, "\(bulkBefore) bulk jobs before the first priority job, \(bulkAfter) after the last")
        #expect(Set(order.filter { $0.hasPrefix("bulk:") }).count == campaignSize)
        #expect(!order.contains("oops:1"), "a campaign's job on the priority topic is never sent")
    }

    static func recorded(_ sim: HTTP2Simulator, prefix: String) -> Int {
        sim.records.reduce(0) { n, r in n + ((r.jobID?.hasPrefix(prefix) ?? false) ? 1 : 0) }
    }

    /// `kafka.priority_topic` and `pipeline.priority_max_in_flight` as read from a pipeline file, and
    /// the errors for a bad value.
    @Test func configuration() throws {
        func load(_ kafka: String, pipeline: String = "") throws -> PipelineConfiguration {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
            let certs = TestCertificates.directory
            try
                ("kafka:\n" + kafka + (pipeline.isEmpty ? "" : "pipeline:\n" + pipeline)
                + "apps:\n  - bundle_id: \(shop)\n    certificate: \(certs)/\(shop).pem\n    key: \(certs)/\(shop).key\n")
                .write(toFile: path, atomically: true, encoding: .utf8)
            return try PipelineConfiguration.load(file: path, environment: [:])
        }
        let none = try load("  group: g\n")
        #expect(none.kafka.priorityTopic == nil && none.priorityMaxInFlight == 1000)
        let set = try load("  priority_topic: apns.priority\n", pipeline: "  priority_max_in_flight: 200\n")
        #expect(set.kafka.priorityTopic == "apns.priority" && set.priorityMaxInFlight == 200)
        for (kafka, pipeline, key, problem) in [
            ("  priority_topic: apns.jobs\n", "", "kafka.priority_topic", "already kafka.jobs_topic"),
            ("  priority_topic: apns.jobs.dlq\n", "", "kafka.priority_topic", "already kafka.dead_letter_topic"),
            ("  priority_topic: apns.registrations\n", "", "kafka.priority_topic", "already kafka.registrations_topic"),
            ("  priority_topic: \"\"\n", "", "kafka.priority_topic", ""),
            ("  priority_topic: [a, b]\n", "", "kafka.priority_topic", ""),
            ("  priority_topic: p\n", "  priority_max_in_flight: 0\n", "pipeline.priority_max_in_flight", ""),
        ] {
            do {
                _ = try load(kafka, pipeline: pipeline)
                Issue.record("loaded: \(kafka)\(pipeline)")
            } catch let error as ConfigurationError {
                #expect(error.key == key, "\(error)")
                #expect(problem.isEmpty || error.problem.contains(problem), "\(error)")
            }
        }
    }

    /// The latency histogram's source: a priority job's publish time (its Kafka timestamp) to its
    /// accepted outcome; bulk outcomes and refusals are not looked at; settled jobs are forgotten.
    @Test func priorityClockMeasuresPublishToAccepted() {
        let clock = PriorityClock()
        let published: Int64 = 1_000_000
        clock.note(
            (0..<3).map {
                KafkaConsumerMessage(
                    topic: Self.priorityTopic, partition: 1, offset: Int64($0), key: nil, value: [],
                    timestampMilliseconds: published + Int64($0))
            })
        func outcome(_ offset: Int64, lane: Lane, accepted: Bool) -> Sender.Outcome {
            let n = PushNotification(
                jobID: "j\(offset)", app: shop, token: token(Int(offset)), payload: Array("{}".utf8), expiry: 0, priority: .immediate,
                position: SourcePosition(partition: 1, offset: offset, lane: lane))
            return Sender.Outcome(
                notification: n, delivery: accepted ? .accepted : .rejected(.badRequest(reason: "BadTopic")), attempts: 1, connection: 0)
        }
        let batch = OutcomeBatch(
            app: shop, connection: 0,
            outcomes: [
                outcome(0, lane: .priority, accepted: true), outcome(1, lane: .bulk, accepted: true),
                outcome(2, lane: .priority, accepted: false),
            ],
            events: SenderEvents())
        #expect(clock.acceptedLatencies(batch, nowMs: published + 40) == [40])
        clock.forget([MessageRef(topic: Self.priorityTopic, partition: 1, offset: 0)])
        #expect(clock.count == 2)
        #expect(clock.acceptedLatencies(batch, nowMs: published + 40).isEmpty)
    }
}
