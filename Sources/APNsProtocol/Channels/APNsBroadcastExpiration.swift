/// A broadcast's `apns-expiration` as its channel's storage policy allows it: the rule the sender applies
/// before sending and the HTTP/2 simulator enforces on what it receives (docs/design.md §5.5).
///
/// Apple, "Sending broadcast push notification requests to APNs", the `apns-expiration` header
/// ("Required"): "If the value is nonzero, APNs stores the notification and attempts delivery at least
/// once, repeating as necessary until the specified date. If the value is `0`, APNs attempts to deliver
/// the notification only once and doesn't store it. Providing a nonzero expiration for a channel created
/// with the No Message Stored storage policy results in message rejection."
///
/// Apple, "Handling error responses from Apple Push Notification service": `400` `BadExpirationDate`,
/// "The `apns-expiration header` is an invalid epoch timestamp. For channels with a `No Messages Stored`
/// storage policy, you can only specify a `0` expiration value."
///
/// Apple, "Sending channel management requests to APNs": "Messages in Most Recent Message store for a
/// maximum duration of 8 hours. You can specify an earlier expiration of messages by setting an
/// `apns-expiration` header when you send push notification on the channel."
///
/// So `0` is accepted on either policy; a nonzero value only on a Most Recent Message Stored channel,
/// where nothing is kept past 8 hours whatever the value says.
public enum APNsBroadcastExpiration {
    /// "Messages in Most Recent Message store for a maximum duration of 8 hours."
    public static let mostRecentMaximumStorage: UInt32 = 8 * 60 * 60

    /// Why a broadcast cannot be sent with the expiration its job asks for.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// A nonzero expiration for a No Message Stored channel (Apple would answer `BadExpirationDate`).
        case storedOnNoStorageChannel(requested: UInt32)

        public var description: String {
            switch self {
            case .storedOnNoStorageChannel(let requested):
                "expiry \(requested) asks APNs to store the broadcast, but its channel was created with the No Message Stored "
                    + "policy, which takes only apns-expiration 0 (Apple: \"Providing a nonzero expiration for a channel created "
                    + "with the No Message Stored storage policy results in message rejection\"): send it without expiry (or "
                    + "expiry 0), or on a channel created with --storage-policy most-recent"
            }
        }
    }

    /// The `apns-expiration` to send. `requested`: the job's own expiry, nil when it gave none; `policy`:
    /// the channel's, nil when it is not known; `now`: epoch seconds.
    ///
    /// - No Message Stored: `0` when the job gives none or `0`; a nonzero one is refused.
    /// - Most Recent Message Stored: the job's, else `now` + 8 hours (Apple's maximum storage); a later
    ///   one is sent as `now` + 8 hours (Apple keeps nothing longer, and its pages do not say whether a
    ///   later date is accepted, so it is not risked).
    /// - Unknown: the job's, else `0`, which either policy accepts; a nonzero one on a channel that turns
    ///   out to be No Message Stored is then APNs's to refuse (`BadExpirationDate`, a dead letter).
    public static func expiration(requested: UInt32?, policy: APNsChannelStoragePolicy?, now: UInt32) -> Result<UInt32, Refusal> {
        switch policy {
        case .noStorage?:
            guard let requested, requested != 0 else { return .success(0) }
            return .failure(.storedOnNoStorageChannel(requested: requested))
        case .mostRecent?:
            let (latest, overflow) = now.addingReportingOverflow(mostRecentMaximumStorage)
            let bound = overflow ? UInt32.max : latest
            guard let requested else { return .success(bound) }
            return .success(requested == 0 ? 0 : min(requested, bound))
        case nil:
            return .success(requested ?? 0)
        }
    }

    /// Whether APNs takes `expiration` (the header's epoch seconds) on a channel of `policy`: the check a
    /// server makes once it knows the channel (the simulator answers `BadExpirationDate` otherwise).
    public static func accepts(_ expiration: Int64, on policy: APNsChannelStoragePolicy) -> Bool {
        policy == .mostRecent || expiration == 0
    }
}
