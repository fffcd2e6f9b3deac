import Kafka
import Synchronization

/// How many jobs may be taken from Kafka and not yet settled. Ingest acquires before it processes a
/// batch; the settler releases as outcomes are recorded. When the budget is spent, ingest stops asking
/// Kafka for more, the consumer's bounded buffer fills and its poll thread holds, and librdkafka's queue
/// fills and stops fetching: back-pressure reaches Kafka and nothing buffers without bound
/// (`docs/design.md §1.2`).
///
/// Bytes too: a valid job may be ~1 MB (unknown keys are allowed), so `maxInFlight` of them
/// would be gigabytes. Messages larger than `largeMessageBytes` — more than any job whose payload fits
/// Apple's limits needs — are counted in bytes as well, against `byteCapacity`, until they settle; dead
/// letters waiting for a failing dead-letter topic hold theirs too (they settle once stored). Smaller
/// messages are bounded by the count alone (`capacity` × `largeMessageBytes` at most), which keeps the
/// byte accounting off the hot path: only large messages touch the table below.
///
/// A wait can be cancelled: a stop must never hang on a budget that nothing will free (the settler
/// stopped, or Apple unreachable with every permit held by unanswered requests — `docs/design.md §1.3`).
final class InFlightBudget: Sendable {
    private struct Waiter {
        var id: UInt64
        var count: Int
        var bytes: Int
        /// Finished once the waiter's share is taken for it (it then leaves the queue).
        var granted: AsyncStream<Void>.Continuation
    }

    private struct State {
        var available: Int
        var availableBytes: Int
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        /// The large messages taken and not settled, and the bytes each holds.
        var large: [Position: Int] = [:]

        func fits(_ count: Int, _ bytes: Int) -> Bool { available >= count && availableBytes >= bytes }
    }

    private struct Position: Hashable {
        var partition: Int32
        var offset: Int64
    }

    private let state: Mutex<State>
    let capacity: Int
    let byteCapacity: Int
    static let largeMessageBytes = 4 << 10

    init(capacity: Int, byteCapacity: Int = .max) {
        self.capacity = capacity
        self.byteCapacity = byteCapacity
        state = Mutex(State(available: capacity, availableBytes: byteCapacity))
    }

    var inFlight: Int { capacity - state.withLock { $0.available } }
    /// Bytes of large messages taken and not settled.
    var inFlightBytes: Int { byteCapacity - state.withLock { $0.availableBytes } }

    /// Takes a batch from Kafka: one unit per message, and the bytes of its large messages (remembered
    /// until `release(refs:)` settles them). False, taking nothing, when cancelled while waiting.
    func acquire(batch: [KafkaConsumerMessage]) async -> Bool {
        var bytes = 0
        var large: [(Position, Int)] = []
        for m in batch where m.value.count > Self.largeMessageBytes {
            bytes += m.value.count
            large.append((Position(partition: m.partition, offset: m.offset), m.value.count))
        }
        guard await acquire(batch.count, bytes: bytes) else { return false }
        if !large.isEmpty {
            // The bytes were taken whole above (capped at the capacity); record them as they were taken.
            let charged = min(bytes, byteCapacity)
            state.withLock { s in
                var left = charged
                for (p, n) in large {
                    let take = min(n, left)
                    s.large[p] = take
                    left -= take
                }
            }
        }
        return true
    }

    /// Settled messages: one unit each, and the bytes of the large ones among them.
    func release(refs: [MessageRef]) {
        var bytes = 0
        if !state.withLock({ $0.large.isEmpty }) {
            bytes = state.withLock { s in
                var n = 0
                for r in refs { if let b = s.large.removeValue(forKey: Position(partition: r.partition, offset: r.offset)) { n += b } }
                return n
            }
        }
        release(refs.count, bytes: bytes)
    }

    /// Waits until `count` can be taken, and takes it: true. A batch larger than the whole budget takes
    /// all of it. False when the waiting task was cancelled first: nothing was taken.
    func acquire(_ count: Int, bytes: Int = 0) async -> Bool {
        let n = min(count, capacity)
        let b = min(bytes, byteCapacity)
        // The usual case, no wait: nothing allocated.
        let taken: Bool? = state.withLock { s in
            if Task.isCancelled { return false }
            guard s.waiters.isEmpty && s.fits(n, b) else { return nil }
            s.available -= n
            s.availableBytes -= b
            return true
        }
        if let taken { return taken }
        let (wait, granted) = AsyncStream.makeStream(of: Void.self)
        let (id, ready) = state.withLock { s -> (UInt64, Bool?) in
            s.nextID &+= 1
            if s.waiters.isEmpty && s.fits(n, b) {
                s.available -= n
                s.availableBytes -= b
                return (s.nextID, true)
            }
            s.waiters.append(Waiter(id: s.nextID, count: n, bytes: b, granted: granted))
            return (s.nextID, nil)
        }
        if let ready { return ready }
        // Ends when `release` granted the share (finishing the stream) or the caller is cancelled.
        for await _ in wait {}
        // Still queued: cancelled first, nothing was taken; the waiter behind it may fit now.
        let cancelled = state.withLock { s -> Bool in
            guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return false }
            s.waiters.remove(at: i)
            return true
        }
        if cancelled { release(0, bytes: 0, force: true) }
        return !cancelled
    }

    func release(_ count: Int, bytes: Int = 0) { release(count, bytes: bytes, force: false) }

    private func release(_ count: Int, bytes: Int, force: Bool) {
        guard count > 0 || bytes > 0 || force else { return }
        let granted = state.withLock { s -> [AsyncStream<Void>.Continuation] in
            s.available = min(capacity, s.available + count)
            s.availableBytes = min(byteCapacity, s.availableBytes + bytes)
            var out: [AsyncStream<Void>.Continuation] = []
            while let first = s.waiters.first, s.fits(first.count, first.bytes) {
                s.available -= first.count
                s.availableBytes -= first.bytes
                out.append(first.granted)
                s.waiters.removeFirst()
            }
            return out
        }
        for g in granted { g.finish() }
    }
}
