import AsyncAlgorithms
import Synchronization

/// A one-shot event between stages of one task group: one stage `fire`s it (the settler gave up, a
/// stop began), others `wait` for it. Firing finishes an `AsyncChannel` that carries nothing, which
/// ends every wait on it, now and later. A wait also ends when the waiting task is cancelled, so a stage
/// waiting on a signal that never comes never holds its group's end (`docs/design.md §1.3`).
final class StopSignal: Sendable {
    private let channel = AsyncChannel<Never>()
    private let fired = Atomic(false)

    init() {}

    var isFired: Bool { fired.load(ordering: .acquiring) }

    /// Wakes every waiter, now and later. Firing twice is firing once.
    func fire() {
        fired.store(true, ordering: .releasing)
        channel.finish()
    }

    /// Returns once the signal fired, or once the caller is cancelled (check `isFired` to tell which).
    func wait() async {
        for await _ in channel {}
    }
}
