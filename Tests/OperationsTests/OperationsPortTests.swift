import Foundation
import Logging
import NIOCore
import NIOPosix
import Pipeline
import ProcessSupport
import Redis
import Synchronization
import TestSupport
import Testing

@testable import Operations

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// GET over a real socket with headers: status, body and the response's headers (lower-cased names).
/// `timeout` only keeps a broken server from hanging the test (a loaded machine may be slow).
func get(
    _ url: String, headers: [String: String], timeout: TimeInterval = 60
) async throws -> (status: Int, body: String, headers: [String: String]) {
    var request = URLRequest(url: URL(string: url)!)
    request.timeoutInterval = timeout
    for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
    let (data, response) = try await URLSession.shared.data(for: request)
    let http = response as? HTTPURLResponse
    var out: [String: String] = [:]
    for (name, value) in http?.allHeaderFields ?? [:] { out["\(name)".lowercased()] = "\(value)" }
    return (http?.statusCode ?? 0, String(decoding: data, as: UTF8.self), out)
}

/// A plain TCP connection that writes what the test says and keeps what the server sends, to see a
/// server close a connection by itself.
final class RawConnection: Sendable {
    private final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let received = Mutex<[UInt8]>([])
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            received.withLock { $0.append(contentsOf: buffer.readableBytesView) }
        }
    }

    let channel: any Channel
    private let collector: Collector

    private init(channel: any Channel, collector: Collector) {
        self.channel = channel
        self.collector = collector
    }

    static func open(port: Int) async throws -> RawConnection {
        let collector = Collector()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(collector) }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return RawConnection(channel: channel, collector: collector)
    }

    func send(_ text: String) async throws {
        try await channel.writeAndFlush(channel.allocator.buffer(string: text)).get()
    }

    var isOpen: Bool { channel.isActive }

    /// What the server sent, once it has closed the connection. `guardTime` only keeps a broken server
    /// from hanging the test: past it, the test closes the connection and records a failure.
    func closedByServer(guardTime: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
        let channel = channel
        let guardTask = Task {
            try await Task.sleep(for: guardTime)
            Issue.record("the server did not close the connection", sourceLocation: sourceLocation)
            try? await channel.close()
        }
        try? await channel.closeFuture.get()
        guardTask.cancel()
        return String(decoding: collector.received.withLock { $0 }, as: UTF8.self)
    }

    func close() async { try? await channel.close() }
}

let opsToken = "ops-token-0123456789abcdef"

