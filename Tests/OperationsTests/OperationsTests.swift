import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import HTTP2Simulator
import Kafka
import Logging
import Operations
import Pipeline
import ProcessSupport
import Redis
import Sender
import ServiceLifecycle
import TestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
import Tools
#endif

let shop = "com.example.shop"

var testLogger: Logger {
    var l = Logger(label: "operations-test", factory: { StreamLogHandler.standardError(label: $0) })
    l.logLevel = .warning
    return l
}

/// GET over a real socket: status and body. The timeout only keeps a broken server from hanging the test:
/// at 10 s, a `/readyz` on a loaded machine (the suite beside a CPU load) once threw it out of `eventually`.
func get(_ url: String) async throws -> (status: Int, body: String) {
    var request = URLRequest(url: URL(string: url)!)
    request.timeoutInterval = 120
    let (data, response) = try await URLSession.shared.data(for: request)
    return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
}

func eventually(
    _ what: String, timeout: Duration = .seconds(300), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        if ContinuousClock.now > deadline {
            Issue.record("timed out waiting for: \(what)", sourceLocation: sourceLocation)
            throw TestFailure("timed out waiting for: \(what)")
        }
        try await Task.sleep(for: .milliseconds(100))
    }
}

func token(_ i: Int) -> DeviceToken {
    var bytes = [UInt8](repeating: 0x42, count: 32)
    for k in 0..<8 { bytes[24 + k] = UInt8(truncatingIfNeeded: i >> (8 * (7 - k))) }
    return try! DeviceToken(bytes: bytes)
}

/// A pipeline on the test's Kafka and Redis, without registrations (the tests add apps and gateways).
func pipelineConfiguration(kafka cluster: MockCluster, redis: RedisServer, batchSize: Int) -> PipelineConfiguration {
    var c = PipelineConfiguration()
    c.kafka.bootstrapServers = cluster.bootstrapServers
    c.kafka.sessionTimeoutMs = 6000
    c.kafka.batchSize = batchSize
    c.kafka.registrationsTopic = nil
    c.redis.url = redis.url
    return c
}

/// Token auth for the shop app, a certificate for `certificateApps`: the HTTP/2 apps of these tests.
func http2Apps(certificateApps: [String] = []) -> [PipelineConfiguration.App] {
    [
        .init(
            bundleID: shop, transport: .http2,
            authentication: .token(
                keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID))
    ]
        + certificateApps.map { app in
            .init(
                bundleID: app, transport: .http2,
                authentication: .certificate(certificate: TestCertificates.pem(app), key: "\(TestCertificates.directory)/\(app).key"))
        }
}

extension PipelineConfiguration {
    /// Every HTTP/2 app to `simulator` over TLS (the test CA), with `connections` each, quick reconnects,
    /// and no feedback polling.
    mutating func sendHTTP2(to simulator: HTTP2Simulator, connections: Int = 1) {
        http2.hosts = [GatewayAddress(host: "127.0.0.1", port: simulator.port)]
        http2.serverHostname = "localhost"
        http2.ca = "\(TestCertificates.directory)/ca.pem"
        http2.connections = connections
        http2.reconnect.initialDelay = .milliseconds(5)
        http2.reconnect.attemptsPerSecondPerGateway = 1000
        feedbackIntervalMinutes = 0
    }
}

/// The value of one sample line of the exposition text (`name{labels} value`), nil when absent.
func sample(_ text: String, _ series: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1))
    }
    return nil
}

