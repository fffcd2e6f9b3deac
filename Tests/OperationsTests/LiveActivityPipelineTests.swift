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

/// Issue 31 through `run`'s runner: Kafka (mock cluster) → Redis → the HTTP/2 simulator over TLS.
/// Live Activity updates reach the gateway on the app's Live Activity topic with token auth and the
/// priority-10 ones are counted per app; priority 1 goes out as 1; a Live Activity or location push for
/// an app with certificate authentication, and a Live Activity whose payload breaks Apple's rules, are
/// dead letters with their documented reasons.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct LiveActivityPipelineTests {
    @Test func liveActivitiesPriorityOneAndTheirDeadLetters() async throws {
        let cluster = try MockCluster(
            brokers: 1, topics: [.init(name: "apns.jobs", partitions: 2), .init(name: "apns.jobs.dlq", partitions: 1)], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        let simulator = try await HTTP2Simulator.startedForTests()
        let news = "com.example.news"

        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 50)
        c.apps = http2Apps(certificateApps: [news])
        c.sendHTTP2(to: simulator)
        c.gateway.embedJobID = true  // the simulator records each job id

        let prometheus = PrometheusMetrics()
        let runner = PipelineRunner(configuration: c, logger: testLogger, metrics: prometheus.pipelineMetrics(for: c))
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [.init(service: runner)], logger: testLogger))
        let running = Task { try await group.run() }

        let update = #"{"aps":{"event":"update","timestamp":1767000000,"content-state":{"home":2,"away":1}}}"#
        func job(_ id: String, app: String = shop, token n: Int, _ rest: String) -> KafkaProducerMessage {
            let t = token(n).hex
            return KafkaProducerMessage(
                topic: "apns.jobs", key: Array(t.utf8), value: Array(#"{"id":"\#(id)","app":"\#(app)","token":"\#(t)",\#(rest)}"#.utf8))
        }
        var messages: [KafkaProducerMessage] = []
        for n in 0..<3 { messages.append(job("la10-\(n)", token: n, #""payload":\#(update),"push_type":"liveactivity""#)) }
        for n in 3..<5 { messages.append(job("la5-\(n)", token: n, #""payload":\#(update),"push_type":"liveactivity","priority":5"#)) }
        messages.append(job("p1", token: 5, #""payload":{"aps":{"alert":"whenever"}},"priority":1"#))
        messages.append(job("cert-la", app: news, token: 6, #""payload":\#(update),"push_type":"liveactivity""#))
        messages.append(job("cert-location", app: news, token: 8, #""payload":{"aps":{}},"push_type":"location""#))
        messages.append(
            job("broken-la", token: 7, #""payload":{"aps":{"event":"update","timestamp":1767000000}},"push_type":"liveactivity""#))
        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        try await producer.sendBatch(messages)

        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await eventually("6 accepted, 3 dead letters") {
            let totals = try await store.readStats().totals
            return totals[.accepted] == 6 && totals[.deadLettered] == 3
        }
        let text = String(decoding: prometheus.text(), as: UTF8.self)
        #expect(sample(text, #"apns_live_activity_priority10_total{app="com.example.shop"}"#) == 3, "\(text)")
        #expect(!text.contains(#"apns_live_activity_priority10_total{app="com.example.news"}"#))

        let records = Dictionary(uniqueKeysWithValues: simulator.records.map { ($0.jobID ?? $0.apnsID, $0) })
        for id in ["la10-0", "la10-1", "la10-2", "la5-3", "la5-4"] {
            #expect(records[id]?.pushType == "liveactivity", "\(id)")
            #expect(records[id]?.priority == (id.hasPrefix("la10") ? 10 : 5), "\(id)")
            #expect(records[id]?.auth.hasPrefix("token:") == true, "\(id)")
        }
        #expect(records["p1"]?.priority == 1)
        #expect(records["cert-la"] == nil && records["cert-location"] == nil && records["broken-la"] == nil)

        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"], sessionTimeout: .seconds(6)),
            logger: testLogger)
        var reasons: [String: String] = [:]
        try await eventually("3 dead letters read") {
            if let batch = await dlq.nextBatch() {
                for m in batch {
                    let id = String(decoding: m.value, as: UTF8.self).split(separator: "\"")[3]
                    reasons[String(id)] = m.headers.first(named: "reason")?.stringValue
                }
            }
            return reasons.count >= 3
        }
        await dlq.close()
        #expect(
            reasons == [
                "cert-la": "push-type-needs-token-auth", "cert-location": "push-type-needs-token-auth",
                "broken-la": "invalid-live-activity",
            ])

        await group.triggerGracefulShutdown()
        try await running.value
        await client.close()
        await producer.close()
        try? await simulator.stop()
    }
}
