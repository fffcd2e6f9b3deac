import Synchronization

/// How many jobs may be taken from Kafka and not yet settled. Ingest acquires before it processes a
/// batch; the settler releases as outcomes are recorded. When the budget is spent, ingest stops asking
/// Kafka for more, the consumer's bounded buffer fills and its poll thread holds, and librdkafka's queue
/// fills and stops fetching: back-pressure reaches Kafka and nothing buffers without bound
/// (`docs/design.md §1.2`).
final class InFlightBudget: Sendable {
    private struct State {
        var available: Int
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state: Mutex<State>
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        state = Mutex(State(available: capacity))
    }

    var inFlight: Int { capacity - state.withLock { $0.available } }

    /// Waits until `count` can be taken. A batch larger than the whole budget takes all of it.
    func acquire(_ count: Int) async {
        let n = min(count, capacity)
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { s -> Bool in
                if s.waiters.isEmpty && s.available >= n {
                    s.available -= n
                    return true
                }
                s.waiters.append((n, c))
                return false
            }
            if ready { c.resume() }
        }
    }

    func release(_ count: Int) {
        guard count > 0 else { return }
        let resumed = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.available = min(capacity, s.available + count)
            var out: [CheckedContinuation<Void, Never>] = []
            while let first = s.waiters.first, s.available >= first.count {
                s.available -= first.count
                out.append(first.continuation)
                s.waiters.removeFirst()
            }
            return out
        }
        for c in resumed { c.resume() }
    }
}
