import Logging
import NIOCore
import Redis
import Sender

/// Sets gate calls' "written" marks in Redis when a transport asks for leave to write them
/// (``WriteClearance``, `docs/design.md §2.4`), one SET at a time on a Redis connection
/// of their own, so a mark never waits behind a gate or settle call. A mark that cannot be set is
/// retried with back-off: its notifications wait (a write before the mark could be an uncounted
/// duplicate after a crash), and the stop's drain timeout bounds the wait.
final class WrittenMarks: Sendable {
    private typealias Ask = (call: String, clearance: WriteClearance)
    private let asks: AsyncStream<Ask>
    private let continuation: AsyncStream<Ask>.Continuation
    private let store: PipelineStore
    private let logger: Logger
    /// Where `run` sets the marks.
    private let executor: EventLoopTaskExecutor

    /// `eventLoop`: the marks are set on it rather than on Swift's pool. A transport's connection that
    /// asked for a mark writes nothing of its call until it is set; through the pool the way took two
    /// waits for a busy thread, longer than the connection's look-ahead at full rate, and connections
    /// stopped writing at 845 of the 1 200 calls of a 300 000-job run.
    init(store: PipelineStore, eventLoop: any EventLoop, logger: Logger) {
        (asks, continuation) = AsyncStream.makeStream(of: Ask.self)
        self.store = store
        self.logger = logger
        self.executor = EventLoopTaskExecutor(eventLoop)
    }

    /// The leave to write gate call `call`'s notifications: its mark is set when a transport first asks.
    func clearance(call: String) -> WriteClearance {
        WriteClearance { [continuation] clearance in continuation.yield((call, clearance)) }
    }

    /// Sets gate call `call`'s mark now and grants `clearance` (a batch for binary shards, which write
    /// what they are given at once). Throws as the Redis call does: the send stage stops, as for a gate
    /// call that fails.
    func markNow(call: String, clearance: WriteClearance) async throws {
        try await store.markWritten(call: call)
        clearance.grant()
    }

    /// Records in Redis, before any of gate call `call`'s notifications may be written, the jobs it took
    /// over from a process that died (`resent_after_crash`, and `ambiguous` for those the dead process may
    /// have written; design §2.4). Counted at the next settle instead, a kill -9 between the take-over and
    /// that settle lost the count while the jobs had already gone out once more: a job sent by three
    /// processes in turn was counted once for two duplicates (soak scenario a, two kills).
    /// Exactly once per call (the batch id `takeover-<call>` is the settle's marker). Only the take-over
    /// path pays this round trip.
    func recordTakeOvers(call: String, events: PipelineEvents, campaignEvents: [String: PipelineEvents]) async throws {
        var batch = SettleBatch(id: "takeover-" + call, outcomes: [], events: events)
        batch.campaignEvents = campaignEvents
        try await store.settle(batch)
    }

    /// Sets the marks asked for until cancelled.
    func run() async {
        await withTaskExecutorPreference(executor) { await setMarks() }
    }

    private func setMarks() async {
        for await ask in asks {
            var delay = Duration.milliseconds(100)
            while !Task.isCancelled {
                do {
                    try await store.markWritten(call: ask.call)
                    ask.clearance.grant()
                    break
                } catch {
                    logger.warning(
                        "could not mark a batch written in Redis; its notifications wait (retrying)",
                        metadata: [
                            "error": "\(error)",
                            "retry_in_ms": "\(delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)",
                        ])
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, .seconds(5))
                }
            }
            if Task.isCancelled { return }
        }
    }

    func finish() { continuation.finish() }
}
