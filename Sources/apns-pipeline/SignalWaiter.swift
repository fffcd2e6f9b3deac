import Dispatch
import Foundation

/// Turns Unix signals into calls and an awaitable "terminate" (SIGTERM or SIGINT), for commands that
/// run until an operator stops them.
final class SignalWaiter: @unchecked Sendable {
    // Only touched on `queue`.
    private var sources: [any DispatchSourceSignal] = []
    private let queue = DispatchQueue(label: "apns.signals")

    func on(_ signalNumber: Int32, _ action: @escaping @Sendable () -> Void) {
        signal(signalNumber, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
        source.setEventHandler(handler: action)
        source.resume()
        queue.sync { sources.append(source) }
    }

    /// Returns at the first SIGTERM or SIGINT.
    func waitForTermination() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let once = OnceFlag()
            for s in [SIGTERM, SIGINT] {
                on(s) { if once.set() { continuation.resume() } }
            }
        }
    }
}

final class OnceFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    /// True the first time only.
    func set() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if done { return false }
        done = true
        return true
    }
}
