import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Starting children and waiting for them, for tests whose code runs on Swift's cooperative pool.
//
// Two rules, each after a CI run that failed on test infrastructure rather than on the product:
//
// 1. Nothing blocks a pool thread while it waits for a child (`waitUntilExit`, `readDataToEndOfFile`):
//    the pool has one thread per core, two on CI, and two tests blocked at once starved every other task
//    (NIO futures' continuations included) until the run was killed 24 minutes later. The waits below
//    run on a thread of their own and resume the caller when done.
// 2. Every child of a test process is started through `startChild(_:)`, and a mock Kafka broker is taken
//    down only inside `withNoChildStarting(_:)`: starting a child copies our descriptor table into it for a
//    moment (until its exec closes the copies), and librdkafka's `rd_kafka_mock_broker_set_down` closes
//    the broker's listening socket and at once binds a new one to the same port, which fails while a
//    child's copy keeps the old listener alive ("Failed to bind mock broker socket … Address already in
//    use") — and librdkafka then aborts the whole test process on an assert. `Process.run()` returns only
//    once the child has exec'd (glibc's posix_spawn waits for it), so a child started under the lock
//    holds no copy after it.

/// Held while a child is started and while a mock broker re-binds its port; see rule 2 above.
private let childStartLock = NSLock()

/// Starts `process` (`Process.run()`), never while a mock broker re-binds its port (see above).
public func startChild(_ process: Process) throws {
    childStartLock.lock()
    defer { childStartLock.unlock() }
    try process.run()
}

/// Runs `body` while no child of this process is being started: for `MockCluster.setBroker(_:up:)`
/// (a broker going down re-binds its port; see above). `body` must not wait for anything slow.
public func withNoChildStarting<T>(_ body: () throws -> T) rethrows -> T {
    childStartLock.lock()
    defer { childStartLock.unlock() }
    return try body()
}

/// Runs `body` on a thread of its own and returns its result, without holding a thread of the
/// cooperative pool meanwhile: for blocking waits (a child's exit, a pipe read to its end). The
/// continuation is resumed exactly once, when `body` returns.
public func onThreadOfItsOwn<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

/// A started `Process` and its output pipe, handed to the thread that waits for it (and only to it).
private struct RunningChild: @unchecked Sendable {
    // @unchecked: Foundation's Process and FileHandle may be waited on and read from any thread; only
    // the waiting thread uses them until it resumes the caller.
    let process: Process
    let output: FileHandle?
}

/// Waits until `process` (started) has exited, off the cooperative pool; returns its termination status.
@discardableResult
public func waitForExit(of process: Process) async -> Int32 {
    let child = RunningChild(process: process, output: nil)
    return await onThreadOfItsOwn {
        child.process.waitUntilExit()
        return child.process.terminationStatus
    }
}

/// Reads `output` (the reading end of the pipe `process` writes to) to its end, then waits until the
/// process has exited, off the cooperative pool. Reading first: a child that fills the pipe blocks until
/// it is read, and would never exit.
public func outputAndExit(of process: Process, reading output: FileHandle) async -> (status: Int32, output: Data) {
    let child = RunningChild(process: process, output: output)
    return await onThreadOfItsOwn {
        let data = child.output?.readDataToEndOfFile() ?? Data()
        child.process.waitUntilExit()
        return (child.process.terminationStatus, data)
    }
}
