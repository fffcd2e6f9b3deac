import Foundation
import Logging
import Redis
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A throw-away `redis-server` on a free loopback port, killed when the test ends.
public final class RedisServer: @unchecked Sendable {
    /// `redis-server` on PATH, if installed.
    public static let executable: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/redis-server"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }()

    /// Tests run when `redis-server` is installed, and also in CI (`CI` set) where its absence must fail
    /// instead of silently skipping.
    public static let available = executable != nil || ProcessInfo.processInfo.environment["CI"] != nil
    public static let skipReason: Comment = "redis-server is not installed (Debian package redis-server): Redis tests skipped; set CI=1 to make this a failure"

    public let port: Int
    let directory: String
    let extraArguments: [String]
    private let persistent: Bool
    private var process: Process?

    public var url: String { "redis://127.0.0.1:\(port)" }

    /// `persistent`: append-only file fsync'ed on every write, so a killed and restarted server keeps
    /// its data (for the restart test). Otherwise nothing is written to disk.
    public init(persistent: Bool = false, extraArguments: [String] = []) async throws {
        guard Self.executable != nil else {
            throw TestFailure("redis-server is not installed but CI is set: install Debian's redis-server")
        }
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("redis-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.persistent = persistent
        self.extraArguments = extraArguments
        try await start()
    }

    public func start() async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable!)
        var arguments = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory]
        arguments += persistent ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"]
        process.arguments = arguments + extraArguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        try await waitForPing()
    }

    /// SIGKILL: a crash, not a shutdown.
    public func kill() {
        guard let process else { return }
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        self.process = nil
    }

    public func stop() {
        kill()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }

    /// A client that fails fast enough for tests when something is wrong.
    public func client(path: String = "", maximumWait: Duration = .seconds(20), logLevel: Logger.Level = .info) throws -> RedisClient {
        var configuration = try RedisConfiguration(url: url + path)
        configuration.reconnect = RedisReconnectPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(200), maximumWait: maximumWait)
        var logger = Logger(label: "apns.redis.test")
        logger.logLevel = logLevel
        return RedisClient(configuration: configuration, logger: logger)
    }

    /// Until the server answers (PONG, or NOAUTH when it requires a password: up all the same).
    private func waitForPing() async throws {
        let probe = try client(maximumWait: .seconds(10), logLevel: .critical)
        do {
            let reply = try await probe.send(RedisCommand("PING"))
            guard reply == .status("PONG") else { throw TestFailure("PING answered \(reply)") }
        } catch RedisError.server(let message) where message.hasPrefix("NOAUTH") {}
        await probe.close()
    }

    /// Binds port 0 to let the kernel pick a free port, then releases it for redis-server.
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(fd, socketAddress, length) == 0 && getsockname(fd, socketAddress, &length) == 0
            }
        }
        guard bound else { throw TestFailure("bind() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension RedisClient {
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

    public func info(_ section: String) async throws -> [String: String] {
        let text = try await send(RedisCommand("INFO", section)).string ?? ""
        var result: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { result[String(parts[0])] = String(parts[1]) }
        }
        return result
    }
}
