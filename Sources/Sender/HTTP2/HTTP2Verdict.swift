import APNsProtocol

/// What the HTTP/2 transport does with one answer from APNs (docs/design.md §5.6). Pure: status, `reason` and
/// `timestamp` in, a decision out; the connection state machine acts on it.
public enum HTTP2Verdict: Sendable, Hashable {
    /// 200: settled as accepted.
    case accepted
    /// Settled for good: the token is invalid (suppress it) or the request is malformed (dead-letter).
    case rejected(Rejection)
    /// 403 ExpiredProviderToken: renew the provider token (once per job) and send the job again.
    case renewProviderToken
    /// The connection's credentials were refused (403 InvalidProviderToken and the other auth 403s, 429
    /// TooManyProviderTokenUpdates): the connection stops sending; the job goes elsewhere or waits.
    case stopConnection
    /// 429 TooManyRequests: the job is sent again after a back-off.
    case retryLater
    /// 500, 503 and anything unexpected that is not the request's fault: sent again on another
    /// connection after a jittered delay, a bounded number of times, then dead-lettered as transient.
    case retryElsewhere

    /// The counter label of an outcome built from this answer: the reason as APNs sent it, else the
    /// status (a 5xx may come without a body).
    public static func code(status: Int, reason: String?) -> String {
        if let reason, !reason.isEmpty { return reason }
        return String(status)
    }

    /// Maps one response. `timestamp` is the 410 body's milliseconds since 1970.
    public static func of(status: Int, reason: String?, timestamp: Int64?) -> HTTP2Verdict {
        if status == 200 { return .accepted }
        let known = reason.flatMap(APNsReason.init(rawValue:))
        var code: String { Self.code(status: status, reason: reason) }
        switch status {
        case 200:
            return .accepted
        case 410:
            // Apple's time of invalidation, in seconds: a registration newer than it lifts the
            // suppression, exactly as a binary feedback tuple's time does.
            return .rejected(.invalidToken(since: timestamp.map { $0 / 1000 }, reason: "unregistered"))
        case 400 where known == .badDeviceToken || known == .deviceTokenNotForTopic:
            return .rejected(.invalidToken(since: nil, reason: "invalid-token"))
        case 403 where known == .expiredProviderToken:
            return .renewProviderToken
        case 403 where known == .forbidden:
            // "The specified action is not allowed": about this notification, not the connection's
            // credentials (Apple lists it among the answers not to retry).
            return .rejected(.badRequest(reason: code))
        case 403:
            // Every other 403 names the credentials (bad or missing token, wrong certificate or
            // environment); an unknown one is treated the same way, since sending more on those
            // credentials cannot succeed and stopping loses nothing.
            return .stopConnection
        case 429 where known == .tooManyProviderTokenUpdates:
            return .stopConnection
        case 429:
            return .retryLater
        case 400..<500:
            // Other 400s, 404 BadPath, 405, 413 PayloadTooLarge: the request is wrong, so resending
            // it cannot help. Validation should have caught it; the outcome is counted by its reason.
            return .rejected(.badRequest(reason: code))
        default:
            // 500, 503 Shutdown / ServiceUnavailable, and statuses APNs does not document.
            return .retryElsewhere
        }
    }
}
