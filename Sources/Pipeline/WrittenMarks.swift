import Logging
import Redis
import Sender

/// Sets gate calls' "written" marks in Redis when a transport asks for leave to write them
/// (``WriteClearance``, issue 28 item 8, `docs/design.md §2.4`), one SET at a time on a Redis connection
/// of their own, so a mark never waits behind a gate or settle call. A mark that cannot be set is
/// retried with back-off: its notifications wait (a write before the mark could be an uncounted
/// duplicate after a crash), and the stop's drain timeout bounds the wait.
final class WrittenMarks: Sendable {
    private typealias Ask = (call: String, clearance: WriteClearance)
    private let asks: AsyncStream<Ask>
    private let continuation: AsyncStream<Ask>.Continuation
    private let store: PipelineStore
    private let logger: Logger

    init(store: PipelineStore, logger: Logger) {
        (asks, continuation) = AsyncStream.makeStream(of: Ask.self)
        self.store = store
        self.logger = logger
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

    /// Sets the marks asked for until cancelled.
    func run() async {
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
