import NIOCore
import Synchronization

/// Spaces out connection attempts to each gateway address across every shard of the process:
/// "APNs treats rapid connection and disconnection as a denial-of-service attack."
public final class ConnectionLimiter: Sendable {
    private let next = Mutex<[GatewayAddress: NIODeadline]>([:])
    private let interval: TimeAmount

    public init(attemptsPerSecond: Double) {
        interval = attemptsPerSecond > 0 ? TimeAmount(.seconds(1 / attemptsPerSecond)) : .zero
    }

    /// Reserves the next attempt slot for `gateway`; returns how long to wait before using it.
    public func reserve(_ gateway: GatewayAddress) -> TimeAmount {
        let now = NIODeadline.now()
        return next.withLock { slots in
            let slot = max(now, slots[gateway] ?? now)
            slots[gateway] = slot + interval
            return slot - now
        }
    }
}
