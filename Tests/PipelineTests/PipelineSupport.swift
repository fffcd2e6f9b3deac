import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import Kafka
import Logging
import Pipeline
import ProcessSupport
import Redis
import Sender
import ServiceLifecycle
import TestSupport
import Testing
import Tools

let shop = "com.example.shop"

var testLogger: Logger {
    var l = Logger(label: "pipeline-test", factory: { StreamLogHandler.standardError(label: $0) })
    // APNS_TEST_LOG_LEVEL=info (or debug, trace) to see what the in-process pipelines do.
    l.logLevel = ProcessInfo.processInfo.environment["APNS_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
    return l
}

/// `testLogger` with `process` in its metadata: which of a test's in-process pipelines said it.
func testLogger(process: String) -> Logger {
    var l = testLogger
    l[metadataKey: "test.process"] = "\(process)"
    return l
}

/// Kafka (librdkafka's mock cluster over TCP), a real redis-server (or a 3-primary Redis Cluster) and the
/// gateway simulator over TLS.
final class Stack: @unchecked Sendable {
    let cluster: MockCluster
    let redis: RedisUnderTest
    let simulator: GatewaySimulator
    let store: PipelineStore
    let producer: KafkaProducer
    private let client: any RedisConnection

    init(
        faults: FaultScript = FaultScript(), partitions: Int32 = 8, redis target: RedisTestTarget = .single,
        extraTopics: [MockCluster.Topic] = []
    ) async throws {
        cluster = try MockCluster(
            brokers: 1,
            topics: [
                .init(name: "apns.jobs", partitions: partitions), .init(name: "apns.jobs.dlq", partitions: 1),
                .init(name: "apns.registrations", partitions: 2),
            ] + extraTopics, logger: testLogger)
        redis = try await RedisUnderTest(target)
        var sim = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
        sim.faults = faults
        sim.keepRecordsInMemory = true
        simulator = try GatewaySimulator(configuration: sim)
        try await simulator.start()
        var redisTarget = try RedisTarget(url: redis.url, cluster: redis.clusterNodes)
        if let tls = redis.tls { redisTarget.tls = tls }
        client = redisTarget.makeConnection(logger: testLogger)
        try await client.connect()
        // The keys as the pipeline under test names them: on a cluster its token tags are spread
        // (`redis.token_tags`' default there), so the test reads and seeds the same keys.
        var storeConfiguration = PipelineStoreConfiguration()
        storeConfiguration.tokenTags = .defaultFor(cluster: redis.clusterNodes != nil)
        store = PipelineStore(client: client, configuration: storeConfiguration, logger: testLogger)
        producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
    }

    func configuration(group: String = "apns-pipeline") -> PipelineConfiguration {
        var c = PipelineConfiguration()
        c.kafka.bootstrapServers = cluster.bootstrapServers
        c.kafka.group = group
        c.kafka.sessionTimeoutMs = 6000
        c.kafka.batchSize = 500
        c.redis.url = redis.url
        c.redis.cluster = redis.clusterNodes
        c.redis.tls = redis.tls
        c.gateway.addresses = [GatewayAddress(host: "127.0.0.1", port: simulator.ports.gateway)]
        c.gateway.feedbackAddress = GatewayAddress(host: "127.0.0.1", port: simulator.ports.feedback)
        c.gateway.serverHostname = "localhost"
        c.gateway.ca = "\(TestCertificates.directory)/ca.pem"
        c.gateway.embedJobID = true
        c.gateway.shards = 2
        c.gateway.shard.settleAfter = .seconds(3)  // see SenderTestSupport: no self-inflicted sequence_unknown under load
        c.gateway.shard.settleGrace = .seconds(120)  // as SenderTestSupport's: a loaded machine reads late
        c.gateway.shard.reconnect.initialDelay = .milliseconds(5)
        c.gateway.shard.reconnect.attemptsPerSecondPerGateway = 1000
        c.apps = [
            .init(
                bundleID: shop, certificate: "\(TestCertificates.directory)/\(shop).pem",
                key: "\(TestCertificates.directory)/\(shop).key", shards: nil, gateways: nil)
        ]
        c.maxInFlight = 2000
        c.feedbackIntervalMinutes = 0
        return c
    }

    /// Publishes a campaign the way `campaign publish` does (`published` and `jobs`, the base of per-job progress).
    func publish(campaign: String, template: JSONValue, tokens: [DeviceToken]) async throws {
        let sets = try await store.beginPublish(campaign: campaign, expectedJobs: tokens.count)
        let messages = tokens.map { t in
            KafkaProducerMessage(
                topic: "apns.jobs", key: Array(t.hex.utf8),
                value: Campaign.job(template: template, campaign: campaign, recipient: .init(token: t, language: nil)))
        }
        try await producer.sendBatch(messages)
        try await store.recordPublished(
            campaign: campaign, jobIDs: tokens.map { Campaign.jobID(campaign: campaign, token: $0) }, markSets: sets)
        try await store.finishPublish(campaign: campaign)
    }

    func publishRaw(_ values: [String], topic: String = "apns.jobs") async throws {
        try await producer.sendBatch(values.map { KafkaProducerMessage(topic: topic, key: nil, value: Array($0.utf8)) })
    }

    /// Entries of one per-token hash of `app` (`suppressed`, `registered`, `lang`) over all its token tags.
    func tokenHashLength(_ kind: String, _ app: String) async throws -> Int64 {
        var total: Int64 = 0
        for tag in store.keys.tokenTags(app: app) { total += try await hashLength("\(tag):\(kind)") }
        return total
    }

    func hashLength(_ key: String) async throws -> Int64 {
        try await client.send(RedisCommand("HLEN", key)).integer ?? -1
    }

    func campaign(_ id: String) async throws -> [String: Int64] {
        let p = try await store.readCampaign(id)
        var f = p.counters.fields
        f["published"] = p.published
        return f
    }

    func waitSettled(_ id: String, count: Int64, timeout: Duration = .seconds(120)) async throws {
        try await eventually("campaign \(id) settled \(count)", timeout: timeout) {
            let c = try await self.campaign(id)
            return ["accepted", "rejected", "suppressed", "deduped", "dead_lettered"].reduce(0) { $0 + (c[$1] ?? 0) } >= count
        }
    }

    /// Waits for `count` accepted outcomes. (Outcomes count messages, not jobs: a message redelivered
    /// after a rebalance, when the mock refused the old owner's commit, is counted again as deduped, so
    /// the settled total can run ahead of the jobs actually done.)
    func waitAccepted(_ id: String, count: Int64, timeout: Duration = .seconds(300)) async throws {
        try await eventually("campaign \(id) accepted \(count)", timeout: timeout) {
            (try await self.campaign(id)["accepted"] ?? 0) >= count
        }
    }

    /// Simulator records of one campaign: job id → times recorded.
    func recorded(campaign: String) -> [String: Int] {
        var out: [String: Int] = [:]
        for r in simulator.records { if let j = r.jobID, j.hasPrefix(campaign + ":") { out[j, default: 0] += 1 } }
        return out
    }

    func stop() async {
        await producer.close()
        await client.close()
        try? await simulator.stop()
        cluster.stop()
        redis.stop()
    }
}

/// `apns-pipeline run`, in-process: a PipelineRunner in a ServiceGroup, stopped the way SIGTERM stops it.
final class RunningPipeline: Sendable {
    let runner: PipelineRunner
    let group: ServiceGroup
    let task: Task<Void, any Error>

    init(_ configuration: PipelineConfiguration, logger: Logger = testLogger) {
        runner = PipelineRunner(configuration: configuration, logger: logger)
        group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [.init(service: runner)], logger: logger))
        let group = self.group
        task = Task { try await group.run() }
    }

    /// Graceful shutdown: stop consuming, drain, settle, commit.
    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }
}

