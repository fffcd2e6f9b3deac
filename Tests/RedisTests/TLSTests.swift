import Foundation
import Logging
import Redis
import TestSupport
import Testing

/// Redis over TLS: a redis-server started with `--tls-port` only (Debian's redis-server 7 has TLS built
/// in) and the test certificates of `ops/certs` (`server.pem` names localhost and 127.0.0.1).
/// The parameterised Redis suites also run every test against such a server (`RedisTestTarget.tls`).
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct TLSTests {
    private func client(
        _ server: RedisServer, tls: RedisTLSConfiguration?, host: String = "127.0.0.1", maximumWait: Duration = .seconds(20)
    ) throws -> RedisClient {
        var configuration = try RedisConfiguration(url: "rediss://\(host):\(server.port)")
        configuration.tls = tls
        configuration.reconnect = RedisReconnectPolicy(
            initialDelay: .milliseconds(20), maximumDelay: .milliseconds(200), maximumWait: maximumWait)
        var logger = Logger(label: "apns.redis.test")
        logger.logLevel = .critical
        return RedisClient(configuration: configuration, logger: logger)
    }

    @Test func commandsScriptsAndPipelinesOverTLS() async throws {
        let server = try await RedisServer(tls: true)
        defer { server.stop() }
        let client = try server.client()
        try await client.connect()
        let replies = try await client.pipeline([
            RedisCommand("SET", "k", "v"), RedisCommand("GET", "k"), RedisCommand("INCRBY", "n", "3"), RedisCommand("NOPE"),
        ])
        #expect(replies[0] == .status("OK"))
        #expect(replies[1] == .bulk(Array("v".utf8)))
        #expect(replies[2] == .integer(3))
        guard case .error = replies[3] else {
            Issue.record("expected an error reply, got \(replies[3])")
            return
        }
        // A script with thousands of arguments (a gate batch's shape) and a reply as large, over TLS
        // records: the reply arrives in many reads and is put together by hiredis's reader.
        let script = RedisScript("local n = 0 for i = 1, #ARGV do n = n + tonumber(ARGV[i]) end return {n, ARGV}")
        var arguments = RedisArguments()
        for i in 0..<5000 { arguments.append(i) }
        let reply = try await client.eval(script, arguments: arguments)
        let elements = reply.array ?? []
        #expect(elements.first == .integer(Int64(4999 * 5000 / 2)))
        #expect(elements.last?.array?.count == 5000)
        #expect(elements.last?.array?.last == .bulk(Array("4999".utf8)))
        try await client.send(RedisCommand("SCRIPT", "FLUSH"))
        #expect(try await client.eval(script, arguments: RedisArguments(["2"])).array?.first == .integer(2))
        // The server saw a TLS connection (its INFO counts handshakes only for TLS clients).
        let info = try await client.info("stats")
        #expect(info["total_connections_received"] != nil)
        #expect(await client.statistics.connects == 1)
    }

    /// Calls made while others wait are pipelined on the one channel; every caller gets its own replies.
    @Test func concurrentCallsShareTheConnection() async throws {
        let server = try await RedisServer(tls: true)
        defer { server.stop() }
        let client = try server.client()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for i in 0..<200 {
                        let value = "\(task)-\(i)"
                        let replies = try await client.pipeline([RedisCommand("SET", "k\(task)", value), RedisCommand("GET", "k\(task)")])
                        #expect(replies == [.status("OK"), .bulk(Array(value.utf8))])
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(await client.statistics.connects == 1)
    }

    /// A server certificate from another CA: `connect()` fails at once (no retrying), saying which server
    /// and what to check.
    @Test func wrongCAFailsAtConnectWithAClearError() async throws {
        let server = try await RedisServer(tls: true)
        defer { server.stop() }
        // A retry budget far longer than the test's own bound below: a call that waited it out would fail
        // the test however slow the machine, and one that does not wait ends in well under a minute.
        let client = try self.client(server, tls: RedisTLSConfiguration(ca: TestCertificates.pem("rogue-ca")), maximumWait: .seconds(3600))
        await #expect {
            try await client.connect()
        } throws: { error in
            guard case RedisError.tls(let message) = error else { return false }
            return message.contains("127.0.0.1:\(server.port)") && message.contains("redis.tls.ca")
        }
        // A call does not wait out maximumWait on a configuration error either.
        let clock = ContinuousClock()
        let start = clock.now
        await #expect(throws: RedisError.self) { try await client.send(RedisCommand("PING")) }
        #expect(clock.now - start < .seconds(120))
        // The system's roots do not know the test CA either (rediss:// without redis.tls.ca).
        let systemRoots = try self.client(server, tls: RedisTLSConfiguration())
        await #expect {
            try await systemRoots.connect()
        } throws: { error in
            guard case RedisError.tls = error else { return false }
            return true
        }
    }

    /// A server that requires client certificates (`--tls-auth-clients yes`): `redis.tls.cert` and `key`
    /// (a certificate of the CA the server trusts) get in; without them, or with a certificate of another
    /// CA, the server ends the handshake and `connect()` fails at once, naming the server.
    @Test func clientCertificateIsPresentedWhenTheServerRequiresOne() async throws {
        let server = try await RedisServer(tls: true, requireClientCertificate: true)
        defer { server.stop() }
        let ca = TestCertificates.pem("ca")
        let withCertificate = try client(
            server,
            tls: RedisTLSConfiguration(
                ca: ca, certificate: TestCertificates.pem("com.example.shop"), key: TestCertificates.key("com.example.shop")))
        #expect(try await withCertificate.send(RedisCommand("PING")) == .status("PONG"))
        for refused in [
            RedisTLSConfiguration(ca: ca),
            RedisTLSConfiguration(ca: ca, certificate: TestCertificates.pem("rogue"), key: TestCertificates.key("rogue")),
        ] {
            let client = try self.client(server, tls: refused, maximumWait: .seconds(2))
            await #expect {
                try await client.connect()
                // TLS 1.3: the server's refusal of the certificate may arrive after the client's handshake
                // is done, with the first reply.
                _ = try await client.send(RedisCommand("PING"))
            } throws: { error in
                "\(error)".contains("127.0.0.1:\(server.port)") || error is RedisError
            }
        }
    }

    /// The certificate must verify for the host: `localhost` (its DNS name) and `127.0.0.1` (its IP
    /// address) both do. (swift-nio-ssl also accepts a certificate whose IP address is the peer's when
    /// `server_name` names something else, so a wrong name is not tested against this certificate.)
    /// The server's certificate must name the host as reached (or `server_name`): the names it holds get
    /// in; one it does not hold fails at once with the reason, though the CA is right. The certificate
    /// holds `localhost` and the address 127.0.0.1, and swift-nio-ssl accepts an address it holds whatever
    /// the name asked for, so the refusals are tried on 127.0.0.2, which it does not hold.
    @Test func hostnameIsVerified() async throws {
        let server = try await RedisServer(tls: true, extraArguments: ["--bind", "127.0.0.1", "127.0.0.2"])
        defer { server.stop() }
        let ca = TestCertificates.pem("ca")
        try await client(server, tls: RedisTLSConfiguration(ca: ca), host: "localhost").connect()
        try await client(server, tls: RedisTLSConfiguration(ca: ca, serverName: "localhost")).connect()
        try await client(server, tls: RedisTLSConfiguration(ca: ca)).connect()
        try await client(server, tls: RedisTLSConfiguration(ca: ca, serverName: "localhost"), host: "127.0.0.2").connect()
        // A retry budget far past any wait here: the refusals must not be retried until it runs out.
        for serverName in [nil, "redis.example.org"] {
            let wrong = try client(
                server, tls: RedisTLSConfiguration(ca: ca, serverName: serverName), host: "127.0.0.2", maximumWait: .seconds(3600))
            await #expect {
                try await wrong.connect()
            } throws: { error in
                guard case RedisError.tls(let message) = error else { return false }
                return message.contains("does not name the host") && message.contains("redis.tls.server_name")
            }
        }
    }

    @Test func missingOrMismatchedFilesNameTheKey() throws {
        func problem(_ tls: RedisTLSConfiguration) -> RedisTLSConfiguration.Problem? {
            do {
                _ = try tls.checkedContext()
                return nil
            } catch {
                return error as? RedisTLSConfiguration.Problem
            }
        }
        #expect(problem(RedisTLSConfiguration(ca: "/nonexistent/ca.pem"))?.key == "ca")
        #expect(problem(RedisTLSConfiguration(ca: TestCertificates.key("server")))?.key == "ca")
        #expect(problem(RedisTLSConfiguration(certificate: TestCertificates.pem("com.example.shop")))?.key == "key")
        #expect(problem(RedisTLSConfiguration(key: TestCertificates.key("com.example.shop")))?.key == "cert")
        #expect(
            problem(RedisTLSConfiguration(certificate: TestCertificates.pem("com.example.shop"), key: TestCertificates.key("rogue")))?.key
                == "key")
        #expect(problem(RedisTLSConfiguration(serverName: "127.0.0.1"))?.key == "server_name")
        #expect(problem(RedisTLSConfiguration(ca: TestCertificates.pem("ca"))) == nil)
    }

    @Test func redissURLs() throws {
        let tls = try RedisConfiguration(url: "rediss://:secret@cache.example.com:6380/2")
        #expect(tls.tls == RedisTLSConfiguration())
        #expect(tls.port == 6380 && tls.database == 2 && tls.password == "secret")
        #expect(tls.redactedURL == "rediss://:***@cache.example.com:6380/2")
        #expect(try RedisConfiguration(url: "redis://host").tls == nil)
        let cluster = try RedisClusterConfiguration(nodes: ["rediss://10.0.0.1:7000", "10.0.0.2:7000"])
        #expect(cluster.node.tls != nil)
        #expect(cluster.configuration(of: cluster.seeds[1]).tls != nil)
        #expect(try RedisClusterConfiguration(nodes: ["10.0.0.1:7000"]).node.tls == nil)
        #expect(throws: RedisError.self) { try RedisClusterConfiguration(nodes: ["rediss://10.0.0.1:7000", "redis://10.0.0.2:7000"]) }
    }

    /// redis-server (TLS only, fsync on every write) is killed in the middle of a loop of INCRs and comes
    /// back on the same port: the loop waits it out, and every INCR landed. Each step also adds its
    /// number to a set: the set proves none is missing; the counter may exceed the steps only by a reply
    /// lost with the connection (INCR is not safe to repeat; the pipeline's operations are).
    @Test func restartMidTrafficOverTLSLosesNothing() async throws {
        let server = try await RedisServer(persistent: true, tls: true)
        defer { server.stop() }
        let client = try server.client(maximumWait: .seconds(20))
        let steps = 2000
        let done = Counter()
        let run = Task {
            for step in 0..<steps {
                let replies = try await client.pipeline([RedisCommand("INCR", "counter"), RedisCommand("SADD", "steps", String(step))])
                guard case .integer = replies[0] else { throw TestFailure("INCR answered \(replies[0])") }
                done.increment()
            }
        }
        while done.value < 100 { try await Task.sleep(for: .milliseconds(2)) }
        await server.kill()
        while await client.statistics.retries == 0, done.value < steps { try await Task.sleep(for: .milliseconds(5)) }
        #expect(done.value < steps)
        try await server.start()
        try await run.value

        #expect(try await client.send(RedisCommand("SCARD", "steps")) == .integer(Int64(steps)))
        let counter = try await client.send(RedisCommand("GET", "counter")).integer ?? 0
        let retries = await client.statistics.retries
        #expect(counter >= Int64(steps) && counter <= Int64(steps + retries), "counter \(counter), retries \(retries)")
        #expect(await client.statistics.connects == 2)
    }
}
