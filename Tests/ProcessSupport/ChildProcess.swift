import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// What the tests (through TestSupport) and the benchmark package share to run throw-away servers on
// loopback: a free port, an executable from PATH, a child process that is killed for sure. Foundation
// only, no test framework, so the benchmark executable can link it.

public struct ProcessSupportError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A loopback TCP port that was free a moment ago: bound to port 0 so the kernel picks one, then
/// released for the server about to start (which binds it before anyone else in practice).
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw ProcessSupportError("socket() failed") }
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
    guard bound else { throw ProcessSupportError("bind() failed") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// The path of executable `name` on PATH (then in `extraDirectories`), or nil.
public func executablePath(_ name: String, extraDirectories: [String] = []) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    for directory in path.split(separator: ":").map(String.init) + extraDirectories {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// A child process with its output discarded, ended with SIGKILL.
///
/// SIGKILL, not SIGTERM: a child started from a Swift concurrency thread inherits that thread's blocked
/// signals, SIGTERM included, and might never exit; and for a test a kill is the crash it wants to see.
public final class ChildProcess: @unchecked Sendable {
    // @unchecked: `process` is set in init; Foundation's Process is safe to query and wait on from any thread.
    private let process: Process

    /// Starts `executable` with `arguments`; `environment` nil inherits ours.
    public init(executable: String, arguments: [String], environment: [String: String]? = nil) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try startChild(process)
    }

    public var isRunning: Bool { process.isRunning }
    public var pid: Int32 { process.processIdentifier }

    /// SIGKILL, and wait until it has exited (what it held, its port, is free again), off the cooperative
    /// pool; does nothing when the process has already ended.
    public func kill() async {
        guard process.isRunning else { return }
        killWithoutWaiting()
        await waitForExit(of: process)
    }

    /// SIGKILL and wait for it, blocking the calling thread: for code that is not async (the benchmark).
    /// Not from async code, where the wait would hold a thread of the cooperative pool (see
    /// ChildProcessWaits.swift): there `await kill()`, or `killWithoutWaiting()`.
    @available(*, noasync, message: "blocks a thread of the cooperative pool: use `await kill()` or `killWithoutWaiting()`")
    public func kill() {
        guard process.isRunning else { return }
        killWithoutWaiting()
        process.waitUntilExit()
    }

    /// SIGKILL and return at once: for a `deinit` or a clean-up that does not reuse what the process held.
    public func killWithoutWaiting() {
        guard process.isRunning else { return }
        #if canImport(Glibc)
        _ = Glibc.kill(process.processIdentifier, SIGKILL)
        #else
        _ = Darwin.kill(process.processIdentifier, SIGKILL)
        #endif
    }
}
