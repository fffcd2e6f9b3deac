/// Names and fixed values of the HTTP/2 provider API's request and response headers.
///
/// Apple, "Sending notification requests to APNs": a request is `POST /3/device/<device token>` with the
/// payload as its body and these headers; the response carries `apns-id` (the request's, or one APNs
/// made when the request had none) and, in the development environment, `apns-unique-id`.
/// HTTP/2 header names are lower case on the wire (RFC 9113 §8.2.1), so these are too.
public enum APNsHeader {
    public static let method = ":method"
    public static let path = ":path"
    public static let scheme = ":scheme"
    public static let authority = ":authority"
    public static let status = ":status"

    /// `bearer <provider token>` (token-based connections only).
    public static let authorization = "authorization"
    /// The notification's UUID, echoed in the response; APNs generates one when it is absent.
    public static let id = "apns-id"
    /// UNIX epoch seconds after which APNs stops trying; 0 = deliver once or not at all.
    public static let expiration = "apns-expiration"
    /// 10 (immediately), 5 (power-considerate), 1 (prioritise power).
    public static let priority = "apns-priority"
    /// The app's bundle id, with a suffix for some push types (`.voip`, `.complication`, …).
    public static let topic = "apns-topic"
    /// At most 64 bytes; notifications with the same id coalesce on the device.
    public static let collapseID = "apns-collapse-id"
    public static let pushType = "apns-push-type"
    /// Response only (development environment): the id for the Push Notifications Console's delivery log.
    public static let uniqueID = "apns-unique-id"

    /// A broadcast's channel (`POST /4/broadcasts/apps/<bundle id>`, `APNsBroadcast`): the base64 id
    /// APNs issued when the channel was created.
    public static let channelID = "apns-channel-id"
    /// A broadcast's request UUID (as in the channel-management API: "A canonical UUID that's the unique
    /// ID for the request"), sent in place of `apns-id`.
    public static let requestID = "apns-request-id"

    /// What precedes the hex device token in `:path`.
    public static let devicePathPrefix = "/3/device/"
    /// `apns-collapse-id` limit, in bytes ("The value of this key must not exceed 64 bytes").
    public static let maxCollapseIDBytes = 64
}
