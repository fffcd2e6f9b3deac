import Kafka
import Logging
import Redis
import Synchronization

/// Writes dead letters for the ingest stage and settles their source messages only once stored.
///
/// Each write runs in a task of its own, so the ingest stage never waits for the dead-letter topic; a
/// write that fails is retried with exponential back-off, each failure counted (`dead_letter_failures`) and logged
/// with the source positions, while valid jobs keep flowing: a dead-letter topic that is down must not
/// stop the pipeline, and must not lose the message either — its offset stays unsettled (Kafka's
/// committed position cannot pass it) until the letter is stored. At shutdown, retries still failing are
/// abandoned: those messages are redelivered to the next process.
final class DeadLetterWriter: Sendable {
    typealias Letter = (message: KafkaConsumerMessage, reason: String)

    private let deadLetter: DeadLetter
    private let store: PipelineStore
    private let inbox: SettlerInbox
    private let logger: Logger
    private let metrics: PipelineMetrics?
    private let initialDelay: Duration
    private let maximumDelay: Duration
    private let retries = Mutex<(next: Int, tasks: [Int: Task<Void, Never>])>((0, [:]))

    init(
        deadLetter: DeadLetter, store: PipelineStore, inbox: SettlerInbox, logger: Logger, metrics: PipelineMetrics? = nil,
        initialDelay: Duration = .milliseconds(100), maximumDelay: Duration = .seconds(10)
    ) {
        self.deadLetter = deadLetter
        self.store = store
        self.inbox = inbox
        self.logger = logger
        self.metrics = metrics
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    /// Writes `letters` in the background; once they are stored, puts `settle` (their outcomes and refs)
    /// into the inbox.
    func write(_ letters: [Letter], settle: SettlerInbox.Item) {
        if letters.isEmpty {
            inbox.put(settle)
            return
        }
        let task = Task { [self] in
            var letters = letters
            var delay = initialDelay
            var number = 1
            while !Task.isCancelled {
                if await attempt(&letters, number: number) {
                    inbox.put(settle)
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
        let id = retries.withLock { r -> Int in
            r.next += 1
            r.tasks[r.next] = task
            return r.next
        }
        // Forget the task once done (it removes nothing else; `finish` takes what is left).
        Task {
            await task.value
            _ = retries.withLock { $0.tasks.removeValue(forKey: id) }
        }
    }

    /// Dead-letter writes still being retried.
    var pendingRetries: Int { retries.withLock { $0.tasks.count } }

    /// Stops retrying (shutdown) and waits for the retry tasks to end.
    func finish() async {
        let tasks = retries.withLock { r -> [Task<Void, Never>] in
            defer { r.tasks = [:] }
            return Array(r.tasks.values)
        }
        for t in tasks { t.cancel() }
        for t in tasks { await t.value }
    }

    /// One write of `letters`; on failure, `letters` keeps only those not stored (retrying the others
    /// would store them twice).
    private func attempt(_ letters: inout [Letter], number: Int) async -> Bool {
        do {
            try await deadLetter.send(letters)
            return true
        } catch {
            if let e = error as? DeadLetterError {
                let unsent = Set(e.unsent)
                letters = letters.filter { unsent.contains($0.message.ref) }
            }
            let failed = letters.count
            logger.error(
                "dead-letter write failed; retrying with back-off, source messages stay unsettled",
                metadata: [
                    "dlq.topic": "\(deadLetter.topic)", "dlq.attempt": "\(number)", "dlq.failed": "\(failed)",
                    "dlq.sources":
                        "\(letters.prefix(5).map { "\($0.message.ref)" }.joined(separator: ","))\(letters.count > 5 ? ",…" : "")",
                    "error": "\(error)",
                ])
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
