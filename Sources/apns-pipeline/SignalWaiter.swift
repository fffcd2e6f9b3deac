import Dispatch
import Foundation

/// Waits for the first of some signals (SIGTERM, SIGINT for commands that run until stopped), with DispatchSource (the signals' default actions are disabled
/// so that the process can stop the cluster and exit 0).
final class SignalWaiter: @unchecked Sendable {
    // @unchecked: `sources` is set in init and only cancelled after the signal; `result` is guarded by `lock`.
    private var sources: [DispatchSourceSignal] = []
    private let lock = NSLock()
    private var received: Int32?
    private var continuation: CheckedContinuation<Int32, Never>?

    private let queue = DispatchQueue(label: "apns.signals")

    init(signals: [Int32]) {
        for sig in signals {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
            source.setEventHandler { [weak self] in self?.fire(sig) }
            source.resume()
            sources.append(source)
        }
    }

    private func fire(_ sig: Int32) {
        lock.lock()
        if received == nil { received = sig }
        let c = continuation
        continuation = nil
        lock.unlock()
        c?.resume(returning: sig)
    }

    /// Also runs `action` on every `signalNumber` (e.g. SIGUSR1 → print totals), until the wait ends.
    func on(_ signalNumber: Int32, _ action: @escaping @Sendable () -> Void) {
        signal(signalNumber, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
        source.setEventHandler(handler: action)
        source.resume()
        lock.lock()
        sources.append(source)
        lock.unlock()
    }

    func wait() async -> Int32 {
        let sig = await withCheckedContinuation { (c: CheckedContinuation<Int32, Never>) in
            lock.lock()
            if let received {
                lock.unlock()
                c.resume(returning: received)
            } else {
                continuation = c
                lock.unlock()
            }
        }
        for s in sources { s.cancel() }
        return sig
    }
}
