/// The `reason` strings of the provider API's error responses, with the HTTP status Apple pairs each
/// with (Apple, "Handling notification responses from APNs", table "Response error strings"), as the
/// table stands today, the token-auth answers included: `UnrelatedKeyIdInToken` ("The key ID in the
/// provider token isn't related to the key ID of the token used in the first push of this connection. To
/// use this token, open a new connection") and `BadEnvironmentKeyIdInToken` ("The key ID in the provider
/// token doesn't match the environment"). APNs has been seen answering the latter as
/// `BadEnvironmentKeyInToken` (without "Id"; APNSwift added that spelling), so both are known. What each
/// means for settlement is `HTTP2Verdict` (docs/design.md §5.6). The broadcast and channel endpoints share
/// these and add their own (`APNsChannelReason`, Apple's "Handling error responses from Apple Push
/// Notification service"), among them one more 403, `TopicMismatch`, here.
public enum APNsReason: String, Error, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    // 400
    case badCollapseId = "BadCollapseId"
    case badDeviceToken = "BadDeviceToken"
    case badExpirationDate = "BadExpirationDate"
    case badMessageId = "BadMessageId"
    case badPriority = "BadPriority"
    case badTopic = "BadTopic"
    case deviceTokenNotForTopic = "DeviceTokenNotForTopic"
    case duplicateHeaders = "DuplicateHeaders"
    case idleTimeout = "IdleTimeout"
    case invalidPushType = "InvalidPushType"
    case missingDeviceToken = "MissingDeviceToken"
    case missingTopic = "MissingTopic"
    case payloadEmpty = "PayloadEmpty"
    case topicDisallowed = "TopicDisallowed"
    // 403
    case badCertificate = "BadCertificate"
    case badCertificateEnvironment = "BadCertificateEnvironment"
    case expiredProviderToken = "ExpiredProviderToken"
    case forbidden = "Forbidden"
    case invalidProviderToken = "InvalidProviderToken"
    case missingProviderToken = "MissingProviderToken"
    case unrelatedKeyIdInToken = "UnrelatedKeyIdInToken"
    case badEnvironmentKeyIdInToken = "BadEnvironmentKeyIdInToken"
    /// The spelling APNs has been seen to send for `badEnvironmentKeyIdInToken`.
    case badEnvironmentKeyInToken = "BadEnvironmentKeyInToken"
    /// Broadcast and channel management: "The bundle IDs parsed from your token or certificate don't
    /// include the topic present in the path."
    case topicMismatch = "TopicMismatch"
    // 404, 405
    case badPath = "BadPath"
    case methodNotAllowed = "MethodNotAllowed"
    // 410
    case expiredToken = "ExpiredToken"
    case unregistered = "Unregistered"
    // 413
    case payloadTooLarge = "PayloadTooLarge"
    // 429
    case tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"
    case tooManyRequests = "TooManyRequests"
    // 500, 503
    case internalServerError = "InternalServerError"
    case serviceUnavailable = "ServiceUnavailable"
    case shutdown = "Shutdown"

    /// The HTTP status APNs answers with this reason.
    public var status: Int {
        switch self {
        case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
            .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
            .missingTopic, .payloadEmpty, .topicDisallowed:
            400
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken,
            .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken, .topicMismatch:
            403
        case .badPath: 404
        case .methodNotAllowed: 405
        case .expiredToken, .unregistered: 410
        case .payloadTooLarge: 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: 429
        case .internalServerError: 500
        case .serviceUnavailable, .shutdown: 503
        }
    }

    /// Apple: "Don't retry notification responses with the error code BadDeviceToken,
    /// DeviceTokenNotForTopic, Forbidden, ExpiredToken, Unregistered, or PayloadTooLarge."
    public var isPermanentForNotification: Bool {
        switch self {
        case .badDeviceToken, .deviceTokenNotForTopic, .forbidden, .expiredToken, .unregistered, .payloadTooLarge: true
        default: false
        }
    }

    public var description: String { "\(status) \(rawValue)" }
}
