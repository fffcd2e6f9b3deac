import Redis
import Synchronization

/// This process's heartbeat (`<p>:owner:<owner>`, design §2.2) and the value each gate call is gated
/// under (§2.4). The value carries an epoch that grows each time the heartbeat is found lapsed: a process
/// cut off from Redis longer than the heartbeat lives is treated as dead by the others, which take its
/// leases over and count `ambiguous` only for the calls whose written mark they find. A mark is set only
/// while the heartbeat still holds the value its call was gated under, so no call gated before a lapse
/// can be marked after it: its jobs are counted `ambiguous` by this process instead (``WrittenMarks``).
final class OwnerHeartbeat: Sendable {
    private struct State {
        var epoch = 0
        var value: String
    }

    /// `host pid`, so an operator can tell which process holds a lease.
    private let description: String
    private let state: Mutex<State>

    init(description: String) {
        self.description = description
        state = Mutex(State(value: Self.value(description, epoch: 0)))
    }

    private static func value(_ description: String, epoch: Int) -> String { "\(description) epoch \(epoch)" }

    /// The value a gate call issued now is gated under.
    var value: String { state.withLock { $0.value } }

    /// A new gate call, under the current value.
    func newCall() -> GateCall { GateCall(id: PipelineStore.newBatchID(), heartbeat: value) }

    /// The first beat, before the first lease is taken.
    func start(store: PipelineStore) async throws {
        try await store.beat(value: value)
    }

    /// Refreshes the heartbeat. If it had lapsed, beats a new epoch and returns `true`; gate calls take
    /// the new value only once Redis holds it, so a call never holds leases under a value another
    /// process could still find missing.
    func refresh(store: PipelineStore) async throws -> Bool {
        if try await store.beat(value: value, refresh: true) { return false }
        let next = state.withLock { Self.value(description, epoch: $0.epoch + 1) }
        try await store.beat(value: next)
        state.withLock {
            $0.epoch += 1
            $0.value = next
        }
        return true
    }
}

/// A gate call: its id (its leases and written mark name it) and the heartbeat value it was issued
/// under (its mark is fenced by it).
struct GateCall: Sendable {
    var id: String
    var heartbeat: String
}
