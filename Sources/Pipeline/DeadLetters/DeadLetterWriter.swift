import Kafka
import Logging
import Redis
import Synchronization

/// Writes dead letters for the stages and settles their source messages only once stored.
///
/// A stage of the pipeline's task group: `write` hands letters over without waiting, and `run` writes
/// each hand-over in a child task of its own, so no stage waits for the dead-letter topic. A write that
/// fails is retried with exponential back-off, each failure counted (`dead_letter_failures`) and logged
/// with the source positions, while valid jobs keep flowing: a dead-letter topic that is down must not
/// stop the pipeline, and must not lose the message either — its offset stays unsettled (Kafka's
/// committed position cannot pass it) until the letter is stored. At shutdown (`finish`), retries still
/// failing are abandoned: those messages are redelivered to the next process. ``health`` says how long
/// the topic has been refusing (`/readyz`, a gauge) and keeps the failure lines to one per 10 s.
final class DeadLetterWriter: Sendable {
    typealias Letter = (message: KafkaConsumerMessage, reason: String)

    private struct Write: Sendable {
        var letters: [Letter]
        var settle: SettlerInbox.Item
    }

    private let deadLetter: DeadLetter
    let health: SinkHealth
    private let store: PipelineStore
    private let inbox: SettlerInbox
    private let logger: Logger
    private let metrics: PipelineMetrics?
    private let initialDelay: Duration
    private let maximumDelay: Duration
    private let writes: AsyncStream<Write>
    private let pending: AsyncStream<Write>.Continuation
    /// Fired when `run` returned.
    private let ended = StopSignal()

    init(
        deadLetter: DeadLetter, store: PipelineStore, inbox: SettlerInbox, logger: Logger, metrics: PipelineMetrics? = nil,
        readinessGrace: Duration = PipelineConfiguration.defaultReadinessGrace, initialDelay: Duration = .milliseconds(100),
        maximumDelay: Duration = .seconds(10)
    ) {
        self.deadLetter = deadLetter
        health = SinkHealth(sink: .deadLetter, topic: deadLetter.topic, grace: readinessGrace)
        self.store = store
        self.inbox = inbox
        self.logger = logger
        self.metrics = metrics
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        // Unbounded, but never large: each write's messages hold their place in the in-flight budget.
        (writes, pending) = AsyncStream.makeStream()
    }

    /// Writes `letters` (in `run`); once they are stored, puts `settle` (their outcomes and refs) into the
    /// inbox. After `finish`, letters are not written: their messages stay unsettled (redelivered).
    func write(_ letters: [Letter], settle: SettlerInbox.Item) {
        if letters.isEmpty {
            inbox.put(settle)
            return
        }
        pending.yield(Write(letters: letters, settle: settle))
    }

    /// Writes what `write` hands over, each in a child task, until `finish` (or cancellation).
    func run() async {
        await withDiscardingTaskGroup { group in
            for await write in writes {
                group.addTask { await self.deliver(write) }
            }
            // Finished: what is still being retried is abandoned.
            group.cancelAll()
        }
        ended.fire()
    }

    /// Stops taking letters and retrying (shutdown); returns once `run` has (or the caller is cancelled).
    func finish() async {
        pending.finish()
        await ended.wait()
    }

    private func deliver(_ write: Write) async {
        var letters = write.letters
        var delay = initialDelay
        var number = 1
        let tracked = health.begin()
        defer { health.end(tracked) }
        while !Task.isCancelled {
            if await attempt(&letters, number: number, tracked: tracked) {
                inbox.put(write.settle)
                if number > 1 {
                    logger.notice(
                        "dead letters stored after \(number) attempts",
                        metadata: ["dlq.count": "\(letters.count)", "dlq.first": "\(letters[0].message.ref)"])
                }
                return
            }
            number += 1
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, maximumDelay)
        }
        logger.warning(
            "stopping with dead letters not stored: their messages stay unsettled and are redelivered",
            metadata: ["dlq.count": "\(letters.count)", "dlq.first": "\(letters[0].message.ref)"])
    }

    /// One write of `letters`; on failure, `letters` keeps only those not stored (retrying the others
    /// would store them twice).
    private func attempt(_ letters: inout [Letter], number: Int, tracked: SinkHealth.Write) async -> Bool {
        let started = ContinuousClock.now
        do {
            try await deadLetter.send(letters)
            return true
        } catch {
            if let e = error as? DeadLetterError {
                let unsent = Set(e.unsent)
                letters = letters.filter { unsent.contains($0.message.ref) }
            }
            let failed = letters.count
            if let report = health.failed(tracked, attemptStarted: started, error: "\(error)") {
                var metadata: Logger.Metadata = [
                    "dlq.topic": "\(deadLetter.topic)", "dlq.attempt": "\(number)", "dlq.failed": "\(failed)",
                    "dlq.sources":
                        "\(letters.prefix(5).map { "\($0.message.ref)" }.joined(separator: ","))\(letters.count > 5 ? ",…" : "")",
                    "error": "\(error)",
                ]
                metadata.merge(report.metadata(prefix: "dlq")) { a, _ in a }
                logger.error("dead-letter write failed; retrying with back-off, source messages stay unsettled", metadata: metadata)
            }
            metrics?.deadLetterFailed(failed)
            do {
                try await store.increment(.deadLetterFailures, by: Int64(failed))
            } catch {
                logger.warning("could not count a dead-letter failure", metadata: ["error": "\(error)"])
            }
            return false
        }
    }
}