@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct OperationsTests {
    /// A campaign through `run`'s runner with metrics on, scraped over a socket: the counters of the
    /// `apns:stats` contract move with it and agree with Redis; the gauges and histograms are there.
    /// Then readiness: ready, Redis stopped → 503 naming Redis, Redis back → ready again.
    @Test func metricsMoveWithACampaignAndReadinessFollowsRedis() async throws {
        let cluster = try MockCluster(
            brokers: 1, topics: [.init(name: "apns.jobs", partitions: 4), .init(name: "apns.jobs.dlq", partitions: 1)], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        let audience = (0..<300).map(token)
        let invalid = Set(stride(from: 7, to: 300, by: 30).map(token))  // 10: status 8
        var sim = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
        sim.faults.invalidTokens = Set(invalid.map(\.hex))
        let simulator = try GatewaySimulator(configuration: sim)
        try await simulator.start()

        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 100)
        c.gateway.addresses = [GatewayAddress(host: "127.0.0.1", port: simulator.ports.gateway)]
        c.gateway.serverHostname = "localhost"
        c.gateway.ca = "\(TestCertificates.directory)/ca.pem"
        c.gateway.shards = 2
        c.gateway.shard.settleAfter = .milliseconds(300)
        c.gateway.shard.reconnect.initialDelay = .milliseconds(5)
        c.gateway.shard.reconnect.attemptsPerSecondPerGateway = 1000
        c.apps = [
            .init(
                bundleID: shop, certificate: "\(TestCertificates.directory)/\(shop).pem", key: "\(TestCertificates.directory)/\(shop).key")
        ]
        c.feedbackIntervalMinutes = 0

        let served = try await ServedPipeline(c)
        let base = served.base

        // Before the first batch: alive, not ready (no partitions yet), every outcome series at 0.
        #expect(try await get(base + "/healthz") == (200, "ok\n"))
        let before = try await get(base + "/metrics").body
        #expect(sample(before, #"apns_accepted_total{app="com.example.shop",transport="binary"}"#) == 0)

        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        let template = try JSONParser.parse(#"{"app":"com.example.shop","payload":{"aps":{"alert":"Hello"}}}"#)
        try await producer.sendBatch(
            audience.map { t in
                KafkaProducerMessage(
                    topic: "apns.jobs", key: Array(t.hex.utf8),
                    value: Campaign.job(template: template, campaign: "m1", recipient: .init(token: t, language: nil)))
            })
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await store.incrementPublished(campaign: "m1", by: audience.count)

        let accepted = #"apns_accepted_total{app="com.example.shop",transport="binary"}"#
        var text = ""
        try await eventually("metrics show the campaign settled") {
            text = try await get(base + "/metrics").body
            return sample(text, accepted) == 290
                && sample(text, #"apns_rejected_total{app="com.example.shop",transport="binary"}"#) == 10
        }
        // Redis says the same.
        let totals = try await store.readStats().totals
        #expect(totals[.accepted] == 290 && totals[.rejected] == 10)
        #expect(sample(text, #"apns_gateway_refusals_total{app="com.example.shop",transport="binary",code="8"}"#) == 10)
        #expect(sample(text, "apns_received_total") == 300)
        #expect(sample(text, #"apns_deduped_total{app="com.example.shop"}"#) == 0)
        #expect((sample(text, #"apns_gateway_written_bytes_total{app="com.example.shop",transport="binary"}"#) ?? 0) > 0)
        #expect((sample(text, "apns_settle_batch_outcomes_count") ?? 0) > 0)
        #expect((sample(text, "apns_kafka_batch_messages_sum") ?? 0) == 300)
        // Latency samples are observed once their offsets are committable.
        #expect((sample(text, "apns_settlement_latency_seconds_count") ?? 0) > 0)
        try await eventually("gauges sampled") {
            text = try await get(base + "/metrics").body
            return (sample(text, "apns_kafka_assigned_partitions") ?? 0) == 4
                && sample(text, #"apns_connections{app="com.example.shop",transport="binary",state="connected"}"#) == 2
                && sample(text, "apns_in_flight_jobs") == 0
        }
        #expect(sample(text, #"apns_connection_up{app="com.example.shop",transport="binary",connection="0"}"#) == 1)
        #expect(text.contains("apns_replay_buffer_notifications{") && !text.contains("apns_http2_streams_in_use{"))
        // Lag per partition (librdkafka's high watermark every 5 s, minus the first unsettled offset):
        // everything settled, so 0 on every partition.
        try await eventually("consumer lag reported", timeout: .seconds(300)) {
            text = try await get(base + "/metrics").body
            return (0..<4).allSatisfy { sample(text, #"apns_kafka_consumer_lag_messages{topic="apns.jobs",partition="\#($0)"}"#) == 0 }
        }
        // Jobs held in Redis (a campaign scheduled far ahead, as its gate would hold it): every process shows
        // the total (read from Redis every 5 s); none waits at the cap here.
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000
        let held = try await store.deferJobs([
            Deferral(
                campaign: "later", mode: .hold(dueMs: later),
                messages: (0..<5).map { DeferredMessage.member(key: Array(token(1000 + $0).hex.utf8), value: Array("job \($0)".utf8)) })
        ])
        #expect(held == [[HeldAnswer](repeating: .held, count: 5)])
        let heldBytes = try #require(try await store.heldUsage(campaigns: ["later"])["later"]).bytes
        try await eventually("held jobs on /metrics", timeout: .seconds(300)) {
            text = try await get(base + "/metrics").body
            return sample(text, "apns_held_jobs") == 5 && sample(text, "apns_held_bytes") == Double(heldBytes)
        }
        #expect(sample(text, "apns_held_cap_waiting_jobs") == 0 && sample(text, "apns_kafka_held_partitions") == 0)
        // No per-job or per-token label anywhere.
        #expect(!text.contains("m1:") && !text.contains(token(1).hex))
        // Every metric has its HELP (promtool's "no help text"), and promtool, when installed, agrees.
        #expect(metricsWithoutHelp(text).isEmpty, "no HELP: \(metricsWithoutHelp(text))")
        #expect(text.contains("# HELP apns_accepted_total Notifications the gateway accepted"))
        if let problems = try await promtoolProblems(text) { #expect(problems.isEmpty, "promtool: \(problems)") }

        // Readiness: Kafka assigned, Redis up, the app's connections up.
        try await eventually("ready") { try await get(base + "/readyz").status == 200 }
        await redis.kill()
        var notReady = (status: 0, body: "")
        try await eventually("not ready without Redis", timeout: .seconds(300)) {
            notReady = try await get(base + "/readyz")
            return notReady.status == 503
        }
        #expect(notReady.body.hasPrefix("not ready\n"))
        #expect(notReady.body.contains("- redis: unreachable at 127.0.0.1:\(redis.port)"))
        try await redis.start()
        try await eventually("ready again with Redis back", timeout: .seconds(300)) { try await get(base + "/readyz").status == 200 }

        try await served.stop()
        await client.close()
        await producer.close()
        try? await simulator.stop()
    }

    /// The HTTP/2 transport's own metrics, scraped over a socket after a campaign through `run`'s
    /// runner to the HTTP/2 simulator with token authentication: one answer-latency sample per
    /// request (none refused or retried here, so as many as accepted), and the provider token's age.
    @Test func http2MetricsShowAnswerLatencyAndTokenAge() async throws {
        let cluster = try MockCluster(
            brokers: 1, topics: [.init(name: "apns.jobs", partitions: 2), .init(name: "apns.jobs.dlq", partitions: 1)], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        let simulator = try await HTTP2Simulator.startedForTests()

        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 50)
        c.apps = http2Apps()
        c.sendHTTP2(to: simulator, connections: 2)
        // `run` with metrics.auth_token: the scrape needs the bearer token.
        c.metricsAuthToken = opsToken
        let auth = ["Authorization": "Bearer \(opsToken)"]

        let served = try await ServedPipeline(c)
        let base = served.base

        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        let template = try JSONParser.parse(#"{"app":"com.example.shop","payload":{"aps":{"alert":"Hello"}}}"#)
        let audience = (0..<200).map(token)
        try await producer.sendBatch(
            audience.map { t in
                KafkaProducerMessage(
                    topic: "apns.jobs", key: Array(t.hex.utf8),
                    value: Campaign.job(template: template, campaign: "h1", recipient: .init(token: t, language: nil)))
            })

        let accepted = #"apns_accepted_total{app="com.example.shop",transport="http2"}"#
        let answers = #"apns_gateway_answer_latency_seconds_count{app="com.example.shop",transport="http2"}"#
        let age = #"apns_provider_token_age_seconds{app="com.example.shop"}"#
        var text = ""
        try await eventually("the campaign settled and the token age sampled") {
            text = try await get(base + "/metrics", headers: auth).body
            return sample(text, accepted) == 200 && sample(text, age) != nil
        }
        #expect(sample(text, answers) == 200, "one latency sample per answer")
        // Every answer is in the +Inf bucket; the sum is positive and, on loopback, the mean well under
        // the 10 s bucket (a debug-built simulator checking each request's token answers the 100
        // requests written at once on a connection in turn: a few hundred ms each here).
        #expect(sample(text, #"apns_gateway_answer_latency_seconds_bucket{app="com.example.shop",transport="http2",le="+Inf"}"#) == 200)
        let sum = sample(text, #"apns_gateway_answer_latency_seconds_sum{app="com.example.shop",transport="http2"}"#) ?? -1
        #expect(sum > 0 && sum / 200 < 10, "sum \(sum)")
        #expect(text.contains(#"apns_gateway_answer_latency_seconds_bucket{app="com.example.shop",transport="http2",le="0.001"}"#))
        // The token was made with the first request of this test: seconds old, not an hour.
        let seconds = sample(text, age) ?? -1
        #expect(seconds >= 0 && seconds < 3600, "token age \(seconds)")
        // An HTTP/2 connection holds what it wrote unsettled as open streams, not a replay buffer.
        #expect(text.contains("apns_http2_streams_in_use{") && !text.contains("apns_replay_buffer_notifications{"))
        #expect(metricsWithoutHelp(text).isEmpty, "no HELP: \(metricsWithoutHelp(text))")
        // Without the token: 401, counted in the refusals the scrape shows.
        #expect(try await get(base + "/metrics").status == 401)
        #expect(try await get(base + "/healthz").status == 200)
        let refusals = try await get(base + "/metrics", headers: auth).body
        #expect(sample(refusals, #"apns_ops_refusals_total{reason="unauthorized"}"#) == 1)
        #expect(sample(refusals, #"apns_ops_refusals_total{reason="connection-cap"}"#) == 0)
        if let problems = try await promtoolProblems(text) { #expect(problems.isEmpty, "promtool: \(problems)") }

        try await served.stop()
        await producer.close()
        try? await simulator.stop()
    }

    /// The dashboard page rendered by headless Chromium (its JavaScript run) over a Redis holding a
    /// campaign's counters and a connection's status: the campaign's numbers are in the DOM. The server
    /// asks for a token: the page given it in its `#token=` fragment shows the data (and Chromium reports
    /// no Content-Security-Policy violation); without it, the page asks for the token and shows nothing.
    @Test func dashboardRendersACampaignInHeadlessChromium() async throws {
        let chromium = executablePath("chromium") ?? executablePath("chromium-browser")
        guard let chromium else {
            if ProcessInfo.processInfo.environment["CI"] != nil {
                Issue.record("chromium is not installed but CI is set: ops/setup installs Debian's chromium")
            }
            return
        }
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await store.incrementPublished(campaign: "spring-sale", by: 1000)
        var outcomes: [SettledOutcome] = []
        for i in 0..<640 {
            // The first three are broadcasts: the dashboard shows them apart.
            outcomes.append(
                .init(
                    jobID: "spring-sale:\(i)", app: shop, tokenHex: token(i).hex, campaign: "spring-sale", kind: .accepted, shard: i % 2,
                    isBroadcast: i < 3))
        }
        for i in 640..<652 {
            outcomes.append(
                .init(
                    jobID: "spring-sale:\(i)", app: shop, tokenHex: token(i).hex, campaign: "spring-sale", kind: .rejected,
                    code: "BadDeviceToken", suppressToken: TokenSuppression(reason: "invalid-token"), shard: 0))
        }
        for i in 652..<700 {
            outcomes.append(.init(jobID: "spring-sale:\(i)", app: shop, tokenHex: token(i).hex, campaign: "spring-sale", kind: .suppressed))
        }
        _ = try await store.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: 700)))
        try await store.updateShard(
            ShardStatus(app: shop, shard: 0, state: "connected", gateway: "127.0.0.1:2197", connectedSince: PipelineStore.epochNow() - 75))
        try await store.updateShard(
            ShardStatus(
                app: shop, shard: 1, state: "backing-off", gateway: "127.0.0.1:2197",
                lastError: "connect 127.0.0.1:2197: connection refused"))

        // No cache: the page must see Redis go away on its next read.
        let (server, data) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, authToken: opsToken, controlToken: opsControlToken,
            logger: testLogger, cacheFor: .zero)
        let url = "http://127.0.0.1:\(server.port)/#token=\(opsToken)"
        let shot =
            ProcessInfo.processInfo.environment["DASHBOARD_SCREENSHOT"]
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("apns-dashboard.png").path
        var console = ""
        let dom = try await runChromium(chromium, ["--dump-dom", "--enable-logging=stderr", "--v=0", url], stderr: &console)
        _ = try await runChromium(chromium, ["--screenshot=\(shot)", "--window-size=1400,1000", url])
        let asked = try await runChromium(chromium, ["--dump-dom", "http://127.0.0.1:\(server.port)/"])
        // Paused (as `campaign pause` or the page's button does): the row says so and offers resume.
        _ = try await store.changeControl(campaign: "spring-sale") {
            var state = $0
            state.paused = true
            return state
        }
        let paused = try await runChromium(chromium, ["--dump-dom", url])
        // Redis gone: the page says so instead of showing the last numbers as live.
        await redis.kill()
        let down = try await runChromium(chromium, ["--dump-dom", url])
        await server.stop()
        await data.close()
        await client.close()

        #expect(dom.contains(#"data-campaign="spring-sale" data-published="1000" data-settled="700""#))
        #expect(dom.contains(#"data-field="accepted" data-value="640""#))
        #expect(dom.contains(#"data-field="rejected" data-value="12""#))
        #expect(dom.contains(#"data-field="suppressed" data-value="48""#))
        #expect(dom.contains("70.0%"))
        #expect(dom.contains(#"data-reason="BadDeviceToken""#))
        #expect(dom.contains(#"data-app="com.example.shop" data-shard="1""#) && dom.contains("connection refused"))
        #expect(dom.contains(#"data-field="accepted" data-total="640""#))
        #expect(
            dom.contains(#"<tr data-broadcast="accepted"><td>Accepted</td><td class="num">3</td><td class="num">3</td></tr>"#), "\(dom)")
        #expect(!dom.contains(#"data-broadcast="rejected""#))
        #expect(FileManager.default.fileExists(atPath: shot))
        #expect(down.contains("Redis unreachable") && down.contains("could not be read"))
        #expect(!down.contains(#"data-campaign="spring-sale""#))
        // The policy let the page's script and styles run, and refused nothing; the script threw nothing.
        #expect(!console.contains("Content Security Policy") && !console.contains("Content-Security-Policy"), "\(console)")
        #expect(!console.contains("Uncaught"), "\(console)")
        // The campaign's state, and its buttons (the server has a token, so it takes them).
        #expect(dom.contains(#"data-state="running""#) && dom.contains(#"data-action="pause" data-campaign="spring-sale""#))
        #expect(dom.contains(#"data-action="cancel" data-campaign="spring-sale""#) && !dom.contains(#"data-action="resume""#))
        #expect(paused.contains(#"data-state="paused""#) && paused.contains(#"data-action="resume" data-campaign="spring-sale""#))
        // Without the token: the form, no data.
        #expect(asked.contains(#"data-state="asked""#) && asked.contains("token needed"))
        #expect(!asked.contains(#"data-campaign="spring-sale""#) && !asked.contains(#"data-field="accepted""#))
    }

    /// Headless Chromium with the page's JavaScript run (virtual time: the first fetch and render
    /// complete before the DOM is dumped). Output: stdout.
    func runChromium(_ chromium: String, _ arguments: [String]) async throws -> String {
        var ignored = ""
        return try await runChromium(chromium, arguments, stderr: &ignored)
    }

    /// The same, keeping what Chromium wrote on stderr (its console, with `--enable-logging=stderr`).
    func runChromium(_ chromium: String, _ arguments: [String], stderr: inout String) async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: chromium)
        // A profile of its own, removed afterwards (each run left a directory in the temporary directory).
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("chromium-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: profile) }
        process.arguments =
            [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--virtual-time-budget=5000",
                "--user-data-dir=\(profile)",
            ] + arguments
        let out = Pipe()
        process.standardOutput = out
        // stderr into a file, read once Chromium is done: a second blocking reader would take another
        // thread of the cooperative pool (two on a 2-core machine), the one the server answers on.
        let errPath = FileManager.default.temporaryDirectory.appendingPathComponent("chromium-stderr-\(UUID().uuidString)").path
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: errPath) }
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
        try startChild(process)
        // Read and wait on a thread of their own, never on the cooperative pool: the page's requests are
        // answered there, and two tests each blocking a pool thread (two on 2 cores) while their Chromium
        // waits for an answer was a deadlock (a CI run hung on it).
        let data = await outputAndExit(of: process, reading: out.fileHandleForReading).output
        stderr = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
        return String(decoding: data, as: UTF8.self)
    }
}

/// The Grafana dashboard queries only metrics the pipeline exports (a renamed metric would leave a
/// panel silently empty).
@Test func grafanaDashboardQueriesExportedMetrics() throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let json = try String(contentsOf: root.appendingPathComponent("ops/grafana/apns-pipeline.json"), encoding: .utf8)
    let exported: Set<String> = [
        PipelineMetrics.Name.received, PipelineMetrics.Name.accepted, PipelineMetrics.Name.rejected, PipelineMetrics.Name.suppressed,
        PipelineMetrics.Name.deduped, PipelineMetrics.Name.deadLettered, PipelineMetrics.Name.refusals, PipelineMetrics.Name.replayed,
        PipelineMetrics.Name.ambiguous, PipelineMetrics.Name.retried, PipelineMetrics.Name.reconnects, PipelineMetrics.Name.sequenceUnknown,
        PipelineMetrics.Name.deadLetterFailures, PipelineMetrics.Name.resentAfterCrash, PipelineMetrics.Name.inFlightWaits,
        PipelineMetrics.Name.writes, PipelineMetrics.Name.framesWritten, PipelineMetrics.Name.bytesWritten,
        PipelineMetrics.Name.inFlightJobs,
        PipelineMetrics.Name.connectionUp, PipelineMetrics.Name.connections, PipelineMetrics.Name.queueDepth,
        PipelineMetrics.Name.replayBuffer,
        PipelineMetrics.Name.replayBufferBytes, PipelineMetrics.Name.streamsInUse, PipelineMetrics.Name.consumerLag,
        PipelineMetrics.Name.assignedPartitions, PipelineMetrics.Name.settlementLatency, PipelineMetrics.Name.kafkaBatch,
        PipelineMetrics.Name.settleBatch, PipelineMetrics.Name.answerLatency, PipelineMetrics.Name.providerTokenAge,
    ]
    let used = Set(
        json.matches(of: /apns_[a-z0-9_]+/).map { String($0.output) }.map { name in
            name.hasSuffix("_bucket") ? String(name.dropLast("_bucket".count)) : name
        })
    #expect(used.count > 20)
    #expect(used.subtracting(exported).isEmpty, "not exported: \(used.subtracting(exported).sorted())")
}

/// `metrics.listen`: an address when given (the shipped dev files give 127.0.0.1:9464), off when
/// absent, and a bad value stops the start naming the key.
@Test func metricsListenIsReadFromThePipelineFile() throws {
    let key = "\(TestCertificates.directory)/AuthKey_TESTKEY123.p8"
    let app = "apps:\n  - bundle_id: a\n    token:\n      key: \(key)\n      key_id: K\n      team_id: T\n"
    func load(_ yaml: String) throws -> PipelineConfiguration {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: path)
    }
    #expect(try load(app).metricsListen == nil)
    #expect(try load(app + "metrics:\n  listen: 0.0.0.0:9464\n").metricsListen == GatewayAddress(host: "0.0.0.0", port: 9464))
    #expect {
        try load(app + "metrics:\n  listen: everywhere\n")
    } throws: { "\($0)".contains("metrics.listen") && "\($0)".contains("host:port") }
    #expect {
        try load(app + "metrics:\n  port: 9464\n")
    } throws: { "\($0)".contains("metrics.port") }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    for name in ["default.yaml", "binary.yaml"] {
        let text = try String(contentsOfFile: root + "/Pipelines/\(name)", encoding: .utf8)
            .replacingOccurrences(of: ".run/certs", with: TestCertificates.directory)
        #expect(try load(text).metricsListen == GatewayAddress(host: "127.0.0.1", port: 9464), "\(name)")
    }
}

