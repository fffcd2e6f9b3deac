import Logging
import Synchronization

/// Logs jobs waiting on another live process's lease, at most once per interval (a rebalance can make
/// thousands wait at once): how many since the last line, one example job and holder.
final class LeaseWaitLog: Sendable {
    private let state = Mutex<(count: Int, last: ContinuousClock.Instant?)>((0, nil))
    private let interval: Duration

    init(interval: Duration = .seconds(10)) {
        self.interval = interval
    }

    func note(jobID: String, holder: String, logger: Logger) {
        let now = ContinuousClock.now
        let report = state.withLock { s -> Int? in
            s.count += 1
            if let last = s.last, now - last < interval { return nil }
            s.last = now
            defer { s.count = 0 }
            return s.count
        }
        if let report {
            logger.warning(
                "jobs wait on another live process's in-flight lease",
                metadata: ["jobs": "\(report)", "example.job": "\(jobID)", "example.owner": "\(holder)"])
        }
    }
}
