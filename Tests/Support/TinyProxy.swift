import Foundation
import ProcessSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A throw-away tinyproxy (Debian's `tinyproxy`: a real HTTPS proxy speaking CONNECT) on a free
/// loopback port, with a generated configuration and its own log file, killed when the test ends.
/// For the HTTP/2 transport's proxy tests.
public final class TinyProxy: @unchecked Sendable {
    public static let executable: String? = executablePath("tinyproxy", extraDirectories: ["/usr/sbin", "/usr/local/sbin"])
    /// As `RedisServer.available`: in CI (`CI` set) a missing tinyproxy fails instead of skipping.
    public static let available = executable != nil || ProcessInfo.processInfo.environment["CI"] != nil
    public static let skipReason: Comment =
        "tinyproxy is not installed (Debian package tinyproxy; ops/setup installs it): proxy tests skipped; set CI=1 to make this a failure"

    public private(set) var port: Int
    public let directory: String
    /// Ports CONNECT may reach (tinyproxy's `ConnectPort`); empty: every port.
    public let connectPorts: [Int]
    public let basicAuth: (user: String, password: String)?
    private var process: ChildProcess?

    public var logPath: String { directory + "/tinyproxy.log" }

    public init(connectPorts: [Int], basicAuth: (user: String, password: String)? = nil, start: Bool = true) async throws {
        guard Self.executable != nil else {
            throw TestFailure("tinyproxy is not installed but CI is set: install Debian's tinyproxy (ops/setup)")
        }
        self.connectPorts = connectPorts
        self.basicAuth = basicAuth
        port = try freeLoopbackPort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyproxy-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard start else { return }
        // A port free when picked may be taken before tinyproxy binds it (tests run in parallel).
        var attempt = 1
        while true {
            do {
                try await self.start()
                return
            } catch  where attempt < 3 {
                await kill()
                attempt += 1
                port = try freeLoopbackPort()
            }
        }
    }

    /// Starts (or restarts, after ``kill()``) on the same port, and waits until it accepts connections.
    public func start() async throws {
        var lines = [
            "Port \(port)", "Listen 127.0.0.1", "Timeout 60", "LogFile \"\(logPath)\"", "LogLevel Connect",
            "MaxClients 200", "Allow 127.0.0.1", "DisableViaHeader Yes",
        ]
        lines += connectPorts.map { "ConnectPort \($0)" }
        if let basicAuth { lines.append("BasicAuth \(basicAuth.user) \(basicAuth.password)") }
        let configPath = directory + "/tinyproxy.conf"
        try (lines.joined(separator: "\n") + "\n").write(toFile: configPath, atomically: true, encoding: .utf8)
        process = try ChildProcess(executable: Self.executable!, arguments: ["-d", "-c", configPath])
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            if !(process?.isRunning ?? false) { throw TestFailure("tinyproxy exited at start (port \(port) taken?)") }
            if Self.accepts(port: port) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("tinyproxy did not listen on 127.0.0.1:\(port) within 120 s")
    }

    /// SIGKILL: the proxy dies, every tunnel through it with it. Returns once it has exited (its port is
    /// free for ``start()`` again), without holding a thread of the cooperative pool meanwhile.
    public func kill() async {
        await process?.kill()
        process = nil
    }

    deinit {
        process?.killWithoutWaiting()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The log's lines so far (`LogLevel Connect`: one `Request …: CONNECT host:port HTTP/1.1` per tunnel asked for).
    public var log: [String] {
        ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The CONNECT requests the proxy has read (whatever it answered).
    public var connectRequests: [String] {
        log.filter { $0.contains("Request (file descriptor") && $0.contains(": CONNECT ") }
    }

    private static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
