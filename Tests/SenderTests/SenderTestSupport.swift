import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import NIOCore
import NIOPosix
import Synchronization
import TestSupport
import Testing

@testable import Sender

let shop = "com.example.shop"

extension NIODeadline {
    /// `seconds` after the clock's origin: the times the state-machine tests choose (`now: .at(1.5)`).
    static func at(_ seconds: Double) -> NIODeadline { .uptimeNanoseconds(UInt64((seconds * 1e9).rounded())) }
}

extension BinaryConnectionStateMachine {
    /// Takes every frame the window allows and flushes them as write `flush`, completed at `at`, as
    /// `Shard.pump` does with a socket that accepts everything. Returns the number of frames written.
    @discardableResult
    mutating func writeEverythingAllowed(flush: UInt64, completedAt at: NIODeadline) -> Int {
        var buffer = ByteBufferAllocator().buffer(capacity: 4096)
        var frames = 0
        while mayTakeFrame {
            if takeFrame(into: &buffer) { frames += 1 }
        }
        flushed(flush, frames: frames, bytes: buffer.readableBytes)
        writeCompleted(flush, now: at)
        return frames
    }
}

/// Collects outcome batches from the shards' event loops.
final class OutcomeLog: Sendable {
    private let state = Mutex<(outcomes: [Outcome], events: SenderEvents)>(([], SenderEvents()))

    var handler: OutcomeHandler {
        { batch in
            self.state.withLock {
                $0.outcomes.append(contentsOf: batch.outcomes)
                $0.events += batch.events
            }
        }
    }

    var outcomes: [Outcome] { state.withLock { $0.outcomes } }
    var events: SenderEvents { state.withLock { $0.events } }
    var count: Int { state.withLock { $0.outcomes.count } }
}

func startSimulator(faults: FaultScript = FaultScript()) async throws -> GatewaySimulator {
    var config = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
    config.faults = faults
    config.keepRecordsInMemory = true
    let sim = try GatewaySimulator(configuration: config)
    try await sim.start()
    return sim
}

/// A test shard configuration: quick to settle, quick to reconnect.
/// The HTTP/2 request timeout of the tests that are not about it: a stream unanswered for
/// `requestTimeout` is resent as ambiguous, and a loaded machine can keep the in-process simulator from
/// answering for longer than the product's 10 s.
let slowMachineRequestTimeout = Duration.seconds(300)

func testShardConfiguration() -> ShardConfiguration {
    var c = ShardConfiguration()
    // 3 s: a full `swift test` runs the Kafka, Redis and HTTP/2 suites beside this one on 2 cores, and the
    // simulator (debug build) can then read a frame more than 1.5 s after it was written. Since issue 10
    // item 4, nothing is lost then (the grace window resends what an error proves discarded), but an
    // invalid token read that late was already reported accepted (`refusedAfterSettle`), and the tests
    // count rejections exactly. Measured: at 1.5 s, `everyValidJobOnceUnderFaults` beside the other
    // suites reported 12 of its 1 000 invalid tokens accepted, with nothing lost.
    c.settleAfter = .seconds(3)
    // The grace window is a deadline too: the simulator shares the test process, and when the machine is
    // loaded it reads a frame later than any grace a production gateway needs. A test waits as long as
    // it takes; what the grace window does is in the tests that set their own.
    c.settleGrace = .seconds(120)
    c.linger = .milliseconds(1)
    c.reconnect.initialDelay = .milliseconds(5)
    c.reconnect.maximumDelay = .milliseconds(200)
    c.reconnect.attemptsPerSecondPerGateway = 2000
    return c
}

func makePool(
    simulators: [GatewaySimulator], shards: Int, shard: ShardConfiguration = testShardConfiguration(),
    log: OutcomeLog
) throws -> BinaryTransport {
    let config = BinaryTransportConfiguration(
        credentials: .test(app: shop, in: TestCertificates.directory),
        gateways: simulators.map { GatewayAddress(host: "127.0.0.1", port: $0.ports.gateway) },
        shards: shards, shard: shard, serverHostname: "localhost")
    return try BinaryTransport(configuration: config, group: MultiThreadedEventLoopGroup.singleton, onOutcomes: log.handler)
}

func testToken(_ n: Int) -> DeviceToken {
    var bytes = [UInt8](repeating: 0x11, count: 32)
    for k in 0..<8 { bytes[24 + k] = UInt8(truncatingIfNeeded: n >> (8 * (7 - k))) }
    return try! DeviceToken(bytes: bytes)
}

/// Job `n` for token `tokenNumber`; the payload carries the job id as `jid` so the simulator records it.
func job(_ n: Int, token tokenNumber: Int) -> PushNotification {
    let id = "job-\(n)"
    return PushNotification(
        jobID: id, app: shop, token: testToken(tokenNumber),
        payload: Array(#"{"aps":{"alert":"hello \#(n)"},"jid":"\#(id)"}"#.utf8), expiry: 0, priority: .immediate,
        position: SourcePosition(partition: 0, offset: Int64(n)))
}

/// Waits until `condition` holds or fails the test after `seconds` (a guard against hangs, not a timing assertion).
func waitUntil(
    _ what: String, seconds: Double = 300, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async -> Bool
) async throws {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !(await condition()) {
        if ContinuousClock.now > deadline {
            Issue.record("gave up waiting for: \(what)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// `body`'s result, or — when it has not finished after `seconds` — a thrown error naming `what` (a guard
/// against hangs, not a timing assertion: keep the bound generous). On the deadline `body` is cancelled
/// and left behind: unlike a task group, which would wait for a `body` that ignores cancellation, this
/// returns at once, so the test fails instead of hanging the run.
func withDeadline<T: Sendable>(
    _ what: String, seconds: Double = 300, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let race = DeadlineRace<T>()
    defer { race.cancelTasks() }
    return try await withCheckedThrowingContinuation { continuation in
        race.start(
            continuation,
            work: Task {
                do { race.finish(.success(try await body())) } catch { race.finish(.failure(error)) }
            },
            timer: Task {
                guard (try? await Task.sleep(for: .seconds(seconds))) != nil else { return }
                race.finish(.failure(TestFailure("gave up after \(Int(seconds)) s waiting for: \(what)")))
            })
    }
}

/// `withDeadline`'s continuation, resumed exactly once (by the work or by the timer, whichever is first).
private final class DeadlineRace<T: Sendable>: Sendable {
    private let state = Mutex<
        (continuation: CheckedContinuation<T, any Error>?, pending: Result<T, any Error>?, tasks: [Task<Void, Never>])
    >(
        (nil, nil, []))

    func start(_ continuation: CheckedContinuation<T, any Error>, work: Task<Void, Never>, timer: Task<Void, Never>) {
        let pending = state.withLock { s -> Result<T, any Error>? in
            s.tasks = [work, timer]
            if let pending = s.pending { return pending }
            s.continuation = continuation
            return nil
        }
        if let pending { continuation.resume(with: pending) }
    }

    func finish(_ result: Result<T, any Error>) {
        let continuation = state.withLock { s -> CheckedContinuation<T, any Error>? in
            guard let continuation = s.continuation else {
                // Before `start` stored it (a very quick body), or after the other side won.
                if s.tasks.isEmpty && s.pending == nil { s.pending = result }
                return nil
            }
            s.continuation = nil
            return continuation
        }
        continuation?.resume(with: result)
    }

    func cancelTasks() {
        for task in state.withLock({ $0.tasks }) { task.cancel() }
    }
}