/// `metrics.auth_token`: read as written, from `${file:…}` or `${ENV}`, kept among the secrets the logs
/// redact (also when written in clear); a short or unsendable token stops the start naming the key,
/// without quoting the value.
@Test func metricsAuthTokenIsReadFromThePipelineFile() throws {
    let key = "\(TestCertificates.directory)/AuthKey_TESTKEY123.p8"
    let app = "apps:\n  - bundle_id: a\n    token:\n      key: \(key)\n      key_id: K\n      team_id: T\n"
    func load(_ yaml: String, environment: [String: String] = [:]) throws -> PipelineConfiguration {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: path, environment: environment)
    }
    #expect(try load(app).metricsAuthToken == nil)
    let clear = try load(app + "metrics:\n  listen: 0.0.0.0:9464\n  auth_token: \(opsToken)\n")
    #expect(clear.metricsAuthToken == opsToken && clear.secrets.contains(opsToken))
    let fromEnvironment = try load(app + "metrics:\n  auth_token: ${OPS_TOKEN}\n", environment: ["OPS_TOKEN": opsToken])
    #expect(fromEnvironment.metricsAuthToken == opsToken && fromEnvironment.secrets.contains(opsToken))
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("ops-token-\(UUID().uuidString)").path
    try (opsToken + "\n").write(toFile: file, atomically: true, encoding: .utf8)
    #expect(try load(app + "metrics:\n  auth_token: ${file:\(file)}\n").metricsAuthToken == opsToken)
    // A redacting handler masks it.
    #expect(
        RedactingLogHandler(StreamLogHandler.standardError(label: "t"), secrets: clear.secrets).redact("token \(opsToken)") == "token ***")
    for bad in ["short-token", "has space in the token 0123", "\"\""] {
        #expect {
            try load(app + "metrics:\n  auth_token: \(bad)\n")
        } throws: { error in
            let text = "\(error)"
            return text.contains("metrics.auth_token") && text.contains("expected") && (bad.count < 8 || !text.contains(bad))
        }
    }
}

/// A taken port (a second `run` with the same file) stops the start with the address that could not be
/// bound, so `run` can name `metrics.listen`, instead of NIO's bare "Address already in use".
@Test func aTakenPortIsAListenErrorNamingTheAddress() async throws {
    let first = try await OperationsServer(host: "127.0.0.1", port: 0, routes: .init(), logger: Logger(label: "ops-test"))
    await #expect {
        _ = try await OperationsServer(host: "127.0.0.1", port: first.port, routes: .init(), logger: Logger(label: "ops-test"))
    } throws: { error in
        guard let listen = error as? OperationsServer.ListenError else { return false }
        return listen.port == first.port && "\(listen)".contains("127.0.0.1:\(first.port)") && "\(listen)".contains("in use")
    }
    await first.stop()
}
