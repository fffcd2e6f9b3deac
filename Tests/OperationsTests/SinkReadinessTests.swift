import APNsProtocol
import Foundation
import HTTP2Simulator
import Kafka
import Logging
import Operations
import Pipeline
import Redis
import ServiceLifecycle
import Synchronization
import TestSupport
import Testing

/// A topic the pipeline must write to that refuses writes (the librdkafka mock cluster answering
/// TOPIC_AUTHORIZATION_FAILED for it, as `kafka-dev --fault-topic` does): past
/// `pipeline.readiness_grace_s` `/readyz` says not ready and names the topic, `apns_sink_failing_seconds`
/// says how long, the failure lines come at most once per 10 s, and once the topic takes writes again
/// every job settles with its outcome message and its dead letter: nothing dropped.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct SinkReadinessTests {
    static let outcomes = "apns.outcomes"

    @Test func refusingSinksMakeRunNotReadyAndLoseNothing() async throws {
        let cluster = try MockCluster(
            brokers: 1,
            topics: [
                .init(name: "apns.jobs", partitions: 2), .init(name: "apns.jobs.dlq", partitions: 1),
                .init(name: Self.outcomes, partitions: 2),
            ], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        let simulator = try await HTTP2Simulator.startedForTests()

        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 50)
        c.apps = http2Apps()
        c.sendHTTP2(to: simulator)
        c.kafka.outcomesTopic = Self.outcomes
        // Short settings, injected: a write attempt fails after 1 s, and 1 s of failing makes it not ready.
        c.kafka.deadLetterTimeoutMs = 1000
        c.readinessGrace = .seconds(1)
        let captured = CapturedLog()
        var logger = Logger(label: "sink-readiness") { _ in CapturingLogHandler(captured) }
        logger.logLevel = .notice

        let served = try await ServedPipeline(c, logger: logger)
        let base = served.base
        try await eventually("ready", timeout: .seconds(300)) { try await get(base + "/readyz").status == 200 }

        // Both sinks refuse; 20 valid jobs (each settles with an outcome message) and one refused job (a
        // dead letter, then an outcome message).
        cluster.setTopicError(Self.outcomes, code: 29)  // TOPIC_AUTHORIZATION_FAILED
        cluster.setTopicError("apns.jobs.dlq", code: 29)
        let failingSince = ContinuousClock.now
        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        let jobs = (0..<20).map { i in
            #"{"id":"s-\#(i)","app":"com.example.shop","token":"\#(token(i).hex)","payload":{"aps":{"alert":"x"}}}"#
        }
        let refused = #"{"id":"s-bad","app":"com.example.shop","token":"not-hex","payload":{"aps":{"alert":"x"}}}"#
        try await producer.sendBatch(
            (jobs + [refused]).map { KafkaProducerMessage(topic: "apns.jobs", key: nil, value: Array($0.utf8)) })

        var notReady = (status: 0, body: "")
        try await eventually("not ready, naming both topics", timeout: .seconds(300)) {
            notReady = try await get(base + "/readyz")
            return notReady.status == 503 && notReady.body.contains("outcomes topic \(Self.outcomes) has refused writes for")
                && notReady.body.contains("dead-letter topic apns.jobs.dlq has refused writes for")
        }
        #expect(notReady.body.hasPrefix("not ready\n"), "\(notReady.body)")
        #expect(notReady.body.contains("nothing is dropped"))
        // The gauge says which sink and for how long (at least the grace by now: sampled every second).
        let outcomesGauge = #"apns_sink_failing_seconds{sink="outcomes",topic="apns.outcomes"}"#
        let deadLetterGauge = #"apns_sink_failing_seconds{sink="dead_letter",topic="apns.jobs.dlq"}"#
        try await eventually("the gauges show both sinks failing", timeout: .seconds(300)) {
            let text = try await get(base + "/metrics").body
            return (sample(text, outcomesGauge) ?? 0) >= 1 && (sample(text, deadLetterGauge) ?? 0) >= 1
        }
        // Several failed attempts of the dead letter (1 s each, and the back-off between them), logged at
        // most once per 10 s.
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await eventually("four dead-letter attempts failed", timeout: .seconds(300)) {
            try await store.readStats().totals[.deadLetterFailures] >= 4
        }
        let elapsed = ContinuousClock.now - failingSince
        let allowed = 1 + Int(elapsed.components.seconds / 10)
        let lines = captured.lines
        let deadLetterLines = lines.filter { $0.hasPrefix("dead-letter write failed") }
        let outcomeLines = lines.filter { $0.hasPrefix("outcome messages not delivered") }
        let attempts = try await store.readStats().totals[.deadLetterFailures]
        #expect(!deadLetterLines.isEmpty && deadLetterLines.count <= allowed, "\(deadLetterLines.count) lines in \(elapsed)")
        #expect(Int64(deadLetterLines.count) < attempts, "\(deadLetterLines.count) lines for \(attempts) failed attempts")
        #expect(!outcomeLines.isEmpty && outcomeLines.count <= allowed, "\(outcomeLines.count) lines in \(elapsed)")
        #expect(deadLetterLines.allSatisfy { $0.contains("dlq.topic=apns.jobs.dlq") && $0.contains("dlq.failing_for_s=") })
        #expect(outcomeLines.allSatisfy { $0.contains("outcomes.topic=\(Self.outcomes)") && $0.contains("outcomes.writes_failing=") })
        #expect(try await store.readStats().totals[.accepted] == 0, "nothing recorded before its outcome message is delivered")

        // The topics take writes again: ready, and every job settled once, with its message.
        cluster.setTopicError(Self.outcomes, code: 0)
        cluster.setTopicError("apns.jobs.dlq", code: 0)
        try await eventually("ready again", timeout: .seconds(300)) { try await get(base + "/readyz").status == 200 }
        try await eventually("every job settled", timeout: .seconds(300)) {
            let totals = try await store.readStats().totals
            return totals[.accepted] == 20 && totals[.deadLettered] == 1
        }
        // At least once: a message may come twice; each job's is there, with its outcome.
        func outcomesRead(_ read: [KafkaConsumerMessage]) -> Set<String> {
            Set(
                read.compactMap { m in
                    guard let value = try? JSONParser.parse(m.value) else { return nil }
                    return "\(value["id"]?.stringValue ?? "null") \(value["outcome"]?.stringValue ?? "-")"
                })
        }
        let expected = Set((0..<20).map { "s-\($0) accepted" })
        let messages = try await readTopic(cluster, Self.outcomes, group: "outcomes-reader") { read in
            let seen = outcomesRead(read)
            return seen.isSuperset(of: expected) && seen.contains { $0.hasSuffix(" dead_lettered") }
        }
        let seen = outcomesRead(messages)
        #expect(seen.subtracting(expected).count == 1 && seen.contains { $0.hasSuffix(" dead_lettered") }, "\(seen.sorted())")
        let letters = try await readTopic(cluster, "apns.jobs.dlq", group: "dlq-reader") { !$0.isEmpty }
        #expect(letters.count == 1 && letters[0].value == Array(refused.utf8))
        try await eventually("the gauges back at 0", timeout: .seconds(300)) {
            let text = try await get(base + "/metrics").body
            return sample(text, outcomesGauge) == 0 && sample(text, deadLetterGauge) == 0
        }

        try await served.stop()
        #expect(served.runner.observations.finalCommitPositions.values.reduce(0, +) == 21)
        await client.close()
        await producer.close()
        try? await simulator.stop()
    }

    /// The reasons mechanism other parts add to: a line that holds until cleared, a check asked at every
    /// probe, in key order.
    @Test func readinessReasonsListWhatPartsSay() {
        let reasons = ReadinessReasons()
        #expect(reasons.current.isEmpty)
        reasons.set("b.fact", "b: a fact")
        let failing = Mutex(true)
        reasons.watch("a.check") { failing.withLock { $0 } ? "a: failing" : nil }
        #expect(reasons.current == ["a: failing", "b: a fact"])
        failing.withLock { $0 = false }
        #expect(reasons.current == ["b: a fact"])
        reasons.set("b.fact", nil)
        #expect(reasons.current.isEmpty)
    }
}
