import Foundation
import Synchronization
import UnixSignals

/// Waits for the first of some signals (SIGTERM, SIGINT for a command that runs until stopped), and runs
/// actions on others until then (e.g. SIGUSR1 → print totals).
///
/// The signal handling itself is swift-service-lifecycle's `UnixSignalsSequence`, the same that `run`
/// uses through its `ServiceGroup`; this only adapts it to "the first of these" and "on each of that".
final class SignalWaiter: Sendable {
    private let first: Task<Int32, Never>
    private let actions = Mutex<[Task<Void, Never>]>([])

    init(signals: [Int32]) {
        let trapped = signals.map(Self.unixSignal)
        // UnixSignals registers its handlers asynchronously; until then a signal is ignored rather than
        // killing the process with its default action (so a command always stops cleanly).
        for number in signals { signal(number, SIG_IGN) }
        first = Task {
            for await received in await UnixSignalsSequence(trapping: trapped) { return received.rawValue }
            return 0  // only when cancelled, which nothing does
        }
    }

    /// Also runs `action` on every `signalNumber`, until ``wait()`` returns.
    func on(_ signalNumber: Int32, _ action: @escaping @Sendable () -> Void) {
        let trapped = Self.unixSignal(signalNumber)
        signal(signalNumber, SIG_IGN)
        let task = Task {
            for await _ in await UnixSignalsSequence(trapping: trapped) { action() }
        }
        actions.withLock { $0.append(task) }
    }

    /// The number of the first of the awaited signals to arrive.
    func wait() async -> Int32 {
        let received = await first.value
        for task in actions.withLock({ $0 }) { task.cancel() }
        return received
    }

    /// `UnixSignal` has no initialiser from a number; these are the ones it can trap that a command may use.
    private static func unixSignal(_ number: Int32) -> UnixSignal {
        let known: [UnixSignal] = [.sigint, .sigterm, .sighup, .sigquit, .sigusr1, .sigusr2, .sigalrm, .sigwinch, .sigcont]
        guard let found = known.first(where: { $0.rawValue == number }) else {
            preconditionFailure("signal \(number) cannot be trapped with UnixSignals")
        }
        return found
    }
}
