import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import ProcessSupport
import Synchronization
import TestSupport
import Testing

@testable import Sender

/// Issue 31 (6): the proxy URL and NO_PROXY as read; the CONNECT exchange on an `EmbeddedChannel`.
@Suite struct HTTPSProxyParsingTests {
    @Test func urlsAsCurlReadsThem() throws {
        let full = try HTTPSProxy(url: "http://apns:p%40ss%3Aw0rd@proxy.corp.example:3128")
        #expect(full.host == "proxy.corp.example" && full.port == 3128)
        #expect(full.username == "apns" && full.password == "p@ss:w0rd", "user info is percent-decoded")
        #expect(full.description == "http://apns:***@proxy.corp.example:3128", "the password never shows")
        #expect(full.proxyAuthorization == "Basic " + Data("apns:p@ss:w0rd".utf8).base64EncodedString())

        let bare = try HTTPSProxy(url: "proxy.corp.example:8080")
        #expect(bare.host == "proxy.corp.example" && bare.port == 8080 && bare.username == nil, "no scheme is http://")
        #expect(bare.proxyAuthorization == nil)
        #expect(try HTTPSProxy(url: "http://proxy.corp.example/").port == 80, "no port is http's 80; a bare / is allowed")
        #expect(try HTTPSProxy(url: "HTTP://[::1]:3128").host == "::1")
        #expect(try HTTPSProxy(url: "http://[::1]:3128").address == "[::1]:3128")
        #expect(try HTTPSProxy(url: "http://user@proxy:1").password == nil)
    }

    @Test func badURLsSayWhatIsExpectedAndNeverQuoteTheURL() {
        let cases: [(String, String)] = [
            ("https://apns:Secr3tPw@proxy:3128", "https:// proxy (TLS to the proxy itself) is not supported"),
            ("socks5://apns:Secr3tPw@proxy:1080", "the scheme socks5:// is not supported"),
            ("http://apns:Secr3tPw@proxy:99999", "bad proxy port"),
            ("http://apns:Secr3tPw@proxy:port", "bad proxy port"),
            ("http://apns:Secr3tPw@:3128", "missing or malformed proxy host"),
            ("http://apns:Secr3tPw@proxy:3128/path", "no path, query or fragment"),
            ("http://apns:Secr/3tPw@proxy:3128", "no path, query or fragment"),
            ("http://apns:Secr3tPw%zz@proxy:3128", "bad percent-encoding in the password"),
            ("http://[::1:3128", "unclosed ["),
        ]
        for (url, problem) in cases {
            #expect(throws: HTTPSProxy.URLError.self, "\(url)") { try HTTPSProxy(url: url) }
            do {
                _ = try HTTPSProxy(url: url)
            } catch {
                #expect(error.problem.contains(problem), "\(url): \(error.problem)")
                #expect(error.problem.contains("http://[user:password@]host:port"), "says what is expected: \(error.problem)")
                #expect(!error.problem.contains("Secr"), "never quotes the URL: \(error.problem)")
            }
        }
    }

    @Test func noProxyMatchesHostsAndDomainSuffixes() throws {
        let proxy = try HTTPSProxy(url: "http://proxy:3128")
        let settings = HTTPSProxySettings(
            proxy: proxy, noProxy: HTTPSProxySettings.noProxyList(" localhost, .internal.example ,Apple.COM:443,[::1], 10.0.0.7,"))
        #expect(settings.noProxy == ["localhost", "internal.example", "apple.com", "::1", "10.0.0.7"])
        for direct in ["localhost", "LOCALHOST.", "api.push.apple.com", "apple.com", "a.b.internal.example", "::1", "[::1]", "10.0.0.7"] {
            #expect(settings.proxy(for: direct) == nil, "\(direct) is reached directly")
        }
        for proxied in ["api.push.apple.com.evil.example", "notapple.com", "internal.example.org", "10.0.0.70", "127.0.0.1"] {
            #expect(settings.proxy(for: proxied) == proxy, "\(proxied) goes through the proxy")
        }
        #expect(HTTPSProxySettings(proxy: proxy, noProxy: ["*"]).proxy(for: "api.push.apple.com") == nil, "* is every host")
        #expect(HTTPSProxySettings(proxy: proxy).proxy(for: "127.0.0.1") == proxy, "loopback is not exempt unless listed (as curl)")
    }

