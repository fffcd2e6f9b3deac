import Foundation
import Jobs
import Kafka
import Logging
import Sender

/// The intake stage of a lane: batches from its Kafka consumer, each taken only once the lane's
/// in-flight budget has room for it, decoded, and handed to the gate. Cancelling it is how a lane stops
/// taking jobs (a graceful stop): a batch it holds then is left unsettled, so Kafka redelivers it.
struct Intake: Sendable {
    let consumer: KafkaConsumer
    let budget: InFlightBudget
    let decoder: BatchDecoder
    let lane: Lane
    /// Counts what this process took from Kafka (`PipelineRunner.Observed.received`).
    let onReceived: @Sendable (Int) -> Void
    let metrics: PipelineMetrics?
    /// The priority lane's publish times, for its latency histogram.
    let clock: PriorityClock?
    let logger: Logger

    func run(into handoff: BatchHandoff<DecodedBatch>) async {
        if Task.isCancelled { return }
        // A campaign's jobs share their payload and alerts: read once, encoded once per variant.
        let templates = JobTemplates()
        var order = 0
        while !Task.isCancelled {
            guard let batch = await consumer.nextBatch(), !batch.isEmpty else {
                if Task.isCancelled { break }
                continue
            }
            // Cancelled while waiting (stopping): the batch is left unsettled, so Kafka redelivers it.
            guard await budget.acquire(batch: batch) else { break }
            onReceived(batch.count)
            var decoded: DecodedBatch
            switch lane {
            case .bulk:
                metrics?.kafkaBatch(batch)
                decoded = decoder.decode(batch, templates: templates)
            case .priority:
                metrics?.priorityBatch(batch.count)
                clock?.note(batch)
                if logger.logLevel <= .debug, let t = batch.first?.timestampMilliseconds {
                    logger.debug(
                        "priority batch taken",
                        metadata: ["count": "\(batch.count)", "publish_to_taken_ms": "\(Int64(Date().timeIntervalSince1970 * 1000) - t)"])
                }
                let all = decoder.decode(batch, templates: templates)
                decoded = decoder.refusingCampaigns(all)
                if decoded.deadLetters.count > all.deadLetters.count {
                    logger.warning(
                        "campaign jobs on the priority topic are dead-lettered: publish campaigns to the jobs topic",
                        metadata: ["topic": "\(batch[0].topic)", "reason": "\(BatchDecoder.campaignOnPriorityTopic)"])
                }
            }
            decoded.intakeOrder = order
            order += 1
            await handoff.put(decoded)
        }
    }
}

/// Jobs whose id was in flight elsewhere, gated again after `delay` (design §2.4): a stage of the lane's
/// task group, ended by its cancellation (what it still holds then is left unsettled: redelivered).
struct Regates: Sendable {
    /// How long a job whose id is in flight elsewhere waits before it is gated again.
    static let delay: Duration = .milliseconds(500)

    private let stream: AsyncStream<(due: ContinuousClock.Instant, batch: DecodedBatch)>
    private let continuation: AsyncStream<(due: ContinuousClock.Instant, batch: DecodedBatch)>.Continuation

    init() {
        // Unbounded, but never large: what waits here holds its place in the in-flight budget.
        (stream, continuation) = AsyncStream.makeStream()
    }

    func add(_ batch: DecodedBatch) {
        continuation.yield((.now + Self.delay, batch))
    }

    /// Puts each batch back into `handoff` once due, in the order they came (their due times are too).
    func run(into handoff: BatchHandoff<DecodedBatch>) async {
        for await (due, batch) in stream {
            do {
                try await Task.sleep(until: due)
            } catch {
                return
            }
            await handoff.put(batch)
        }
    }
}
