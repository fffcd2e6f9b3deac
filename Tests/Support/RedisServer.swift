import Foundation
import Logging
import NIOPosix
import ProcessSupport
import Redis
import Testing

/// A throw-away `redis-server` on a free loopback port, killed when the test ends.
public final class RedisServer: @unchecked Sendable {
    /// `redis-server` on PATH, if installed.
    public static let executable: String? = executablePath("redis-server")

    /// Tests run when `redis-server` is installed, and also in CI (`CI` set) where its absence must fail
    /// instead of silently skipping.
    public static let available = executable != nil || ProcessInfo.processInfo.environment["CI"] != nil
    public static let skipReason: Comment =
        "redis-server is not installed (Debian package redis-server): Redis tests skipped; set CI=1 to make this a failure"

    /// Set once the server runs (changed only while `init` retries on a port taken meanwhile).
    public private(set) var port: Int
    let directory: String
    let extraArguments: [String]
    private let persistent: Bool
    /// Whether the server speaks only TLS (`--tls-port`, no plain port).
    public let tls: Bool
    /// Whether the server refuses a TLS client without a certificate of the test CA
    /// (`--tls-auth-clients yes`); the clients made here then present `com.example.shop`'s.
    public let requiresClientCertificate: Bool
    private var process: ChildProcess?

    public var url: String { "\(tls ? "rediss" : "redis")://127.0.0.1:\(port)" }

    /// What a client needs to trust the server: the test CA (`ops/certs`), whose `server.pem` names
    /// `localhost` and `127.0.0.1`. nil for a plain server.
    public var tlsConfiguration: RedisTLSConfiguration? {
        guard tls else { return nil }
        guard requiresClientCertificate else { return RedisTLSConfiguration(ca: TestCertificates.pem("ca")) }
        return RedisTLSConfiguration(
            ca: TestCertificates.pem("ca"), certificate: TestCertificates.pem("com.example.shop"),
            key: TestCertificates.key("com.example.shop"))
    }

    /// `persistent`: append-only file fsync'ed on every write, so a killed and restarted server keeps
    /// its data (for the restart test). Otherwise nothing is written to disk.
    /// `tls`: only TLS, with the test certificates (client certificates accepted, not required unless
    /// `requireClientCertificate`).
    public init(
        persistent: Bool = false, tls: Bool = false, requireClientCertificate: Bool = false, extraArguments: [String] = []
    ) async throws {
        guard Self.executable != nil else {
            throw TestFailure("redis-server is not installed but CI is set: install Debian's redis-server")
        }
        port = try freeLoopbackPort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("redis-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.persistent = persistent
        self.tls = tls
        self.requiresClientCertificate = requireClientCertificate
        self.extraArguments = extraArguments
        // A free port is free when it is picked, not when redis-server binds it: a test running in
        // parallel may take it in between, and the server exits at once. Another port, then.
        var attempt = 1
        while true {
            do {
                try await start()
                return
            } catch  where attempt < 3 {
                await kill()
                attempt += 1
                port = try freeLoopbackPort()
            }
        }
    }

    public func start() async throws {
        var arguments = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory]
        if tls {
            // Debian's redis-server 7 has TLS built in; `--port 0` leaves TLS the only way in.
            arguments = [
                "--port", "0", "--tls-port", String(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory,
                "--tls-cert-file", TestCertificates.pem("server"), "--tls-key-file", TestCertificates.key("server"),
                "--tls-ca-cert-file", TestCertificates.pem("ca"), "--tls-auth-clients", requiresClientCertificate ? "yes" : "optional",
            ]
        }
        arguments += persistent ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"]
        process = try ChildProcess(executable: Self.executable!, arguments: arguments + extraArguments)
        try await waitForPing()
    }

    /// SIGKILL: a crash, not a shutdown. Returns once the server has exited (its port is free for
    /// ``start()`` again), without holding a thread of the cooperative pool meanwhile.
    public func kill() async {
        await process?.kill()
        process = nil
    }

    /// Sends `signal` to the server (SIGSTOP: a node that stops answering without closing its sockets,
    /// SIGCONT: back).
    public func signal(_ signal: Int32) {
        if let pid = process?.pid { _ = Foundation.kill(pid, signal) }
    }

    /// SIGKILL without waiting for the exit, and the data directory removed: the end of a test.
    public func stop() {
        process?.killWithoutWaiting()
        process = nil
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }

    /// The event loops of the tests' Redis clients: more than `MultiThreadedEventLoopGroup.singleton`'s
    /// one per core, which the whole suite's clients, simulators and pollers would otherwise share (a
    /// test's large replies parsed on a loop held up another test's feedback poll for seconds).
    public static let clientLoops = MultiThreadedEventLoopGroup(numberOfThreads: 8)

    /// A client that fails fast enough for tests when something is wrong.
    public func client(path: String = "", maximumWait: Duration = .seconds(20), logLevel: Logger.Level = .info) throws -> RedisClient {
        var configuration = try RedisConfiguration(url: url + path)
        configuration.reconnect = RedisReconnectPolicy(
            initialDelay: .milliseconds(20), maximumDelay: .milliseconds(200), maximumWait: maximumWait)
        configuration.tls = tlsConfiguration
        var logger = Logger(label: "apns.redis.test")
        logger.logLevel = logLevel
        return RedisClient(configuration: configuration, logger: logger, eventLoopGroup: RedisServer.clientLoops)
    }

    /// Until the server answers (PONG, or NOAUTH when it requires a password: up all the same), and it
    /// is this one: when a parallel test's server took the port first, ours exits and the other answers
    /// (a cluster test then sent its slots to another test's node: `ERR Slot … is already busy`).
    private func waitForPing() async throws {
        let probe = try client(maximumWait: .seconds(30), logLevel: .critical)
        do {
            let reply = try await probe.send(RedisCommand("PING"))
            guard reply == .status("PONG") else { throw TestFailure("PING answered \(reply)") }
            let info = try await probe.send(RedisCommand("INFO", "server")).string ?? ""
            let answering = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("process_id:") }.map { $0.dropFirst(11) }
            guard let answering, let pid = process?.pid, Int32(answering) == pid else {
                throw TestFailure("port \(port) is another redis-server's (process \(answering ?? "?"), ours \(process?.pid ?? 0))")
            }
        } catch RedisError.server(let message) where message.hasPrefix("NOAUTH") {
        } catch {
            await probe.close()
            throw error
        }
        await probe.close()
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension RedisConnection {
    /// HGETALL as a dictionary of integers (counters).
    public func hashCounters(_ key: String) async throws -> [String: Int64] {
        let reply = try await send(RedisCommand("HGETALL", key))
        var result: [String: Int64] = [:]
        let elements = reply.array ?? []
        for index in stride(from: 0, to: elements.count, by: 2) {
            result[elements[index].string!] = elements[index + 1].integer!
        }
        return result
    }
}