    @Test func theEnvironmentAsCurlReadsIt() {
        #expect(HTTPSProxySettings.proxyVariable(in: ["HTTPS_PROXY": "http://a:1"])! == ("HTTPS_PROXY", "http://a:1"))
        #expect(
            HTTPSProxySettings.proxyVariable(in: ["HTTPS_PROXY": "http://a:1", "https_proxy": "http://b:2"])! == (
                "https_proxy", "http://b:2"
            ))
        #expect(HTTPSProxySettings.proxyVariable(in: ["https_proxy": " "]) == nil, "empty is unset")
        #expect(HTTPSProxySettings.proxyVariable(in: ["http_proxy": "http://a:1"]) == nil, "Apple is reached over https only")
        #expect(HTTPSProxySettings.noProxyVariable(in: ["NO_PROXY": "x", "no_proxy": "y"])! == ("no_proxy", "y"))
        #expect(HTTPSProxySettings.noProxyVariable(in: ["NO_PROXY": "x", "no_proxy": ""])! == ("NO_PROXY", "x"), "empty is unset")
    }

    // MARK: the CONNECT exchange, without sockets

    /// An active `EmbeddedChannel` with the CONNECT sent; returns what was written and the tunnel's future.
    func connecting(
        _ proxy: HTTPSProxy, to host: String = "api.push.apple.com", port: Int = 443
    ) throws
        -> (EmbeddedChannel, String, EventLoopFuture<Void>)
    {
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 3128)).wait()
        let future = proxy.establishTunnel(on: channel, to: host, port: port, deadline: .now() + .seconds(30))
        var written = ""
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { written += String(buffer: buffer) }
        return (channel, written, future)
    }

    /// The future's result if it has one (an `EmbeddedEventLoop` runs callbacks at once).
    func result(_ future: EventLoopFuture<Void>) -> Result<Void, any Error>? {
        final class Box: Sendable { let value = Mutex<Result<Void, any Error>?>(nil) }
        let box = Box()
        future.whenComplete { r in box.value.withLock { $0 = r } }
        return box.value.withLock { $0 }
    }

    @Test func connectThenAPlainByteTunnel() throws {
        let (channel, written, future) = try connecting(try HTTPSProxy(url: "http://apns:pr0xy-pw@proxy:3128"))
        let basic = Data("apns:pr0xy-pw".utf8).base64EncodedString()
        #expect(written.hasPrefix("CONNECT api.push.apple.com:443 HTTP/1.1\r\n"))
        #expect(written.contains("Host: api.push.apple.com:443\r\n"))
        #expect(written.contains("Proxy-Authorization: Basic \(basic)\r\n"))
        #expect(written.hasSuffix("\r\n\r\n"))
        #expect(result(future) == nil, "no tunnel before the proxy answers")

        try channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 Connection established\r\nProxy-Agent: test\r\n\r\n"))
        channel.embeddedEventLoop.run()
        guard case .success = result(future) else {
            Issue.record("tunnel not established: \(String(describing: result(future)))")
            return
        }
        // No HTTP/1 handler is left: bytes pass untouched both ways (what TLS will send and read).
        let sync = channel.pipeline.syncOperations
        #expect((try? sync.handler(type: HTTPRequestEncoder.self)) == nil)
        #expect((try? sync.handler(type: ByteToMessageHandler<HTTPResponseDecoder>.self)) == nil)
        try channel.writeInbound(ByteBuffer(bytes: [0x16, 0x03, 0x03, 0x00]))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(bytes: [0x16, 0x03, 0x03, 0x00]))
        try channel.writeAndFlush(ByteBuffer(string: "client hello")).wait()
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "client hello"))
        _ = try? channel.finish()
    }

    @Test func aRefusalIsAnErrorNamingProxyStatusAndFix() throws {
        let cases: [(String, String, HTTPSProxyError.Problem, String)] = [
            (
                "http://apns:pw-1234@proxy:3128", "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n",
                .authenticationRequired(status: 407, credentialsGiven: true), "the user or password in http2.proxy is wrong"
            ),
            (
                "http://proxy:3128", "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n",
                .authenticationRequired(status: 407, credentialsGiven: false), "it wants credentials"
            ),
            (
                "http://apns:pw-1234@proxy:3128", "HTTP/1.0 401 Unauthorized\r\n\r\n",
                .authenticationRequired(status: 401, credentialsGiven: true), "the user or password in http2.proxy is wrong"
            ),
            (
                "http://proxy:3128", "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
                .refused(status: 403, reason: "Forbidden"), "must allow CONNECT to api.push.apple.com:443"
            ),
            (
                "http://proxy:3128", "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
                .refused(status: 502, reason: "Bad Gateway"), "could not reach api.push.apple.com:443"
            ),
        ]
        for (url, answer, problem, fix) in cases {
            let (channel, _, future) = try connecting(try HTTPSProxy(url: url))
            _ = try? channel.writeInbound(ByteBuffer(string: answer))
            guard case .failure(let error as HTTPSProxyError) = result(future) else {
                Issue.record("\(answer): expected an HTTPSProxyError, got \(String(describing: result(future)))")
                continue
            }
            #expect(error.problem == problem)
            #expect(error.description.contains("HTTPS proxy proxy:3128") && error.description.contains(fix), "\(error)")
            // Wrong credentials do not get better by retrying: the connection waits (HTTP2ConnectRefusal).
            if case .authenticationRequired = problem {
                #expect(error.description.contains("waits (as for refused credentials) before it tries again"), "\(error)")
                #expect(!error.summary.contains("tries again") && error.description.hasPrefix(error.summary))
            } else {
                #expect(error.description.contains("retries with back-off"), "\(error)")
            }
            #expect(!error.description.contains("pw-1234"))
            #expect(!channel.isActive, "a refused tunnel's connection is closed")
        }
    }

    @Test func aSilentProxyTimesOut() throws {
        let (channel, _, future) = try connecting(try HTTPSProxy(url: "http://proxy:3128"))
        channel.embeddedEventLoop.advanceTime(to: .now() + .seconds(31))
        guard case .failure(let error as HTTPSProxyError) = result(future) else {
            Issue.record("expected an HTTPSProxyError, got \(String(describing: result(future)))")
            return
        }
        guard case .timedOut = error.problem else {
            Issue.record("\(error)")
            return
        }
        #expect(error.description.contains("did not answer CONNECT api.push.apple.com:443 within"), "\(error)")
        #expect(!channel.isActive)
    }

    @Test func aProxyClosingBeforeAnsweringIsAFailure() throws {
        let (channel, _, future) = try connecting(try HTTPSProxy(url: "http://proxy:3128"))
        channel.pipeline.fireChannelInactive()
        guard case .failure(let error as HTTPSProxyError) = result(future) else {
            Issue.record("expected an HTTPSProxyError, got \(String(describing: result(future)))")
            return
        }
        #expect(error.problem == .closed)
        _ = try? channel.finish()
    }
}

