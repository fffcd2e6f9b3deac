import Synchronization

/// How many jobs may be taken from Kafka and not yet settled. Ingest acquires before it processes a
/// batch; the settler releases as outcomes are recorded. When the budget is spent, ingest stops asking
/// Kafka for more, the consumer's bounded buffer fills and its poll thread holds, and librdkafka's queue
/// fills and stops fetching: back-pressure reaches Kafka and nothing buffers without bound
/// (`docs/design.md §1.2`).
///
/// A wait can be cancelled: a stop must never hang on a budget that nothing will free (the settler
/// stopped, or Apple unreachable with every permit held by unanswered requests — `docs/design.md §1.3`).
final class InFlightBudget: Sendable {
    private struct Waiter {
        var id: UInt64
        var count: Int
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var available: Int
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
    }

    private let state: Mutex<State>
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        state = Mutex(State(available: capacity))
    }

    var inFlight: Int { capacity - state.withLock { $0.available } }

    /// Waits until `count` can be taken, and takes it: true. A batch larger than the whole budget takes
    /// all of it. False when the waiting task was cancelled first: nothing was taken.
    func acquire(_ count: Int) async -> Bool {
        let n = min(count, capacity)
        let id = state.withLock { s -> UInt64 in
            s.nextID &+= 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                let ready: Bool? = state.withLock { s in
                    // Cancelled before the wait began: the handler below already ran and found nothing.
                    if Task.isCancelled { return false }
                    if s.waiters.isEmpty && s.available >= n {
                        s.available -= n
                        return true
                    }
                    s.waiters.append(Waiter(id: id, count: n, continuation: c))
                    return nil
                }
                if let ready { c.resume(returning: ready) }
            }
        } onCancel: {
            let cancelled = state.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: i).continuation
            }
            cancelled?.resume(returning: false)
            // The waiter behind a cancelled one may fit now.
            release(0, force: true)
        }
    }

    func release(_ count: Int) { release(count, force: false) }

    private func release(_ count: Int, force: Bool) {
        guard count > 0 || force else { return }
        let resumed = state.withLock { s -> [CheckedContinuation<Bool, Never>] in
            s.available = min(capacity, s.available + count)
            var out: [CheckedContinuation<Bool, Never>] = []
            while let first = s.waiters.first, s.available >= first.count {
                s.available -= first.count
                out.append(first.continuation)
                s.waiters.removeFirst()
            }
            return out
        }
        for c in resumed { c.resume(returning: true) }
    }
}
