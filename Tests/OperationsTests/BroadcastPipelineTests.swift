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
/// are dead letters with their reasons; the counters show broadcasts apart. Each broadcast's
/// apns-expiration follows its channel's storage policy, read once from channel management — 0 on a No
/// Message Stored channel (`channel create`'s default) for a job without expiry, a nonzero expiry there
/// refused before sending (`expiry-on-no-storage-channel`), now + 8 h on a Most Recent Message channel —
/// and a 4,500-byte broadcast and one at priority 1 are delivered; the simulator refuses what Apple refuses.
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
        // A channel as `channel create` makes it by default: No Message Stored.
        let (plain, _) = try await ChannelManagementClient.perform(.create(.noStorage), configuration: manage, group: group)
        guard case .created(let noStorage, _) = plain else {
            Issue.record("\(plain)")
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
        let onNoStorage = #""channel":"\#(noStorage)""#
        let large = #"{"aps":{"event":"update","timestamp":1767000000,"content-state":{"text":"\#(String(repeating: "g", count: 4400))"}}}"#
        let t = token(1).hex
        let sentFrom = UInt32(Date().timeIntervalSince1970)
        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        try await producer.sendBatch([
            job("score-1", key: channel, onChannel),
            job("score-2", key: channel, onChannel, #","priority":5"#),
            job("ghost", key: "Z2hvc3Q=", #""channel":"Z2hvc3Q=""#),
            job("legacy", app: legacy, key: channel, onChannel),
            job("both", key: t, #""token":"\#(t)",\#(onChannel)"#),
            job("device-1", key: t, #""token":"\#(t)","push_type":"liveactivity""#),
            job("nms-default", key: noStorage, onNoStorage),
            job("nms-stored", key: noStorage, onNoStorage, #","expiry":\#(sentFrom + 600)"#),
            job("nms-low", key: noStorage, onNoStorage, #","priority":1"#),
            KafkaProducerMessage(
                topic: "apns.jobs", key: Array(noStorage.utf8),
                value: Array(#"{"id":"nms-large","app":"\#(shop)",\#(onNoStorage),"payload":\#(large)}"#.utf8)),
        ])
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await eventually("6 accepted, 4 dead letters") {
            let totals = try await store.readStats().totals
            return totals[.accepted] == 6 && totals[.deadLettered] == 4
        }
        let sentBy = UInt32(Date().timeIntervalSince1970)
        // Published again (a producer's retry): deduped by its job id, nothing sent.
        try await producer.sendBatch([job("score-1", key: channel, onChannel)])
        try await eventually("the copy deduped") { try await store.readStats().totals[.deduped] == 1 }

        let totals = try await store.readStats().totals
        #expect(totals.broadcasts(.accepted) == 5 && totals.broadcasts(.deduped) == 1, "\(totals)")
        // ghost (refused by APNs), legacy (binary app) and nms-stored (refused before sending); "both"
        // never became a job.
        #expect(totals.broadcasts(.deadLettered) == 3, "\(totals)")
        #expect(totals.rejected(code: "ChannelNotRegistered") == 1)
        #expect(totals[.rejected] == 0 && totals[.suppressed] == 0)
        let text = String(decoding: prometheus.text(), as: UTF8.self)
        #expect(sample(text, #"apns_broadcasts_total{app="com.example.shop"}"#) == 6, "\(text)")

        // One request per broadcast, each reaching the channel's 1000 subscribers.
        let records = Dictionary(uniqueKeysWithValues: simulator.records.map { ($0.jobID ?? $0.apnsID, $0) })
        #expect(records.count == 6)
        for id in ["score-1", "score-2"] {
            #expect(records[id]?.channel == channel && records[id]?.reached == 1000, "\(String(describing: records[id]))")
            #expect(records[id]?.token == "" && records[id]?.pushType == "liveactivity")
            // A Most Recent Message channel, no expiry in the job: Apple's 8 hours.
            let expiration = records[id]?.expiration ?? 0
            #expect(expiration >= Int64(sentFrom) + 28_800 && expiration <= Int64(sentBy) + 28_800, "\(expiration)")
        }
        #expect(records["score-2"]?.priority == 5)
        // The No Message Stored channel: apns-expiration 0; 4,500 bytes and priority 1 delivered.
        for id in ["nms-default", "nms-low", "nms-large"] {
            #expect(records[id]?.channel == noStorage && records[id]?.expiration == 0, "\(String(describing: records[id]))")
        }
        #expect(records["nms-low"]?.priority == 1)
        #expect(records["nms-stored"] == nil)
        #expect(records["device-1"]?.token == t && records["device-1"]?.channel == nil)
        #expect(simulator.totals.broadcasts == 5 && simulator.totals.broadcastDevicesReached == 5000)
        // Each channel's policy was read once, from channel management (the unknown one too).
        #expect(simulator.totals.channelAnswers["get 200"] == 2, "\(simulator.totals.channelAnswers)")
        #expect(simulator.totals.byReason["BadExpirationDate"] == nil)
        // The unknown channel, answered as Apple's table says: 400 ChannelNotRegistered (the only refusal).
        #expect(simulator.totals.byStatus[400] == 1 && simulator.totals.byReason["ChannelNotRegistered"] == 1)

        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"], sessionTimeout: .seconds(6)),
            logger: testLogger)
        var letters: [String: KafkaConsumerMessage] = [:]
        try await eventually("4 dead letters read") {
            if let batch = await dlq.nextBatch() {
                for m in batch {
                    let id = String(decoding: m.value, as: UTF8.self).split(separator: "\"")[3]
                    letters[String(id)] = m
                }
            }
            return letters.count >= 4
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
        #expect(letters["nms-stored"]?.headers.first(named: "reason")?.stringValue == "expiry-on-no-storage-channel")

        await services.triggerGracefulShutdown()
        try await running.value
        await client.close()
        await producer.close()
        try await group.shutdownGracefully()
        try? await simulator.stop()
    }
}