/// Issue 31 (6): the HTTP/2 transport through a real HTTPS proxy (Debian's tinyproxy) to the HTTP/2
/// simulator, over real sockets and TLS end to end through the tunnel.
@Suite(.serialized, .enabled(if: TinyProxy.available, TinyProxy.skipReason))
struct HTTPSProxyTransportTests {
    static func transport(
        _ sim: HTTP2Simulator, proxy: HTTPSProxySettings?, connections: Int = 2, log: OutcomeLog,
        logger: Logger = Logger(label: "apns.sender.http2.test"), reconnectMax: Duration = .milliseconds(200)
    ) throws -> HTTP2Transport {
        var c = HTTP2TransportConfiguration(
            app: shop, authentication: .certificate(.test(app: shop, in: TestCertificates.directory)),
            hosts: [GatewayAddress(host: "127.0.0.1", port: sim.port)])
        c.connections = connections
        c.serverHostname = "localhost"
        c.linger = .milliseconds(1)
        c.connectTimeout = .seconds(5)
        c.reconnect.initialDelay = .milliseconds(10)
        c.reconnect.maximumDelay = reconnectMax
        c.reconnect.attemptsPerSecondPerGateway = 2000
        c.retry.initialDelay = .milliseconds(5)
        c.retry.maximumDelay = .milliseconds(50)
        c.proxy = proxy
        return try HTTP2Transport(configuration: c, group: MultiThreadedEventLoopGroup.singleton, logger: logger, onOutcomes: log.handler)
    }

    static func settings(_ url: String, noProxy: [String] = []) throws -> HTTPSProxySettings {
        HTTPSProxySettings(proxy: try HTTPSProxy(url: url), noProxy: noProxy)
    }

    /// Sends and waits for every answer, at most 60 s: a proxy path that does not work fails the test
    /// rather than hanging it.
    static func sendAll(_ jobs: [PushNotification], through transport: HTTP2Transport) async throws {
        try await transport.send(jobs)
        let drained = await transport.drainAndClose(before: .now + .seconds(60))
        #expect(drained.allSatisfy { if case .allAnswered = $0 { true } else { false } }, "\(drained)")
    }

