import Synchronization

/// The campaigns cancelled (`campaign cancel`, design §2.10) as this process last read them: a transport
/// checks a notification against it right before writing it, and settles one of a cancelled campaign as
/// ``Delivery/cancelled`` instead (never written).
///
/// Costs one atomic load per notification while no campaign is cancelled (the set is empty), and a lock
/// only for a campaign's notification while some campaign is.
public final class CampaignCancellations: Sendable {
    private let count = Atomic<Int>(0)
    private let campaigns = Mutex<Set<String>>([])

    public init() {}

    /// Replaces the set (the control loop, after each change of the control state).
    public func replace(with cancelled: Set<String>) {
        campaigns.withLock { $0 = cancelled }
        count.store(cancelled.count, ordering: .releasing)
    }

    /// Whether `campaign` is cancelled (false for nil).
    public func contains(_ campaign: String?) -> Bool {
        guard count.load(ordering: .acquiring) > 0, let campaign else { return false }
        return campaigns.withLock { $0.contains(campaign) }
    }

    /// Whether a notification must not be written: its campaign is cancelled.
    @inline(__always)
    func cancels(_ notification: PushNotification) -> Bool {
        guard count.load(ordering: .acquiring) > 0, let campaign = notification.campaign else { return false }
        return campaigns.withLock { $0.contains(campaign) }
    }
}
