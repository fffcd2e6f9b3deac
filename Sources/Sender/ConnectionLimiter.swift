import Foundation
import Synchronization

/// Spaces out connection attempts to each gateway address across every shard of the process:
/// "APNs treats rapid connection and disconnection as a denial-of-service attack."
public final class ConnectionLimiter: Sendable {
    private let next = Mutex<[GatewayAddress: Double]>([:])
    private let interval: Double

    public init(attemptsPerSecond: Double) {
        interval = attemptsPerSecond > 0 ? 1 / attemptsPerSecond : 0
    }

    /// Reserves the next attempt slot for `gateway`; returns how many seconds to wait before using it.
    public func reserve(_ gateway: GatewayAddress) -> Double {
        let now = Date().timeIntervalSince1970
        return next.withLock { slots in
            let slot = max(now, slots[gateway] ?? 0)
            slots[gateway] = slot + interval
            return slot - now
        }
    }
}