    /// Every job accepted exactly once (as outcomes) and recorded by the simulator.
    static func expectAllDelivered(_ n: Int, log: OutcomeLog, sim: HTTP2Simulator, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(HTTP2TransportTests.kinds(log) == [.accepted: n], sourceLocation: sourceLocation)
        #expect(Set(log.outcomes.map(\.jobID)).count == n, sourceLocation: sourceLocation)
        #expect(Set(sim.records.compactMap(\.jobID)) == Set((0..<n).map { "job-\($0)" }), sourceLocation: sourceLocation)
    }

    static func lastErrors(_ transport: HTTP2Transport) async -> [String] {
        await transport.statistics().compactMap(\.lastError)
    }

    @Test func throughAPlainProxy() async throws {
        let sim = try await HTTP2Simulator.startedForTests(tokens: false)
        let proxy = try await TinyProxy(connectPorts: [sim.port])
        let log = OutcomeLog()
        let transport = try Self.transport(sim, proxy: try Self.settings("http://127.0.0.1:\(proxy.port)"), log: log)
        try await Self.sendAll((0..<500).map { job($0, token: $0) }, through: transport)
        Self.expectAllDelivered(500, log: log, sim: sim)
        // Both connections were tunnels the proxy opened (the simulator saw the proxy, not us).
        let connects = proxy.connectRequests
        #expect(connects.count == 2, "\(connects)")
        #expect(connects.allSatisfy { $0.contains("CONNECT 127.0.0.1:\(sim.port) HTTP/1.1") }, "\(connects)")
        #expect(sim.totals.connections == 2)
        try await sim.stop()
    }

    @Test func basicAuthRightPasswordDeliversWrongOneIsAClearErrorWithoutThePassword() async throws {
        let sim = try await HTTP2Simulator.startedForTests(tokens: false)
        let proxy = try await TinyProxy(connectPorts: [sim.port], basicAuth: ("apns", "Right-Pr0xy-Pass"))

        let log = OutcomeLog()
        let right = try Self.transport(sim, proxy: try Self.settings("http://apns:Right-Pr0xy-Pass@127.0.0.1:\(proxy.port)"), log: log)
        try await Self.sendAll((0..<200).map { job($0, token: $0) }, through: right)
        Self.expectAllDelivered(200, log: log, sim: sim)

        for (url, status, fix) in [
            ("http://apns:Wr0ng-Pr0xy-Pass@127.0.0.1:\(proxy.port)", "401", "the user or password in http2.proxy is wrong"),
            ("http://127.0.0.1:\(proxy.port)", "407", "it wants credentials"),
        ] {
            let captured = CapturedLog()
            let logger = Logger(label: "apns.sender.http2.test") { _ in CapturingLogHandler(captured) }
            let wrongLog = OutcomeLog()
            let records = sim.records.count
            // Reconnects at most every 5 s: the transport stays behind with its queued jobs after the test.
            let connects = proxy.connectRequests.count
            let wrong = try Self.transport(sim, proxy: try Self.settings(url), log: wrongLog, logger: logger, reconnectMax: .seconds(5))
            try await wrong.send((1000..<1020).map { job($0, token: $0) })
            try await waitUntil("both connections failed at the proxy", seconds: 300) {
                await Self.lastErrors(wrong).count == 2
            }
            for error in await Self.lastErrors(wrong) {
                #expect(error.contains("HTTPS proxy 127.0.0.1:\(proxy.port) refused CONNECT 127.0.0.1:\(sim.port): \(status)"), "\(error)")
                #expect(error.contains(fix), "\(error)")
            }
            // Nothing settled and nothing lost: the jobs wait in the queue for a proxy that lets them through,
            // and the connections do not knock again before `authFailureDelay` (60 s): one CONNECT each.
            #expect(wrongLog.count == 0)
            #expect(sim.records.count == records)
            try await waitUntil("the jobs back in a queue", seconds: 300) {
                await wrong.statistics().reduce(0) { $0 + $1.queueDepth } == 20
            }
            #expect(await wrong.statistics().allSatisfy { $0.state == "stopped" })
            // The one log line for both connections (at most one a minute for the same refusal).
            let lines = captured.lines
            let refused = lines.filter { $0.hasPrefix("connect refused: the HTTPS proxy 127.0.0.1:\(proxy.port) refused CONNECT") }
            #expect(refused.count == 1 && refused[0].contains("proxy=127.0.0.1:\(proxy.port)"), "\(lines)")
            #expect(!lines.contains { $0.hasPrefix("connect failed") }, "\(lines)")
            let basic = Data("apns:Wr0ng-Pr0xy-Pass".utf8).base64EncodedString()
            #expect(!lines.contains { $0.contains("Pr0xy-Pass") || $0.contains(basic) }, "a password in a log line: \(lines)")
            #expect(proxy.connectRequests.count - connects <= 2, "\(proxy.connectRequests.count - connects) CONNECTs")
            _ = await wrong.drainAndClose(before: .now + .milliseconds(200))
        }
        try await sim.stop()
    }