/// A server with routes of its own (no Redis): what each path answered is known.
func plainServer(token: String? = opsToken, limits: OperationsServer.Limits = .init()) async throws -> OperationsServer {
    try await OperationsServer(
        host: "127.0.0.1", port: 0,
        routes: .init(metrics: { Array("apns_up 1\n".utf8) }, readiness: { [] }, dashboard: { Array(#"{"now":1}"#.utf8) }),
        authToken: token, limits: limits, logger: testLogger)
}

@Suite struct OperationsPortTests {
    /// With a token, every path but `/healthz` and the page's static files answers 401 without it or
    /// with another one (RFC 6750 challenge), 200 with it; each refusal is counted.
    @Test func theBearerTokenGuardsEverythingButHealthz() async throws {
        let server = try await plainServer()
        defer { Task { await server.stop() } }
        let base = "http://127.0.0.1:\(server.port)"
        let good = ["Authorization": "Bearer \(opsToken)"]
        var refused = 0
        for path in ["/metrics", "/readyz", "/api/dashboard", "/no-such-path"] {
            let none = try await get(base + path, headers: [:])
            #expect(none.status == 401, "\(path)")
            #expect(none.headers["www-authenticate"] == #"Bearer realm="apns-pipeline""#, "\(path)")
            #expect(!none.body.contains("apns_up") && !none.body.contains("now"))
            for wrong in [
                "Bearer ops-token-0123456789abcdeX", "Bearer ops-token-0123456789abcde", "Bearer \(opsToken)0", "Basic \(opsToken)",
                "Bearer", opsToken,
            ] {
                let answer = try await get(base + path, headers: ["Authorization": wrong])
                #expect(answer.status == 401, "\(path) with \(wrong)")
                #expect(answer.headers["www-authenticate"]?.contains(#"error="invalid_token""#) == true)
            }
            refused += 7
        }
        #expect(try await get(base + "/metrics", headers: good).body == "apns_up 1\n")
        #expect(
            try await get(base + "/metrics", headers: ["authorization": "bearer \(opsToken)"]).status == 200,
            "the scheme is case-insensitive")
        #expect(try await get(base + "/readyz", headers: good).body == "ready\n")
        #expect(try await get(base + "/api/dashboard", headers: good).body == #"{"now":1}"#)
        #expect(try await get(base + "/no-such-path", headers: good).status == 404)
        // Open: liveness, and the page with its files (no data in them).
        #expect(try await get(base + "/healthz", headers: [:]).body == "ok\n")
        for path in ["/", "/dashboard", "/dashboard.js", "/dashboard.css"] {
            #expect(try await get(base + path, headers: [:]).status == 200, "\(path)")
        }
        #expect(server.refusals[.unauthorized] == refused)

        // Without a token: open, as before.
        let open = try await plainServer(token: nil)
        #expect(try await get("http://127.0.0.1:\(open.port)/metrics", headers: [:]).body == "apns_up 1\n")
        await open.stop()
    }

    /// The comparison: equal tokens only, whatever the lengths (no prefix, no extension).
    @Test func tokensAreComparedWhole() {
        let token = Array("abcdefghijklmnop".utf8)
        #expect(OperationsServer.authorized("Bearer abcdefghijklmnop", token: token))
        #expect(OperationsServer.authorized("  Bearer abcdefghijklmnop ", token: token))
        #expect(!OperationsServer.authorized("Bearer abcdefghijklmno", token: token))
        #expect(!OperationsServer.authorized("Bearer abcdefghijklmnopq", token: token))
        #expect(!OperationsServer.authorized("Bearer bbcdefghijklmnop", token: token))
        #expect(!OperationsServer.authorized("Bearer ", token: token))
        #expect(!OperationsServer.authorized(nil, token: token))
    }

    /// The page and its files carry the security headers; the page has no inline script or style, so the
    /// policy can forbid them; every answer says nosniff.
    @Test func thePageIsServedWithAStrictPolicy() async throws {
        let server = try await plainServer()
        defer { Task { await server.stop() } }
        let base = "http://127.0.0.1:\(server.port)"
        let page = try await get(base + "/", headers: [:])
        let csp = try #require(page.headers["content-security-policy"])
        #expect(csp.contains("default-src 'none'") && csp.contains("script-src 'self'") && csp.contains("style-src 'self'"))
        #expect(csp.contains("frame-ancestors 'none'") && !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"))
        #expect(page.headers["x-frame-options"] == "DENY")
        #expect(page.headers["referrer-policy"] == "no-referrer")
        #expect(page.headers["content-type"] == "text/html; charset=utf-8")
        // Nothing inline: one external script, one external style sheet, no style attribute, no handler.
        #expect(page.body.contains(#"<script src="/dashboard.js" defer></script>"#))
        #expect(page.body.components(separatedBy: "<script").count == 2)
        #expect(!page.body.contains("<style") && !page.body.contains(" style=") && !page.body.contains(" onclick="))
        let script = try await get(base + "/dashboard.js", headers: [:])
        #expect(script.headers["content-type"] == "text/javascript; charset=utf-8")
        #expect(!script.body.contains(#" style=""#), "style attributes in generated markup would be refused by the policy")
        #expect(try await get(base + "/dashboard.css", headers: [:]).headers["content-type"] == "text/css; charset=utf-8")
        for path in ["/", "/dashboard.js", "/dashboard.css", "/healthz", "/metrics"] {
            let answer = try await get(base + path, headers: ["Authorization": "Bearer \(opsToken)"])
            #expect(answer.headers["x-content-type-options"] == "nosniff", "\(path)")
            #expect(answer.headers["cache-control"] == "no-store", "\(path)")
            #expect(answer.headers["content-security-policy"] != nil, "\(path)")
        }
    }

    /// A connection that sends nothing, or trickles its head, is closed by the server without an
    /// answer; a head or body over the limits is refused; each is counted.
    @Test func idleTrickledAndOversizedRequestsAreClosed() async throws {
        var limits = OperationsServer.Limits()
        limits.requestTimeout = .milliseconds(300)
        let server = try await plainServer(limits: limits)
        defer { Task { await server.stop() } }

        let idle = try await RawConnection.open(port: server.port)
        #expect(try await idle.closedByServer() == "")

        // One header byte at a time, forever: the deadline is per request, not per read. (On a loaded
        // machine the server may close before the first write: the same outcome.)
        let trickle = try await RawConnection.open(port: server.port)
        try? await trickle.send("GET /healthz HTTP/1.1\r\nHost: x\r\n")
        let trickling = Task {
            for _ in 0..<600 where trickle.isOpen {
                try? await trickle.send("X")
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(try await trickle.closedByServer() == "")
        trickling.cancel()
        #expect((server.refusals[.timeout] ?? 0) >= 2)

        // The rest on a server with a deadline of minutes, so that a slow machine cannot turn them into
        // timeouts.
        var patientLimits = OperationsServer.Limits()
        patientLimits.requestTimeout = .seconds(300)
        patientLimits.connectionTimeout = .seconds(300)
        let patient = try await plainServer(limits: patientLimits)
        defer { Task { await patient.stop() } }
        // A complete request in time is answered.
        let quick = try await RawConnection.open(port: patient.port)
        try await quick.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try await quick.closedByServer().hasSuffix("\r\n\r\nok\n"))

        let big = try await RawConnection.open(port: patient.port)
        try await big.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 9000))\r\n\r\n")
        #expect(try await big.closedByServer().hasPrefix("HTTP/1.1 400"))
        let body = try await RawConnection.open(port: patient.port)
        try await body.send("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n\(String(repeating: "b", count: 5000))")
        #expect(try await body.closedByServer().hasPrefix("HTTP/1.1 413"))
        #expect(patient.refusals[.tooLarge] == 2)
    }

    /// At most `maxConnections` open: one more is closed at once (and counted); a slot freed serves again.
    @Test func theConnectionCapIsEnforced() async throws {
        var limits = OperationsServer.Limits()
        limits.maxConnections = 3
        limits.probeSlots = 0  // the slots kept for probes: OperationsPortCapsTests
        limits.requestTimeout = .seconds(120)  // the held connections say nothing for a while
        limits.connectionTimeout = .seconds(120)
        let server = try await plainServer(limits: limits)
        defer { Task { await server.stop() } }
        var held: [RawConnection] = []
        for _ in 0..<3 { held.append(try await RawConnection.open(port: server.port)) }
        try await eventually("three connections open") { server.openConnections == 3 }

        let extra = try await RawConnection.open(port: server.port)
        #expect(try await extra.closedByServer() == "", "closed without an answer")
        #expect(server.refusals[.connectionCap] == 1)
        let allOpen = held.allSatisfy { $0.isOpen }
        #expect(allOpen)

        // The held ones are still served.
        try await held[0].send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try await held[0].closedByServer().hasSuffix("ok\n"))
        try await eventually("a slot freed") { server.openConnections == 2 }
        let next = try await RawConnection.open(port: server.port)
        try await next.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try await next.closedByServer().hasSuffix("ok\n"))
        for c in held { await c.close() }
        try await eventually("all closed") { server.openConnections == 0 }
    }
}

