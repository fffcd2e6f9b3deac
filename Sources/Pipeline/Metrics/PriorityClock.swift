import Foundation
import Kafka
import Sender
import Synchronization

/// The priority lane's publish times (the Kafka message timestamp of each priority job taken and not
/// settled), so the latency histogram can observe publish → accepted when a transport reports a priority
/// job accepted (`apns_priority_latency_seconds`, `docs/design.md §1.4`). Only the priority lane fills it
/// (at most `pipeline.priority_max_in_flight` entries: the settler forgets each as its job settles); the
/// bulk lane's outcomes are never looked up.
final class PriorityClock: Sendable {
    private struct Key: Hashable {
        var partition: Int32
        var offset: Int64
    }
    private let published = Mutex<[Key: Int64]>([:])

    /// Remembers the publish time of every message of a priority batch (those with a timestamp).
    func note(_ batch: [KafkaConsumerMessage]) {
        published.withLock { p in
            for m in batch {
                if let t = m.timestampMilliseconds { p[Key(partition: m.partition, offset: m.offset)] = t }
            }
        }
    }

    /// The publish → accepted latencies, in milliseconds, of the priority jobs `batch` reports accepted.
    func acceptedLatencies(_ batch: OutcomeBatch, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> [Int64] {
        var keys: [Key] = []
        for o in batch.outcomes where o.kind == .accepted {
            if let p = o.notification.position, p.lane == .priority { keys.append(Key(partition: p.partition, offset: p.offset)) }
        }
        if keys.isEmpty { return [] }
        let times = published.withLock { p in keys.compactMap { p[$0] } }
        return times.map { max(0, nowMs - $0) }
    }

    func observeAccepted(_ batch: OutcomeBatch, metrics: PipelineMetrics) {
        for ms in acceptedLatencies(batch) { metrics.priorityAccepted(latencyMs: ms) }
    }

    /// Settled: no outcome of these comes again.
    func forget(_ refs: [MessageRef]) {
        published.withLock { p in
            for r in refs { p.removeValue(forKey: Key(partition: r.partition, offset: r.offset)) }
        }
    }

    var count: Int { published.withLock { $0.count } }
}
