/// Apple's channel management API for broadcast push (iOS 18): create, read, list and delete the
/// channels a Live Activity subscribes to. Shared by the client (`ChannelManagementClient`, used by
/// `apns-pipeline channel` and by the sender to learn a channel's storage policy) and the HTTP/2
/// simulator, so both read the contract from one place.
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
/// - Create: `POST /1/apps/<bundleId>/channels` with the body fields `message-storage-policy` ("Specify
///   `0` for No Message Stored. Specify `1` for Most Recent Message Stored.") and `push-type` ("Allowed
///   value is `LiveActivity`"), both "Required"; "The HTTP status code for a successul request is 201",
///   with `apns-channel-id`: "A base64-encoded string that identifies the newly created channel."
///   "Message storage policy configured as part of the request can't be modified later."
/// - Read: `GET /1/apps/<bundleId>/channels` with `apns-channel-id`; 200 and a body whose
///   `message-storage-policy` is "The storage policy configured at channel creation … Value `0` indicates
///   No Message Stored. Value `1` indicates Most Recent Message Stored."
/// - Delete: `DELETE` on the same path with `apns-channel-id`; 204. List: `GET
///   /1/apps/<bundleId>/all-channels`; 200 and `channels`, "List of all the base64-encoded channel
///   identifiers for the topic."
/// - `apns-request-id` (optional): "A canonical UUID that's the unique ID for this request", echoed.
/// - "Channels can't be shared across environments … Also, don't make assumptions on the channel ID size."
///
/// The quotes are Apple's text (the page as the public mirrors of Apple's documentation hold it). The
/// client stays liberal in what it reads (200 or 201 for a create, the id from a JSON body when the header
/// is absent; 200 or 204 for a delete), as it was before the whole page could be read.
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
/// is sent on the channel. Apple ("Sending channel management requests to APNs"): "The message storage
/// policy of the channel determines if the channel stores deferred messages for offline devices. There
/// are two available options: No Message Storage and Most Recent Message Stored. For activities with
/// frequent updates like sports scores, use No Message Storage, which allows a higher publishing budget.
/// For activities with infrequent updates, such as event tracking and flight updates, use Most Recent
/// Message Stored." It "can't be modified later", so what a channel read says stays true for the channel's
/// life (`ChannelPolicies` caches it). What it means for a broadcast's `apns-expiration`:
/// ``APNsBroadcastExpiration``.
public enum APNsChannelStoragePolicy: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// 0, No Message Stored: nothing is stored; a device that is offline misses the broadcast. A
    /// broadcast on it must say `apns-expiration: 0`.
    case noStorage = 0
    /// 1, Most Recent Message Stored: "Messages in Most Recent Message store for a maximum duration of 8
    /// hours."
    case mostRecent = 1

    /// The command-line and job spelling (`--storage-policy no-storage|most-recent`, a job's
    /// `storage_policy`).
    public var name: String {
        switch self {
        case .noStorage: "no-storage"
        case .mostRecent: "most-recent"
        }
    }

    /// Apple's name of the policy.
    public var appleName: String {
        switch self {
        case .noStorage: "No Message Stored"
        case .mostRecent: "Most Recent Message Stored"
        }
    }

    public init?(name: String) {
        guard let p = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = p
    }

    public var description: String { "\(name) (\(rawValue))" }
}

/// The reasons APNs gives for channel and broadcast requests it refuses that are not the provider API's
/// (`APNsReason` has those: authentication, path, method, rate, server), with their texts and statuses as
/// Apple's table lists them (Apple, "Handling error responses from Apple Push Notification service": every
/// one of these is `400`).
public enum APNsChannelReason: String, Sendable, CaseIterable, CustomStringConvertible {
    /// "The feature isn't enabled for this topic. Refer to Setting up broadcast push notifications to
    /// enable broadcast capabilities."
    case featureNotEnabled = "FeatureNotEnabled"
    /// "The apns-channel-id header is missing."
    case missingChannelId = "MissingChannelId"
    /// "The apns-channel-id header isn't properly encoded, or it's greater than the allowed length."
    case badChannelId = "BadChannelId"
    /// "The apns-channel-id header used in the request doesn't exist." Channels belong to one
    /// environment: a sandbox channel is unknown in production, and the other way round.
    case channelNotRegistered = "ChannelNotRegistered"
    /// "The JSON Request payload contained an unrecognizable attribute." (a channel create's body)
    case badRequestParams = "BadRequestParams"
    /// "The JSON Request payload is unparseable." (a channel create's body)
    case badRequestPayload = "BadRequestPayload"
    /// "The apns-push-type attribute is missing."
    case missingPushType = "MissingPushType"
    /// "You have reached the maximum channel limit for your application. Delete channels that you no
    /// longer use."
    case cannotCreateChannelConfig = "CannotCreateChannelConfig"

    /// Apple's table pairs each of them with 400.
    public var status: Int { 400 }

    public var description: String { "\(status) \(rawValue)" }
}