/// `promtool check metrics` says "no help text" for a `# TYPE` without a `# HELP`: the names that lack one.
func metricsWithoutHelp(_ text: String) -> [String] {
    var typed: [String] = []
    var helped: Set<String> = []
    for line in text.split(separator: "\n") {
        let parts = line.split(separator: " ", maxSplits: 3)
        guard parts.count >= 3, parts[0] == "#" else { continue }
        if parts[1] == "TYPE" { typed.append(String(parts[2])) }
        if parts[1] == "HELP", parts.count == 4, !parts[3].isEmpty { helped.insert(String(parts[2])) }
    }
    return typed.filter { !helped.contains($0) }
}

/// Every metric name the pipeline declares has a HELP text (a metric added without one fails here).
@Test func everyDeclaredMetricHasHelpText() throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let source = try String(contentsOf: root.appendingPathComponent("Sources/Pipeline/Metrics/PipelineMetrics.swift"), encoding: .utf8)
    let declared = source.matches(of: /static let \w+ = "(apns_[a-z0-9_]+)"/).map { String($0.output.1) }
    #expect(declared.count > 30)
    #expect(declared.filter { (PipelineMetrics.help[$0] ?? "").isEmpty }.isEmpty)
}

/// `promtool check metrics` on an exposition text, when promtool is installed (Debian's `prometheus`
/// package): nil when it is not.
func promtoolProblems(_ text: String) async throws -> String? {
    guard let promtool = executablePath("promtool") else { return nil }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: promtool)
    process.arguments = ["check", "metrics"]
    let input = Pipe()
    let output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    process.standardError = output
    try startChild(process)
    // Written, and read and waited for, off the cooperative pool (ChildProcessWaits.swift): either may
    // block on a full pipe, and a blocked pool thread on a 2-core machine is half the pool.
    let writing = UncheckedFileHandle(handle: input.fileHandleForWriting)
    let bytes = Data(text.utf8)
    async let written: Void = onThreadOfItsOwn {
        writing.handle.write(bytes)
        try? writing.handle.close()
    }
    let (status, data) = await outputAndExit(of: process, reading: output.fileHandleForReading)
    await written
    let text = String(decoding: data, as: UTF8.self)
    return status == 0 || !text.isEmpty ? text : "promtool exited with \(status)"
}

