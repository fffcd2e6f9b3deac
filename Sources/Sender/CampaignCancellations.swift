import Synchronization

/// The campaigns cancelled or paused (`campaign cancel`, `campaign pause`: design §2.10, §2.11) as this
/// process last read them: a transport checks a notification against it right before writing it. One of
/// a cancelled campaign settles ``Delivery/cancelled``, one of a paused campaign ``Delivery/held`` (the
/// pipeline holds it in Redis until the campaign resumes); neither is written.
///
/// Costs one atomic load per notification while no campaign is cancelled or paused, and a lock only for
/// a campaign's notification while some campaign is.
public final class CampaignCancellations: Sendable {
    private let count = Atomic<Int>(0)
    private let campaigns = Mutex<(cancelled: Set<String>, paused: Set<String>)>(([], []))

    public init() {}

    /// Replaces both sets (the control loop, after each change of the control state).
    public func replace(cancelled: Set<String>, paused: Set<String> = []) {
        campaigns.withLock { $0 = (cancelled, paused) }
        count.store(cancelled.count + paused.count, ordering: .releasing)
    }

    /// Whether `campaign` is cancelled (false for nil).
    public func contains(_ campaign: String?) -> Bool {
        guard count.load(ordering: .acquiring) > 0, let campaign else { return false }
        return campaigns.withLock { $0.cancelled.contains(campaign) }
    }

    /// What becomes of a notification instead of being written: nil to write it; ``Delivery/cancelled``
    /// when its campaign is cancelled; ``Delivery/held`` when it is paused.
    @inline(__always)
    func instead(of notification: PushNotification) -> Delivery? {
        guard count.load(ordering: .acquiring) > 0, let campaign = notification.campaign else { return nil }
        return campaigns.withLock { sets in
            if sets.cancelled.contains(campaign) { return .cancelled }
            if sets.paused.contains(campaign) { return .held }
            return nil
        }
    }
}
