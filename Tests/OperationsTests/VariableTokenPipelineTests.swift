import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import Kafka
import Operations
import Pipeline
import Redis
import Sender
import ServiceLifecycle
import TestSupport
import Testing

/// Issue 31 item 4 through `run`'s runner: Kafka (mock cluster) → Redis → the HTTP/2 simulator over TLS.
/// Apple: "APNs device tokens are of variable length. Do not hard-code their size." Tokens of 8, 40
/// and 32 bytes reach the gateway over HTTP/2 as sent; a 48-byte token the gateway refuses is suppressed
/// like any other, and its next job is held back by the gate; a job sent again is deduplicated; a binary
/// app's job with a 40-byte token is dead-lettered `token-size-needs-http2` before anything is sent; a
/// token past 200 hex digits is `invalid-token`.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct VariableTokenPipelineTests {
    @Test func tokensOfOtherSizesOverHTTP2AndTheBinaryAppsRefusal() async throws {
        let cluster = try MockCluster(
            brokers: 1, topics: [.init(name: "apns.jobs", partitions: 2), .init(name: "apns.jobs.dlq", partitions: 1)], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        let long = String(repeating: "4c", count: 40)  // 40 bytes
        let short = "0123456789abcdef"  // 8 bytes
        let refused = String(repeating: "e7", count: 48)  // 48 bytes, answered BadDeviceToken
        var faults = HTTP2FaultScript()
        faults.invalidTokens = [refused]
        let simulator = try await HTTP2Simulator.startedForTests(faults: faults)
        let news = "com.example.news"

        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 50)
        c.apps =
            http2Apps() + [
                // Binary: only its refused job comes, so it never connects.
                .init(
                    bundleID: news, transport: .binary,
                    authentication: .certificate(certificate: TestCertificates.pem(news), key: "\(TestCertificates.directory)/\(news).key"))
            ]
        c.sendHTTP2(to: simulator)
        c.gateway.embedJobID = true  // the simulator records each job id

        let runner = PipelineRunner(configuration: c, logger: testLogger)
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [.init(service: runner)], logger: testLogger))
        let running = Task { try await group.run() }

        func job(_ id: String, app: String = shop, token t: String) -> KafkaProducerMessage {
            KafkaProducerMessage(
                topic: "apns.jobs", key: Array(t.lowercased().utf8),
                value: Array(#"{"id":"\#(id)","app":"\#(app)","token":"\#(t)","payload":{"aps":{"alert":"hi"}}}"#.utf8))
        }
        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        try await producer.sendBatch([
            job("long-40", token: long.uppercased()), job("short-8", token: short), job("std-32", token: token(1).hex),
            job("refused-48", token: refused), job("binary-40", app: news, token: long),
            job("too-long", token: String(repeating: "ab", count: 101)),
        ])

        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await eventually("3 accepted, 1 rejected, 2 dead letters") {
            let totals = try await store.readStats().totals
            return totals[.accepted] == 3 && totals[.rejected] == 1 && totals[.deadLettered] == 2
        }
        // The refused token is suppressed under its hex; the same job again is a duplicate.
        try await producer.sendBatch([job("refused-48-again", token: refused.uppercased()), job("long-40", token: long)])
        try await eventually("1 suppressed, 1 deduplicated") {
            let totals = try await store.readStats().totals
            return totals[.suppressed] == 1 && totals[.deduped] == 1
        }

        let records = Dictionary(uniqueKeysWithValues: simulator.records.map { ($0.jobID ?? $0.apnsID, $0) })
        #expect(records["long-40"]?.token == long, "sent as its lower-case hex, 80 digits")
        #expect(records["short-8"]?.token == short)
        #expect(records["std-32"]?.token == token(1).hex)
        #expect(records["refused-48"] == nil, "refused: not recorded as sent")
        #expect(simulator.totals.byReason["BadDeviceToken"] == 1)
        #expect(records["binary-40"] == nil && records["too-long"] == nil && records["refused-48-again"] == nil)
        #expect(simulator.records.count == 3, "the duplicate was not sent again")

        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"], sessionTimeout: .seconds(6)),
            logger: testLogger)
        var reasons: [String: String] = [:]
        try await eventually("2 dead letters read") {
            if let batch = await dlq.nextBatch() {
                for m in batch {
                    let id = String(decoding: m.value, as: UTF8.self).split(separator: "\"")[3]
                    reasons[String(id)] = m.headers.first(named: "reason")?.stringValue
                }
            }
            return reasons.count >= 2
        }
        await dlq.close()
        #expect(reasons == ["binary-40": "token-size-needs-http2", "too-long": "invalid-token"])

        await group.triggerGracefulShutdown()
        try await running.value
        await client.close()
        await producer.close()
        try? await simulator.stop()
    }
}