func eventually(
    _ what: String, timeout: Duration = .seconds(300), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool, orRecord state: () -> String = { "" }
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        if ContinuousClock.now > deadline {
            let last = state()
            let detail = last.isEmpty ? what : "\(what) (last seen: \(last))"
            Issue.record("timed out waiting for: \(detail)", sourceLocation: sourceLocation)
            throw TestFailure("timed out waiting for: \(detail)")
        }
        try await Task.sleep(for: .milliseconds(50))
    }
}

func token(_ i: Int) -> DeviceToken {
    var bytes = [UInt8](repeating: 0x42, count: 32)
    for k in 0..<8 { bytes[24 + k] = UInt8(truncatingIfNeeded: i >> (8 * (7 - k))) }
    return try! DeviceToken(bytes: bytes)
}

let template: JSONValue = try! JSONParser.parse(
    #"{"app":"com.example.shop","payload":{"aps":{"alert":"Hello","badge":1}},"alerts":{"fr":"Bonjour"},"priority":10}"#)

/// `apns-pipeline run` as a real process (the binary built next to this test bundle), for what an
/// in-process runner cannot show: `kill -9`.
final class PipelineProcess: @unchecked Sendable {
    /// The built `apns-pipeline`, next to the test bundle (`swift build --build-tests` builds both), or
    /// `APNS_PIPELINE_BIN`.
    static let binary: String? = {
        if let path = ProcessInfo.processInfo.environment["APNS_PIPELINE_BIN"] { return path }
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        // On Linux the test runner is `<build>/debug/apns-pipelinePackageTests.xctest`; elsewhere a bundle.
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent("apns-pipeline").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return nil
    }()

    let process: Process

    init(pipelineFile: String, logFile: String, environment: [String: String] = [:]) throws {
        guard let binary = Self.binary else { throw TestFailure("the apns-pipeline binary is not built (swift build --build-tests)") }
        process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["run", "--pipeline", pipelineFile]
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        _ = FileManager.default.createFile(atPath: logFile, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logFile))
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try startChild(process)
    }

    /// SIGKILL: no drain, no settle, no commit, no heartbeat removal: a crash. Returns once the process
    /// has exited, waiting off the cooperative pool (ChildProcessWaits.swift).
    func crash() async {
        kill(process.processIdentifier, SIGKILL)
        await waitForExit(of: process)
    }

    /// SIGKILL without waiting for the exit: for a `defer` (which cannot await) at a test's end.
    func crashWithoutWaiting() {
        kill(process.processIdentifier, SIGKILL)
    }

    /// SIGTERM, then the exit status once it stopped.
    func stop() async -> Int32 {
        process.terminate()
        while process.isRunning { try? await Task.sleep(for: .milliseconds(50)) }
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// Runs `apns-pipeline ARGUMENTS` to its end: exit status, stdout, stderr.
    static func command(
        _ arguments: [String], environment: [String: String] = [:], executable: String? = nil
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        guard let binary = executable ?? binary else {
            throw TestFailure("the apns-pipeline binary is not built (swift build --build-tests)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cmd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let out = directory.appendingPathComponent("out")
        let err = directory.appendingPathComponent("err")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        try startChild(process)
        while process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        return (
            process.terminationStatus, (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        )
    }
}

extension Stack {
    /// Changes `campaign`'s control state and waits (generously: a loaded machine is slow, never red) until
    /// every live `run` process applied it.
    func changeControl(_ campaign: String, _ body: @escaping @Sendable (inout CampaignControlState) -> Void) async throws {
        let change = try await store.changeControlAndWait(campaign: campaign, wait: .seconds(120)) {
            var state = $0
            body(&state)
            return state
        }
        #expect(change.missing.isEmpty, "a process did not apply the change: \(change.missing)")
    }

    /// A pipeline file for a `run` process against this stack.
    /// `appLines`: more keys of its app entry, each line indented as the entry's keys (4 spaces).
    func pipelineFile(
        group: String = "apns-pipeline", settleAfterMs: Int = 3000, maxInFlight: Int = 2000, appLines: String = ""
    ) throws -> String {
        let d = TestCertificates.directory
        let yaml = """
            kafka:
              bootstrap_servers: "\(cluster.bootstrapServers)"
              group: \(group)
              batch_size: 500
              session_timeout_ms: 6000
            redis:
              \(redis.clusterNodes.map { "cluster: [\($0.map { "\"\($0)\"" }.joined(separator: ", "))]" } ?? "url: \(redis.url)")
              \(redis.tls.map { "tls: {ca: \"\($0.ca ?? "")\"}" } ?? "")
            gateway:
              addresses: ["127.0.0.1:\(simulator.ports.gateway)"]
              feedback_address: "127.0.0.1:\(simulator.ports.feedback)"
              server_hostname: localhost
              ca: \(d)/ca.pem
              embed_job_id: true
              shards: 2
              settle_after_ms: \(settleAfterMs)
              settle_grace_ms: 120000
              reconnect:
                initial_ms: 5
                attempts_per_second_per_gateway: 1000
            apps:
              - bundle_id: \(shop)
                transport: binary
                certificate: \(d)/\(shop).pem
                key: \(d)/\(shop).key
            \(appLines)
            pipeline:
              max_in_flight: \(maxInFlight)
            feedback:
              interval_minutes: 0
            logging:
              level: warning

            """
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}

/// A pipeline file of one certificate app (`app`) with `redis` as its `redis:` section (indented lines),
/// for tests of how the file's Redis settings load.
func pipelineFile(redis: String, app: String = "x") throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
    try """
    kafka:
      bootstrap_servers: "127.0.0.1:9092"
    redis:
    \(redis)
    apps:
      - bundle_id: \(app)
        certificate: "\(TestCertificates.directory)/\(shop).pem"
        key: "\(TestCertificates.directory)/\(shop).key"

    """.write(toFile: path, atomically: true, encoding: .utf8)
    return path
}
