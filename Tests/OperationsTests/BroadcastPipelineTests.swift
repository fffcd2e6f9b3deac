import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import Kafka
import NIOPosix
import Operations
import Pipeline
import Redis
import Sender
import ServiceLifecycle
import TestSupport
import Testing

/// Issue 31 item 2 through `run`'s runner: Kafka (mock cluster) → Redis → the HTTP/2 simulator over TLS.
/// A channel is created with the channel management client; broadcasts to it are one request each,
/// reaching the channel's subscribers; a broadcast published twice is deduped by its job id; a
/// broadcast to an unknown channel, one for a binary app, and a job naming both a token and a channel
/// are dead letters with their reasons; the counters show broadcasts apart.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct BroadcastPipelineTests {
    @Test func broadcastsThroughThePipeline() async throws {
        let cluster = try MockCluster(
            brokers: 1, topics: [.init(name: "apns.jobs", partitions: 2), .init(name: "apns.jobs.dlq", partitions: 1)], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        let simulator = try await HTTP2Simulator.startedForTests { $0.faults.channelSubscribers = 1000 }
        let legacy = "com.example.news"

        // The channel, as `apns-pipeline channel create` makes it.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var manage = ChannelManagementConfiguration(
            app: shop, environment: .production, host: GatewayAddress(host: "127.0.0.1", port: simulator.port),
            tokens: try ProviderTokenCache.shared(
                keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID))
        manage.serverHostname = "localhost"
        manage.trustRootsPath = TestCertificates.pem("ca")
        let (created, _) = try await ChannelManagementClient.perform(.create(.mostRecent), configuration: manage, group: group)
        guard case .created(let channel, _) = created else {
            Issue.record("\(created)")
            return
        }

        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 50)
        c.apps =
            http2Apps() + [
                // A binary app: it cannot broadcast (its gateway is never dialled: nothing is sent to it).
                .init(
                    bundleID: legacy, certificate: TestCertificates.pem(legacy), key: "\(TestCertificates.directory)/\(legacy).key",
                    gateways: [GatewayAddress(host: "127.0.0.1", port: 9)])
            ]
        c.sendHTTP2(to: simulator)
        c.gateway.embedJobID = true  // the simulator records each job id

        let prometheus = PrometheusMetrics()
        let runner = PipelineRunner(configuration: c, logger: testLogger, metrics: prometheus.pipelineMetrics(for: c))
        let services = ServiceGroup(configuration: ServiceGroupConfiguration(services: [.init(service: runner)], logger: testLogger))
        let running = Task { try await services.run() }

        let score = #"{"aps":{"event":"update","timestamp":1767000000,"content-state":{"home":2,"away":1}}}"#
        func job(_ id: String, app: String = shop, key: String, _ recipient: String, _ rest: String = "") -> KafkaProducerMessage {
            KafkaProducerMessage(
                topic: "apns.jobs", key: Array(key.utf8),
                value: Array(#"{"id":"\#(id)","app":"\#(app)",\#(recipient),"payload":\#(score)\#(rest)}"#.utf8))
        }
        let onChannel = #""channel":"\#(channel)""#
        let t = token(1).hex
        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        try await producer.sendBatch([
            job("score-1", key: channel, onChannel),
            job("score-2", key: channel, onChannel, #","priority":5"#),
            job("ghost", key: "Z2hvc3Q=", #""channel":"Z2hvc3Q=""#),
            job("legacy", app: legacy, key: channel, onChannel),
            job("both", key: t, #""token":"\#(t)",\#(onChannel)"#),
            job("device-1", key: t, #""token":"\#(t)","push_type":"liveactivity""#),
        ])
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await eventually("3 accepted, 3 dead letters") {
            let totals = try await store.readStats().totals
            return totals[.accepted] == 3 && totals[.deadLettered] == 3
        }
        // Published again (a producer's retry): deduped by its job id, nothing sent.
        try await producer.sendBatch([job("score-1", key: channel, onChannel)])
        try await eventually("the copy deduped") { try await store.readStats().totals[.deduped] == 1 }

        let totals = try await store.readStats().totals
        #expect(totals.broadcasts(.accepted) == 2 && totals.broadcasts(.deduped) == 1, "\(totals)")
        // ghost (refused by APNs) and legacy (binary app); "both" never became a job.
        #expect(totals.broadcasts(.deadLettered) == 2, "\(totals)")
        #expect(totals.rejected(code: "ChannelNotRegistered") == 1)
        #expect(totals[.rejected] == 0 && totals[.suppressed] == 0)
        let text = String(decoding: prometheus.text(), as: UTF8.self)
        #expect(sample(text, #"apns_broadcasts_total{app="com.example.shop"}"#) == 3, "\(text)")

        // One request per broadcast, each reaching the channel's 1000 subscribers.
        let records = Dictionary(uniqueKeysWithValues: simulator.records.map { ($0.jobID ?? $0.apnsID, $0) })
        #expect(records.count == 3)
        for id in ["score-1", "score-2"] {
            #expect(records[id]?.channel == channel && records[id]?.reached == 1000, "\(String(describing: records[id]))")
            #expect(records[id]?.token == "" && records[id]?.pushType == "liveactivity")
        }
        #expect(records["score-2"]?.priority == 5)
        #expect(records["device-1"]?.token == t && records["device-1"]?.channel == nil)
        #expect(simulator.totals.broadcasts == 2 && simulator.totals.broadcastDevicesReached == 2000)

        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"], sessionTimeout: .seconds(6)),
            logger: testLogger)
        var letters: [String: KafkaConsumerMessage] = [:]
        try await eventually("3 dead letters read") {
            if let batch = await dlq.nextBatch() {
                for m in batch {
                    let id = String(decoding: m.value, as: UTF8.self).split(separator: "\"")[3]
                    letters[String(id)] = m
                }
            }
            return letters.count >= 3
        }
        await dlq.close()
        #expect(letters["ghost"]?.headers.first(named: "reason")?.stringValue == "gateway-bad-request")
        #expect(letters["ghost"]?.headers.first(named: "gateway-reason")?.stringValue == "ChannelNotRegistered")
        // The letter is the job as sent: a broadcast names its channel, so it can be published again.
        let ghost = String(decoding: letters["ghost"]?.value ?? [], as: UTF8.self)
        #expect(ghost.contains(#""channel":"Z2hvc3Q=""#) && !ghost.contains(#""token""#), "\(ghost)")
        #expect(letters["ghost"].map { String(decoding: $0.key ?? [], as: UTF8.self) } == "Z2hvc3Q=")
        #expect(letters["legacy"]?.headers.first(named: "reason")?.stringValue == "push-type-needs-token-auth")
        #expect(letters["both"]?.headers.first(named: "reason")?.stringValue == "token-and-channel")

        await services.triggerGracefulShutdown()
        try await running.value
        await client.close()
        await producer.close()
        try await group.shutdownGracefully()
        try? await simulator.stop()
    }
}