/// A pipe's end handed to the thread that writes to it (and only to it).
private struct UncheckedFileHandle: @unchecked Sendable {
    let handle: FileHandle
}

/// The dashboard's Redis side: readiness on a connection of its own, snapshots shared by viewers.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct DashboardRedisTests {
    /// Calls of `command` Redis has served (INFO commandstats), 0 when never called.
    func calls(_ client: RedisClient, _ command: String) async throws -> Int {
        let info = try await client.send(RedisCommand("INFO", "commandstats")).string ?? ""
        for line in info.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_\(command):calls=") {
            return Int(line.dropFirst("cmdstat_\(command):calls=".count).prefix { $0.isNumber }) ?? 0
        }
        return 0
    }

    /// The dashboard shows what is held in Redis (design §2.11): each campaign's held jobs and bytes, and
    /// every name holding some (an app's `max_rate` too); the page draws them in a "held" column.
    @Test func heldJobsAreOnTheDashboard() async throws {
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await store.incrementPublished(campaign: "paused", by: 3)
        let messages = (0..<3).map { DeferredMessage.member(key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) }
        _ = try await store.deferJobs([
            Deferral(campaign: "paused", mode: .hold(dueMs: 0), messages: messages),
            Deferral(campaign: "@app:com.example.shop", mode: .hold(dueMs: 0), messages: [messages[0]]),
        ])
        let data = try DashboardData(redisURL: redis.url, prefix: "apns", logger: testLogger, cacheFor: .zero)
        let snapshot = await data.snapshot()
        #expect(snapshot.error == nil)
        let campaign = try #require(snapshot.campaigns.first { $0.id == "paused" })
        let expected = try #require(try await store.heldUsage(campaigns: ["paused"])["paused"])
        #expect(campaign.heldJobs == 3 && campaign.heldBytes == expected.bytes && expected.bytes > 0)
        #expect(snapshot.held.map(\.name) == ["@app:com.example.shop", "paused"] && snapshot.held.map(\.jobs) == [1, 3])
        #expect(DashboardPage.script.contains("data-held") && DashboardPage.script.contains("held in Redis"))
        await data.close()
        await client.close()
    }

    /// N viewers at once cost one read: 25 concurrent requests → the SCANs of one snapshot, and the
    /// next requests within the cache's life none. Without the cache (0), each request reads.
    @Test func concurrentViewersShareOneRead() async throws {
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await store.incrementPublished(campaign: "c1", by: 10)
        _ = try await client.send(RedisCommand("CONFIG", "RESETSTAT"))

        let (server, data) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, authToken: opsToken, logger: testLogger,
            cacheFor: .seconds(3600))
        let url = "http://127.0.0.1:\(server.port)/api/dashboard"
        let auth = ["Authorization": "Bearer \(opsToken)"]
        let bodies = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<25 { group.addTask { try await get(url, headers: auth).body } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(bodies.count == 25 && Set(bodies).count == 1 && bodies[0].contains(#""id":"c1""#))
        // One snapshot: one SCAN per prefix (campaigns, shards) over this small keyspace.
        #expect(try await calls(client, "scan") == 2)
        for _ in 0..<5 { _ = try await get(url, headers: auth) }
        #expect(try await calls(client, "scan") == 2)
        await server.stop()
        await data.close()

        // The same count without the cache moves with every (sequential) request: it measures reads.
        let (uncached, uncachedData) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, logger: testLogger, cacheFor: .zero)
        for _ in 0..<3 { _ = try await get("http://127.0.0.1:\(uncached.port)/api/dashboard", headers: [:]) }
        #expect(try await calls(client, "scan") == 2 + 3 * 2)
        await uncached.stop()
        await uncachedData.close()
        await client.close()
    }

    /// `/readyz` PINGs on a connection of its own: with the dashboard hammered over a keyspace that
    /// makes each snapshot hundreds of SCANs, every readiness probe answers ready, and Redis shows two
    /// connections: one whose last command is PING, another that ran the dashboard's reads.
    @Test func readinessStaysReadyWhileTheDashboardIsHammered() async throws {
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        // 50,000 keys outside the prefix: each snapshot scans them all (COUNT 1000: ~100 round trips).
        _ = try await client.send(RedisCommand("EVAL", "for i = 1, 50000 do redis.call('SET', 'filler:' .. i, 'x') end return 1", "0"))
        let (server, data) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, authToken: opsToken, logger: testLogger, cacheFor: .zero)
        let base = "http://127.0.0.1:\(server.port)"
        let auth = ["Authorization": "Bearer \(opsToken)"]
        let hammer = Task {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        var ok = 0
                        for _ in 0..<5 where try await get(base + "/api/dashboard", headers: auth).status == 200 { ok += 1 }
                        return ok
                    }
                }
                return try await group.reduce(0, +)
            }
        }
        var probes: [Int] = []
        for _ in 0..<20 { probes.append(try await get(base + "/readyz", headers: auth).status) }
        #expect(try await hammer.value == 30)
        #expect(probes == Array(repeating: 200, count: 20))
        #expect(try await get(base + "/readyz", headers: auth).status == 200)

        let list = try await client.send(RedisCommand("CLIENT", "LIST")).string ?? ""
        let lines = list.split(whereSeparator: \.isNewline)
        let pinging = lines.filter { $0.contains(" cmd=ping ") }
        let reading = lines.filter { $0.contains(" cmd=scan ") || $0.contains(" cmd=hgetall ") }
        #expect(pinging.count == 1 && reading.count == 1, "\(list)")
        await server.stop()
        await data.close()
        await client.close()
    }
}

