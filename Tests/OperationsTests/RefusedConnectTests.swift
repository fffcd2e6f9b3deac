import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import Kafka
import Logging
import Operations
import Pipeline
import Redis
import Sender
import ServiceLifecycle
import TestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
import Tools
#endif

/// `run` meeting a connect that retrying cannot fix: an HTTP/2 app whose host speaks TLS without h2
/// (the binary gateway simulator). /readyz says not ready with the reason, the jobs wait (none settled,
/// none dead-lettered), the connections try again only after `authFailureDelay` (not at their
/// reconnect pace), and the log says it once, whatever the number of connections.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct RefusedConnectTests {
    @Test func aServerWithoutHTTP2KeepsRunNotReadyAndItsJobs() async throws {
        let cluster = try MockCluster(
            brokers: 1, topics: [.init(name: "apns.jobs", partitions: 2), .init(name: "apns.jobs.dlq", partitions: 1)], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        var sim = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
        sim.gatewayPort = 0
        sim.feedbackPort = 0
        let binary = try GatewaySimulator(configuration: sim)
        try await binary.start()

        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 50)
        c.apps = [
            .init(
                bundleID: shop, transport: .http2,
                authentication: .certificate(certificate: TestCertificates.pem(shop), key: TestCertificates.key(shop)))
        ]
        c.http2.hosts = [GatewayAddress(host: "127.0.0.1", port: binary.ports.gateway)]
        c.http2.serverHostname = "localhost"
        c.http2.ca = "\(TestCertificates.directory)/ca.pem"
        c.http2.connections = 3
        c.http2.reconnect.initialDelay = .milliseconds(5)
        c.http2.reconnect.attemptsPerSecondPerGateway = 1000
        c.feedbackIntervalMinutes = 0
        c.drainTimeout = .seconds(1)
        let captured = CapturedLog()
        var logger = Logger(label: "apns.test") { _ in CapturingLogHandler(captured) }
        logger.logLevel = .info

        let served = try await ServedPipeline(c, logger: logger)
        let base = served.base

        let started = ContinuousClock.now
        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        let template = try JSONParser.parse(#"{"app":"com.example.shop","payload":{"aps":{"alert":"Hello"}}}"#)
        try await producer.sendBatch(
            (0..<50).map(token).map { t in
                KafkaProducerMessage(
                    topic: "apns.jobs", key: Array(t.hex.utf8),
                    value: Campaign.job(template: template, campaign: "r1", recipient: .init(token: t, language: nil)))
            })

        // Every connection tried once (the jobs go on to the next connection after each refusal), and
        // each is waiting its minute out.
        try await eventually("not ready: every connection stopped, naming the refused connect", timeout: .seconds(300)) {
            let readiness = try await get(base + "/readyz")
            return readiness.status == 503
                && readiness.body.contains("- gateway: no http2 connection of com.example.shop is up (3 stopped; last error: ")
                && readiness.body.contains("did not negotiate HTTP/2")
        }
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        // A while later: still not ready, the jobs held (none settled in any way), no connect beyond one
        // per connection per `authFailureDelay` (60 s), one log line per minute.
        try await Task.sleep(for: .seconds(3))
        let elapsed = (ContinuousClock.now - started) / .seconds(1)
        let minutes = 1 + Int(elapsed / 60)
        #expect(try await get(base + "/readyz").status == 503)
        let totals = try await store.readStats().totals
        #expect(totals[.accepted] == 0 && totals[.deadLettered] == 0 && totals[.rejected] == 0, "\(totals)")
        #expect(binary.totals.connections <= 3 * minutes, "\(binary.totals.connections) connects in \(elapsed) s")
        let refusedLines = captured.lines.filter { $0.hasPrefix("connect refused: the server did not negotiate HTTP/2") }
        #expect(refusedLines.count >= 1 && refusedLines.count <= minutes, "\(captured.lines.filter { $0.contains("refused") })")
        #expect(!captured.lines.contains { $0.hasPrefix("connect failed") || $0.hasPrefix("connection error") }, "\(captured.lines)")

        try await served.stop()
        await client.close()
        await producer.close()
        try? await binary.stop()
    }
}
