import Synchronization

/// Leave to write one gate call's notifications (`docs/design.md §2.4`). The pipeline
/// grants it once the call's "written" mark is set in Redis; a transport writes no request of the call
/// before then. So if the process dies, the process that takes its leases over counts `ambiguous` only
/// the calls that may have reached a connection, not the ones still queued behind Apple's stream limits
/// (over HTTP/2 up to `connections × queue_capacity` per process: with the mark set at the hand-off,
/// three kills counted 7 561 for 1 000 real duplicates).
///
/// The first `request` starts the mark (`start`); every requester is called back once it is granted.
public final class WriteClearance: Sendable {
    private struct State {
        var requested = false
        var waiters: [@Sendable () -> Void] = []
    }

    private let isSet = Atomic<Bool>(false)
    private let state = Mutex(State())
    private let start: @Sendable (WriteClearance) -> Void

    /// `start` sets the mark (asynchronously, retrying as it must) and then calls ``grant()``.
    public init(start: @escaping @Sendable (WriteClearance) -> Void) {
        self.start = start
    }

    /// Leave given already (the mark was set before the hand-off, or no mark is kept).
    public static func granted() -> WriteClearance {
        let clearance = WriteClearance(start: { _ in })
        clearance.grant()
        return clearance
    }

    /// Read by a connection before each write: one atomic load.
    public var isGranted: Bool { isSet.load(ordering: .acquiring) }

    /// Asks for leave: `then` runs once it is granted (at once, on this thread, if it is already).
    public func request(then: @escaping @Sendable () -> Void) {
        let (now, first) = state.withLock { s -> (Bool, Bool) in
            if isSet.load(ordering: .acquiring) { return (true, false) }
            s.waiters.append(then)
            defer { s.requested = true }
            return (false, !s.requested)
        }
        if now { then() } else if first { start(self) }
    }

    /// The mark is set: every requester may write.
    public func grant() {
        let waiters = state.withLock { s -> [@Sendable () -> Void] in
            isSet.store(true, ordering: .releasing)
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w() }
    }
}