    @Test func aProxyRefusingThePortIsAClearError() async throws {
        let sim = try await HTTP2Simulator.startedForTests(tokens: false)
        let otherPort = sim.port == 65535 ? sim.port - 1 : sim.port + 1
        let proxy = try await TinyProxy(connectPorts: [otherPort])
        let log = OutcomeLog()
        let transport = try Self.transport(
            sim, proxy: try Self.settings("http://127.0.0.1:\(proxy.port)"), log: log, reconnectMax: .seconds(5))
        try await transport.send((0..<10).map { job($0, token: $0) })
        try await waitUntil("both connections refused", seconds: 300) { await Self.lastErrors(transport).count == 2 }
        for error in await Self.lastErrors(transport) {
            #expect(error.contains("refused CONNECT 127.0.0.1:\(sim.port): 403"), "\(error)")
            #expect(error.contains("ConnectPort"), "says what to change: \(error)")
        }
        #expect(log.count == 0 && sim.records.isEmpty)
        _ = await transport.drainAndClose(before: .now + .milliseconds(200))
        try await sim.stop()
    }

    /// A proxy that is down is a failed connect: back-off, and once it is up everything goes; one that
    /// dies under open streams is a lost connection: the streams are resent through the next tunnel.
    /// No job is lost or settled twice either way.
    @Test func aProxyDownThenUpAndOneDyingLoseNothing() async throws {
        // Answers 50 ms late: the proxy dies with streams open.
        var faults = HTTP2FaultScript()
        faults.responseDelayMillis = 50
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let proxy = try await TinyProxy(connectPorts: [sim.port], start: false)
        let log = OutcomeLog()
        let transport = try Self.transport(sim, proxy: try Self.settings("http://127.0.0.1:\(proxy.port)"), log: log)
        // Every wait is bounded (minutes, against hangs, not timing): a CI run once hung here for 24 min.
        try await withDeadline("the first 300 jobs queued") { try await transport.send((0..<300).map { job($0, token: $0) }) }
        try await waitUntil("the connects failed at the missing proxy", seconds: 300) {
            await Self.lastErrors(transport).count == 2
        }
        for error in await Self.lastErrors(transport) {
            #expect(error.contains("cannot reach the HTTPS proxy 127.0.0.1:\(proxy.port) (http2.proxy)"), "\(error)")
        }
        #expect(log.count == 0 && sim.records.isEmpty)
        try await proxy.start()
        try await waitUntil("the first 300 delivered through the proxy, once up", seconds: 300) { log.count == 300 }

        // The proxy dies while a second batch is in flight, and comes back.
        let sending = Task { try await transport.send((300..<3000).map { job($0, token: $0) }) }
        try await waitUntil("some of the second batch answered", seconds: 300) { log.count > 400 }
        await proxy.kill()
        try await Task.sleep(for: .milliseconds(300))
        try await proxy.start()
        try await withDeadline("the second batch (jobs 300..<3000) queued, through the restarted proxy") { try await sending.value }
        let drained = await transport.drainAndClose(before: .now + .seconds(60))
        #expect(drained.allSatisfy { if case .allAnswered = $0 { true } else { false } }, "\(drained)")
        Self.expectAllDelivered(3000, log: log, sim: sim)
        #expect(log.events.ambiguous > 0, "the proxy died with streams open (resent through the next tunnel)")
        #expect(proxy.connectRequests.count >= 4, "new tunnels after the proxy came back")
        try await sim.stop()
    }

    @Test func noProxyHostsAreReachedDirectly() async throws {
        let sim = try await HTTP2Simulator.startedForTests(tokens: false)
        // Nothing listens at the proxy's address: a send through it could not succeed.
        let deadPort = try freeLoopbackPort()
        let log = OutcomeLog()
        let transport = try Self.transport(
            sim,
            proxy: HTTPSProxySettings(
                proxy: try HTTPSProxy(url: "http://127.0.0.1:\(deadPort)"), noProxy: HTTPSProxySettings.noProxyList("localhost,127.0.0.1")),
            log: log)
        try await Self.sendAll((0..<200).map { job($0, token: $0) }, through: transport)
        Self.expectAllDelivered(200, log: log, sim: sim)
        #expect(await Self.lastErrors(transport).isEmpty)
        try await sim.stop()
    }
}
