import Foundation
import Jobs
import Kafka
import Logging
import Sender

/// The intake stage of a lane: batches from its Kafka consumer, each taken only once the lane's
/// in-flight budget has room for it, and handed to the gate (decoded here for the priority lane; by the
/// gate worker that takes it for the bulk lane). Cancelling it is how a lane stops
/// taking jobs (a graceful stop): a batch it holds then is left unsettled, so Kafka redelivers it.
struct Intake: Sendable {
    let consumer: KafkaConsumer
    let budget: InFlightBudget
    let decoder: BatchDecoder
    /// Counts what this process took from Kafka (`PipelineRunner.Observed.received`).
    let onReceived: @Sendable (Int) -> Void
    let metrics: PipelineMetrics?
    /// The priority lane's publish times, for its latency histogram.
    let clock: PriorityClock?
    let logger: Logger

    /// The bulk lane's intake: each batch taken, numbered in the order taken and handed to the gate
    /// workers, which decode it (`decode(_:intakeOrder:templates:)`), so that two batches are decoded at once while
    /// the intake is already waiting for the next.
    func run(into handoff: BatchHandoff<GateWork>) async {
        var order = 0
        await take { batch in
            metrics?.kafkaBatch(batch)
            await handoff.put(.taken(batch, intakeOrder: order))
            order += 1
        }
    }

    /// The priority lane's intake: each batch taken, decoded here, handed to the lane's gate.
    func run(into handoff: BatchHandoff<DecodedBatch>) async {
        // A campaign's jobs share their payload and alerts: read once, encoded once per variant.
        let templates = JobTemplates()
        await take { batch in
            metrics?.priorityBatch(batch.count)
            clock?.note(batch)
            if logger.logLevel <= .debug, let t = batch.first?.timestampMilliseconds {
                logger.debug(
                    "priority batch taken",
                    metadata: ["count": "\(batch.count)", "publish_to_taken_ms": "\(Int64(Date().timeIntervalSince1970 * 1000) - t)"])
            }
            let all = decoder.decode(batch, templates: templates)
            let decoded = decoder.refusingCampaigns(all)
            if decoded.deadLetters.count > all.deadLetters.count {
                logger.warning(
                    "campaign jobs on the priority topic are dead-lettered: publish campaigns to the jobs topic",
                    metadata: ["topic": "\(batch[0].topic)", "reason": "\(BatchDecoder.campaignOnPriorityTopic)"])
            }
            await handoff.put(decoded)
        }
    }

    /// A bulk batch taken from Kafka, decoded (by the gate worker that took it). `templates` is the
    /// worker's own: a campaign's jobs share their payload and alerts, read once, encoded once per variant.
    func decode(_ batch: [KafkaConsumerMessage], intakeOrder: Int, templates: JobTemplates) -> DecodedBatch {
        var decoded = decoder.decode(batch, templates: templates)
        decoded.intakeOrder = intakeOrder
        return decoded
    }

    /// Takes batches from Kafka while not cancelled, each once the lane's budget has room for it.
    private func take(_ body: ([KafkaConsumerMessage]) async -> Void) async {
        while !Task.isCancelled {
            guard let batch = await consumer.nextBatch(), !batch.isEmpty else {
                if Task.isCancelled { break }
                continue
            }
            // Cancelled while waiting (stopping): the batch is left unsettled, so Kafka redelivers it.
            guard await budget.acquire(batch: batch) else { break }
            onReceived(batch.count)
            await body(batch)
        }
    }
}

/// What a bulk lane's gate worker takes: a batch as the intake took it from Kafka (to decode), or a
/// decoded batch gated again (regates, cap waits).
enum GateWork: Sendable {
    case taken([KafkaConsumerMessage], intakeOrder: Int)
    case again(DecodedBatch)
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

    /// Puts each batch back (`put`: into the lane's hand-off) once due, in the order they came (their due
    /// times are too).
    func run(into put: (DecodedBatch) async -> Void) async {
        for await (due, batch) in stream {
            do {
                try await Task.sleep(until: due)
            } catch {
                return
            }
            await put(batch)
        }
    }
}
