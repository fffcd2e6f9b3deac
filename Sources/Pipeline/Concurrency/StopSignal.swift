import Synchronization

/// A one-shot event between stages of one task group: one stage `fire`s it (the settler gave up, a
/// stop began), others `wait` for it. A wait also ends when the waiting task is cancelled, so a stage
/// waiting on a signal that never comes never holds its group's end (`docs/design.md §1.3`).
final class StopSignal: Sendable {
    private struct State {
        var fired = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    init() {}

    var isFired: Bool { state.withLock { $0.fired } }

    /// Wakes every waiter, now and later. Firing twice is firing once.
    func fire() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.fired = true
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for w in waiters { w.resume() }
    }

    /// Returns once the signal fired, or once the caller is cancelled (check `isFired` to tell which).
    func wait() async {
        let id = state.withLock { s -> UInt64 in
            s.nextID &+= 1
            return s.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.fired || Task.isCancelled { return true }
                    s.waiters[id] = c
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