/// Log lines kept for the test to read.
final class CollectedLogs: Sendable {
    let lines = Mutex<[(level: Logger.Level, message: String)]>([])

    var logger: Logger {
        Logger(label: "collected") { _ in Handler(logs: self) }
    }

    struct Handler: LogHandler {
        let logs: CollectedLogs
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            logs.lines.withLock { $0.append((event.level, event.message.description)) }
        }
    }
}

/// Without a token, an address beyond loopback is warned about at start; loopback, or a token, is not.
@Test(.enabled(if: RedisServer.available, RedisServer.skipReason))
func anOpenPortBeyondLoopbackIsWarnedAbout() async throws {
    #expect(OperationsSurface.isLoopback("127.0.0.1") && OperationsSurface.isLoopback("::1") && OperationsSurface.isLoopback("localhost"))
    #expect(!OperationsSurface.isLoopback("0.0.0.0") && !OperationsSurface.isLoopback("::") && !OperationsSurface.isLoopback("10.0.0.5"))
    let redis = try await RedisServer()
    defer { redis.stop() }
    func warnings(host: String, token: String?) async throws -> [String] {
        let logs = CollectedLogs()
        let (server, data) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: host, port: 0, authToken: token, logger: logs.logger)
        await server.stop()
        await data.close()
        return logs.lines.withLock { $0.filter { $0.level == .warning }.map(\.message) }
    }
    let open = try await warnings(host: "0.0.0.0", token: nil)
    #expect(open.count == 1 && open[0].contains("without metrics.auth_token"))
    #expect(try await warnings(host: "0.0.0.0", token: opsToken).isEmpty)
    #expect(try await warnings(host: "127.0.0.1", token: nil).isEmpty)
}
