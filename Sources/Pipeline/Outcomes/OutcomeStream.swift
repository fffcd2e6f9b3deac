import Kafka
import Logging
import Redis
import Synchronization

/// What the stages need to know to build outcome messages (``OutcomeMessage``): passed to them only when
/// `kafka.outcomes_topic` is set, so without it they build nothing.
struct OutcomeMessageOptions: Sendable {
    /// Apps whose transport's requests carry an id (HTTP/2's `apns-id`): their outcomes report it.
    var appsWithRequestIDs: Set<String>
}

/// The settle stage's producer of the outcomes stream (`docs/design.md §3.5`).
///
/// One call per settle batch: every message is enqueued, then one wait for all their delivery reports.
/// Only once they are all delivered does the settler record the batch in Redis and mark its Kafka
/// offsets settled, so an outcome is never committed without its message (at least once: a crash after
/// the messages and before the commit sends them again, and consumers dedup by `id`). Messages that fail
/// are sent again with back-off, logged and counted, for as long as it takes: meanwhile nothing more
/// settles, the in-flight budget fills and intake waits — nothing is lost and no offset passes them.
/// Once a stop's deadline passes (``giveUp(at:)``) it stops retrying and throws: the batch stays
/// unsettled and Kafka redelivers it to the next process. ``health`` says how long it has been failing
/// (`/readyz`, a gauge) and keeps the failure lines to one per 10 s.
final class OutcomeStream: Sendable {
    let topic: String
    let options: OutcomeMessageOptions
    /// Run by the runner with its other Kafka clients (its `run()`); closed by `close()`.
    let producer: KafkaProducer
    let health: SinkHealth
    private let logger: Logger
    private let metrics: PipelineMetrics?
    private let initialDelay: Duration
    private let maximumDelay: Duration
    private let deadline = Mutex<ContinuousClock.Instant?>(nil)

    init(
        topic: String, options: OutcomeMessageOptions, producer: KafkaProducer, logger: Logger, metrics: PipelineMetrics?,
        readinessGrace: Duration = PipelineConfiguration.defaultReadinessGrace, initialDelay: Duration = .milliseconds(100),
        maximumDelay: Duration = .seconds(10)
    ) {
        self.topic = topic
        health = SinkHealth(sink: .outcomes, topic: topic, grace: readinessGrace)
        self.options = options
        self.producer = producer
        self.logger = logger
        self.metrics = metrics
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    /// Flushes and closes its producer (after the settler ended).
    func close() async {
        await producer.close()
    }

    /// Stopping: no retry starts after `instant` (an attempt under way finishes).
    func giveUp(at instant: ContinuousClock.Instant) {
        deadline.withLock { $0 = instant }
    }

    /// Delivers `messages` (settled at `at`, epoch seconds); returns once every one is acknowledged.
    func publish(_ messages: [OutcomeMessage], at: Int64) async throws {
        if messages.isEmpty { return }
        var pending = messages.map { KafkaProducerMessage(topic: topic, key: $0.key, value: $0.value(at: at)) }
        var delay = initialDelay
        var attempt = 1
        let write = health.begin()
        defer { health.end(write) }
        while true {
            let started = ContinuousClock.now
            do {
                try await producer.sendBatch(pending)
                if attempt > 1 {
                    logger.notice(
                        "outcome messages delivered after \(attempt) attempts; settling resumes",
                        metadata: ["outcomes.topic": "\(topic)", "outcomes.count": "\(messages.count)"])
                }
                metrics?.outcomeMessages(messages)
                return
            } catch let error as KafkaDeliveryError {
                // Only the failed ones again (those delivered would be duplicates).
                pending = error.failures.map { KafkaProducerMessage(topic: topic, key: $0.key, value: $0.value) }
                failed(pending.count, attempt: attempt, error: error, write: write, started: started)
            } catch {
                // The producer is closed or the like: nothing of this try is known delivered.
                failed(pending.count, attempt: attempt, error: error, write: write, started: started)
            }
            let wait = delay
            if let stop = deadline.withLock({ $0 }), ContinuousClock.now + wait > stop {
                logger.error(
                    "stopping with outcome messages not delivered: their jobs stay unsettled and are redelivered",
                    metadata: ["outcomes.topic": "\(topic)", "outcomes.undelivered": "\(pending.count)"])
                throw OutcomeStreamError(topic: topic, undelivered: pending.count)
            }
            try await Task.sleep(for: wait)
            delay = min(delay * 2, maximumDelay)
            attempt += 1
        }
    }

    private func failed(_ count: Int, attempt: Int, error: any Error, write: SinkHealth.Write, started: ContinuousClock.Instant) {
        metrics?.outcomeMessageFailures(count)
        guard let report = health.failed(write, attemptStarted: started, error: "\(error)") else { return }
        var metadata: Logger.Metadata = [
            "outcomes.topic": "\(topic)", "outcomes.attempt": "\(attempt)", "outcomes.failed": "\(count)", "error": "\(error)",
        ]
        metadata.merge(report.metadata(prefix: "outcomes")) { a, _ in a }
        logger.error(
            "outcome messages not delivered; settling waits and retries with back-off (nothing is committed past them)", metadata: metadata)
    }
}

/// The outcomes topic refused a settle batch's messages until the stop's deadline.
struct OutcomeStreamError: Error, CustomStringConvertible {
    var topic: String
    var undelivered: Int

    var description: String {
        "\(undelivered) outcome message(s) not delivered to \(topic) before the stop's deadline: their jobs stay unsettled"
    }
}
