/// Apple's channel management API for broadcast push (iOS 18): create, read, list and delete the
/// channels a Live Activity subscribes to. Shared by the client (`ChannelManagementClient`, used by
/// `apns-pipeline channel`) and the HTTP/2 simulator, so both read the contract from one place.
///
/// From Apple, "Sending channel management requests to APNs":
/// - "Use HTTP/2 and TLS 1.2 or later to establish a connection between your provider server and one
///   of the following servers": the development/sandbox environment's
///   `api-manage-broadcast.sandbox.push.apple.com:2195` and the production environment's
///   `api-manage-broadcast.push.apple.com:2196` (not the provider API's hosts, and not port 443).
/// - "you can maintain up to 10,000 channels for your app in the development and production
///   environment, respectively. Once the Live Activity event is complete, and you no longer plan to use
///   the channel for any subsequent updates, delete the channel to avoid going over the allocated
///   channel limit."
/// - Requests: `POST /1/apps/<bundle id>/channels` with the body
///   `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}` creates a channel and answers
///   201 with its id in the `apns-channel-id` header; `GET /1/apps/<bundle id>/channels` with an
///   `apns-channel-id` header reads a channel's settings (200, the same two keys); `DELETE` on the same
///   path with the same header deletes it (204); `GET /1/apps/<bundle id>/all-channels` lists the
///   app's channel ids (200, `{"channels": [...]}`). An optional `apns-request-id` (a canonical UUID)
///   names the request and is echoed in the answer.
/// - ActivityKit (`PushType.channel(_:)`): "The channel ID is a base64-encoded string."
///
/// The quotes above are Apple's text. Apple's page could be read here only in part (its opening, the
/// limit and the hosts); the request and answer shapes in the third point are those the published
/// clients that speak this API send and expect (APNSwift's broadcast client after its maintainers
/// moved the channel id to the `apns-channel-id` header, node clients and their tests), so the client
/// here is liberal in what it reads (200 or 201 for a create, the id from a JSON body when the header
/// is absent; 200 or 204 for a delete).
public enum APNsChannelManagement {
    /// Apple's channel-management hosts (see above).
    public static let sandboxHost = "api-manage-broadcast.sandbox.push.apple.com"
    public static let sandboxPort = 2195
    public static let productionHost = "api-manage-broadcast.push.apple.com"
    public static let productionPort = 2196

    /// Apple: "up to 10,000 channels for your app in the development and production environment, respectively".
    public static let channelLimitPerEnvironment = 10_000

    /// The only push type a channel carries (the create body's `push-type`).
    public static let pushType = "LiveActivity"

    public enum Header {
        /// The channel a read or delete is about; a create's answer carries the new channel's.
        public static let channelID = "apns-channel-id"
        /// "A canonical UUID that's the unique ID for the request", echoed in the answer.
        public static let requestID = "apns-request-id"
    }

    /// `/1/apps/<bundle id>/channels`: create (POST), read (GET) and delete (DELETE).
    public static func channelsPath(bundleID: String) -> String { "/1/apps/\(bundleID)/channels" }
    /// `/1/apps/<bundle id>/all-channels`: list (GET).
    public static func allChannelsPath(bundleID: String) -> String { "/1/apps/\(bundleID)/all-channels" }

    /// What a `:path` under `/1/apps/` names, or nil for any other path.
    public enum Resource: Equatable, Sendable {
        case channels(bundleID: String)
        case allChannels(bundleID: String)
        /// Under `/1/apps/` but neither of the two (answered 404 BadPath).
        case unknown
    }

    public static func resource(path: Substring) -> Resource? {
        guard path.hasPrefix("/1/apps/") else { return nil }
        let rest = path.dropFirst("/1/apps/".count)
        guard let slash = rest.firstIndex(of: "/") else { return .unknown }
        let bundle = String(rest[..<slash])
        guard !bundle.isEmpty else { return .unknown }
        switch rest[rest.index(after: slash)...] {
        case "channels": return .channels(bundleID: bundle)
        case "all-channels": return .allChannels(bundleID: bundle)
        default: return .unknown
        }
    }

    /// Whether `id` looks like a channel id: base64 text ("The channel ID is a base64-encoded
    /// string"), standard or URL-safe alphabet, padded or not, at most `maxChannelIDLength` characters.
    /// A client checks it before sending so a pasted id with a stray character fails with a clear
    /// message; the simulator answers 400 BadChannelId for one that fails it.
    public static func isPlausibleChannelID(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= maxChannelIDLength else { return false }
        var padding = 0
        for c in id.utf8 {
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                if padding > 0 { return false }  // '=' only at the end
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 { return false }
            default:
                return false
            }
        }
        return true
    }

    /// Apple's BadChannelId: "The apns-channel-id header isn't properly encoded, or it's greater than the
    /// allowed length." Apple does not state the length; this bound (far above the ids APNs issues, 24
    /// to 44 characters) is the simulator's and the client's.
    public static let maxChannelIDLength = 256
}

/// A channel's `message-storage-policy`: what APNs keeps for a device that is offline when a broadcast
/// is sent on the channel.
public enum APNsChannelStoragePolicy: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// 0: nothing is stored: a device that is offline misses the broadcast.
    case noStorage = 0
    /// 1: the most recent message is stored and delivered when the device is back.
    case mostRecent = 1

    /// The command-line spelling (`--storage-policy no-storage|most-recent`).
    public var name: String {
        switch self {
        case .noStorage: "no-storage"
        case .mostRecent: "most-recent"
        }
    }

    public init?(name: String) {
        guard let p = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = p
    }

    public var description: String { "\(name) (\(rawValue))" }
}

/// The reasons APNs gives for channel requests it refuses (besides the provider API's authentication,
/// path, method, rate and server reasons in `APNsReason`, which these endpoints share). Texts are
/// Apple's ("Handling error responses from APNs").
public enum APNsChannelReason: String, Sendable, CaseIterable, CustomStringConvertible {
    /// "The apns-channel-id header is missing."
    case missingChannelId = "MissingChannelId"
    /// "The apns-channel-id header isn't properly encoded, or it's greater than the allowed length."
    case badChannelId = "BadChannelId"
    /// "The apns-channel-id header used in the request doesn't exist." Channels belong to one
    /// environment: a sandbox channel is unknown in production, and the other way round.
    case channelNotRegistered = "ChannelNotRegistered"
    /// "You have reached the maximum channel limit for your application."
    case cannotCreateChannelConfig = "CannotCreateChannelConfig"
    /// "The apns-push-type attribute is set to an incorrect value. The only allowed value is LiveActivity."
    case invalidPushType = "InvalidPushType"
    /// The push-type is missing.
    case missingPushType = "MissingPushType"
    /// Broadcast capability is not enabled for the app.
    case featureNotEnabled = "FeatureNotEnabled"
    /// The create body's `message-storage-policy` is absent or not 0 or 1. Apple's table, as far as
    /// the material at hand shows, names no reason for it; this is the simulator's word, and the
    /// client treats it as any other refusal.
    case badMessageStoragePolicy = "BadMessageStoragePolicy"

    /// The status the simulator answers with. Apple's table pairs the channel-id and push-type reasons
    /// with 400; for ChannelNotRegistered the material at hand does not show the status, and the
    /// simulator answers 404 (a resource that is not there). The client decides on the reason, never on
    /// the status, so nothing depends on it.
    public var status: Int {
        switch self {
        case .channelNotRegistered: 404
        case .featureNotEnabled: 403
        default: 400
        }
    }

    public var description: String { "\(status) \(rawValue)" }
}
