/// A broadcast channel's id: the base64 text APNs issued when the channel was created
/// (`apns-pipeline channel create`, "Sending channel management requests to APNs"), as a job names it in
/// `channel`. Checked for shape only (``APNsChannelManagement/isPlausibleChannelID(_:)``): whether the
/// channel exists is APNs' answer (`ChannelNotRegistered`).
public struct BroadcastChannelID: Hashable, Sendable, CustomStringConvertible {
    /// The id exactly as given: base64 is case-sensitive, so it is never normalised.
    public let value: String

    /// nil when `value` is not base64 text of at most ``APNsChannelManagement/maxChannelIDLength`` characters.
    public init?(_ value: String) {
        guard APNsChannelManagement.isPlausibleChannelID(value) else { return nil }
        self.value = value
    }

    public var description: String { value }
}

/// Whom one notification is for: a device (`POST /3/device/<token>`) or everyone subscribed to a
/// broadcast channel (`POST /4/broadcasts/apps/<bundle id>`). Carried from the job through the gate and
/// the transport to the settle, so broadcast is a second kind of recipient, not a second pipeline.
public enum Recipient: Hashable, Sendable, CustomStringConvertible {
    case device(DeviceToken)
    case channel(BroadcastChannelID)

    public var description: String {
        switch self {
        case .device(let token): "token \(token.hex)"
        case .channel(let channel): "channel \(channel.value)"
        }
    }
}

/// Apple's broadcast push request ("Sending broadcast push notification requests to APNs", iOS 18).
///
/// What the page says (quoted from the page as the public mirrors of Apple's documentation hold it):
/// - "Starting with iOS 18 and iPadOS 18, devices can subscribe on channels to receive updates for Live
///   Activities. You can send a single push notification to APNs on the channel to update a Live
///   Activity event to a large audience."
/// - "Use HTTP/2 and TLS 1.2 or later to establish a connection between your provider server and one of
///   the following servers: Development/Sandbox Environment: api.sandbox.push.apple.com:443 Production
///   Environment: api.push.apple.com:443" — the provider API's own hosts, so a broadcast goes on the
///   app's existing connections.
/// - "Upon receiving your server's POST request, APNs validates the request using either the provided
///   authentication token or your server's certificate. If authentication succeeds, APNs then validates
///   the channel ID you're using to send the push notification. After channel validation, APNs tries to
///   send your JSON payload to all the devices subscribed to the channel."
/// - "If APNs can't deliver a notification immediately, it may store the notification based on the
///   channel's message storage policy specified during channel creation. Notifications with Medium and
///   Low `apns-priority` might get grouped and delivered in bursts to the person's device."
/// - Its header table: `:method` `POST`; `:path` "`/4/broadcasts/apps/<bundle ID>`"; `authorization`
///   "Required for token-based authentication"; `apns-request-id` "Optional … The request identifier
///   must be encoded as a UUID string"; `apns-channel-id` "Required … a base64-encoded string that
///   identifies the channel"; `apns-expiration` "Required" (its rule against the channel's storage policy
///   is ``APNsBroadcastExpiration``); `apns-priority` "Required … Specify `10` to send the notification
///   immediately. Specify `5` to send the notification based on power considerations on the user's
///   device. Specify 1 to prioritize the device's power considerations over all other factors for
///   delivery, and prevent awakening the device."; `apns-push-type` "Required … The allowed value is
///   `Liveactivity`".
/// - "Don't use a compressed JSON payload, and the payload is limited to a maximum size of 5 KB (5,120
///   bytes)."
/// - A success is "`:status` 200" with `apns-request-id` and `apns-unique-id`.
///
/// No `apns-topic` (the path names the app; Apple's `TopicDisallowed` for a broadcast: "Ensure that no
/// push type suffix is added to the bundle ID"), the request named by `apns-request-id` rather than
/// `apns-id` (Apple's samples show both; the header table lists `apns-request-id`), and token
/// authentication only: the page allows a certificate, but a broadcast carries a Live Activity, and
/// "Starting and updating Live Activities with ActivityKit push notifications" says "Certificate-based
/// authentication is not supported for these APNs pushes".
public enum APNsBroadcast {
    /// The device token a broadcast stands in with where a type keeps one inline (`Job`,
    /// `PushNotification`, the simulator's record): all zeros, the binary interface's drain-probe token,
    /// which no device has. Never sent and never written to Redis: the broadcast path reads the recipient.
    public static let placeholderToken = try! DeviceToken(hex: "0000000000000000000000000000000000000000000000000000000000000000")

    /// The only push type a broadcast carries.
    public static let pushType = APNsPushType.liveactivity

    /// "the payload is limited to a maximum size of 5 KB (5,120 bytes)" — a broadcast's own limit, above
    /// the 4096 bytes of a Live Activity sent to a device.
    public static let maxPayloadBytes = 5120

    /// The priorities a broadcast may carry: 10, 5 and 1 (the header table, above). A Live Activity sent
    /// to a device takes 10 or 5 only ("Set the value for the apns-priority header field to 5 or 10").
    public static let priorities: [APNsPriority] = [.immediate, .throttled, .powerSaving]

    /// What precedes the bundle id in a broadcast's `:path`.
    public static let pathPrefix = "/4/broadcasts/apps/"

    /// `/4/broadcasts/apps/<bundle id>`.
    public static func path(bundleID: String) -> String { pathPrefix + bundleID }

    /// The bundle id a broadcast `:path` names, nil for any other path (or an empty bundle id).
    public static func bundleID(path: Substring) -> Substring? {
        guard path.hasPrefix(pathPrefix) else { return nil }
        let bundle = path.dropFirst(pathPrefix.count)
        guard !bundle.isEmpty, !bundle.contains("/") else { return nil }
        return bundle
    }

    /// The bundle id of an app's topic: a broadcast's path names the app, never a push type's suffixed
    /// topic (an app configured as `com.example.app.push-type.liveactivity` broadcasts as `com.example.app`).
    public static func bundleID(app: String) -> String {
        guard let suffix = pushType.topicSuffix, app.hasSuffix(suffix), app.count > suffix.count else { return app }
        return String(app.dropLast(suffix.count))
    }

    /// The refusals that are about the channel (Apple's texts, `APNsChannelReason`): a broadcast with
    /// one of them is dead-lettered with it (publish it again once the channel is fixed); nothing is
    /// suppressed, since a channel is not a device.
    public static let channelReasons: [APNsChannelReason] = [.missingChannelId, .badChannelId, .channelNotRegistered]

    /// Whether a bundle id in a broadcast's path carries a push type's topic suffix (APNs answers
    /// `TopicDisallowed`: "Ensure that no push type suffix is added to the bundle ID").
    public static func hasPushTypeSuffix(_ bundleID: Substring) -> Bool {
        APNsPushType.allCases.contains { type in type.topicSuffix.map { bundleID.hasSuffix($0) } ?? false }
    }
}

/// A broadcast request as a server reads it (the simulator): what `APNsBroadcast.validate` found valid.
public struct APNsBroadcastRequest: Sendable, Equatable {
    public var bundleID: String
    public var channelID: String
    /// `apns-request-id` as sent (a canonical UUID), nil when absent.
    public var requestID: String?
    public var priority: APNsPriority?
    public var expiration: Int64?
    public var collapseID: String?
    public var authorization: String?
}

/// Why a broadcast request was refused: the status and `reason` of the answer (an `APNsReason` shared
/// with the provider API, or an `APNsChannelReason`).
public struct APNsBroadcastRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var reason: String

    public init(_ reason: APNsReason) {
        status = reason.status
        self.reason = reason.rawValue
    }

    public init(_ reason: APNsChannelReason) {
        status = reason.status
        self.reason = reason.rawValue
    }

    public var description: String { "\(status) \(reason)" }
}

extension APNsBroadcast {
    /// Checks a broadcast request against the contract above, in the order APNs states ("validates the
    /// request using either the provided authentication token or your server's certificate. If
    /// authentication succeeds, APNs then validates the channel ID"): the method, the path's bundle id
    /// (`TopicDisallowed` with a push type's suffix), the headers' shapes (each once), the required
    /// `apns-push-type` (`MissingPushType`; `liveactivity` only, `InvalidPushType`), `apns-priority` (10, 5
    /// or 1, `BadPriority`) and `apns-expiration` (whole seconds, `BadExpirationDate`), the payload's size
    /// (5120 bytes, `PayloadTooLarge`) and Live Activity shape, and the channel id's presence and encoding
    /// (`MissingChannelId`, `BadChannelId`). Apple marks `apns-priority` and `apns-expiration`
    /// "Required" but lists no reason for their absence: an absent one is answered as an invalid one
    /// (`BadPriority`, `BadExpirationDate`). Whether the channel exists (`ChannelNotRegistered`), the
    /// expiration against its storage policy (``APNsBroadcastExpiration/accepts(_:on:)``) and
    /// authentication are the server's to decide.
    public static func validate(
        bundleID: String, method: String?, headers: [(String, String)], payload: [UInt8]
    ) -> Result<APNsBroadcastRequest, APNsBroadcastRefusal> {
        guard method == "POST" else { return .failure(APNsBroadcastRefusal(.methodNotAllowed)) }
        guard !hasPushTypeSuffix(Substring(bundleID)) else { return .failure(APNsBroadcastRefusal(.topicDisallowed)) }
        var seen = Set<String>()
        var duplicate = false
        var value: [String: String] = [:]
        let known: Set<String> = [
            APNsHeader.authorization, APNsHeader.channelID, APNsHeader.requestID, APNsHeader.pushType, APNsHeader.priority,
            APNsHeader.expiration, APNsHeader.collapseID,
        ]
        for (name, v) in headers where known.contains(name) {
            if !seen.insert(name).inserted { duplicate = true }
            value[name] = v
        }
        guard !duplicate else { return .failure(APNsBroadcastRefusal(.duplicateHeaders)) }
        guard let type = value[APNsHeader.pushType] else { return .failure(APNsBroadcastRefusal(APNsChannelReason.missingPushType)) }
        // The table writes "Liveactivity", the samples "liveactivity": the value is read without case.
        guard type.lowercased() == pushType.rawValue else { return .failure(APNsBroadcastRefusal(APNsReason.invalidPushType)) }
        if let id = value[APNsHeader.requestID], !APNsRequestValidator.isCanonicalUUID(id) {
            return .failure(APNsBroadcastRefusal(.badMessageId))
        }
        guard let priorityText = value[APNsHeader.priority], let number = Int(priorityText),
            let priority = APNsPriority(rawValue: number), priorities.contains(priority)
        else { return .failure(APNsBroadcastRefusal(.badPriority)) }
        guard let text = value[APNsHeader.expiration], !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let expiration = Int64(text)
        else { return .failure(APNsBroadcastRefusal(.badExpirationDate)) }
        if let c = value[APNsHeader.collapseID], c.utf8.count > APNsHeader.maxCollapseIDBytes {
            return .failure(APNsBroadcastRefusal(.badCollapseId))
        }
        guard !payload.isEmpty else { return .failure(APNsBroadcastRefusal(.payloadEmpty)) }
        guard payload.count <= maxPayloadBytes else { return .failure(APNsBroadcastRefusal(.payloadTooLarge)) }
        // As for a Live Activity to a device (`APNsRequestValidator`): Apple documents no reason for a
        // payload that breaks the per-event rules; InvalidPushType, as there.
        guard let json = try? JSONParser.parse(payload), let read = try? Payload(json: json),
            (try? LiveActivityPayload.validate(read)) != nil
        else { return .failure(APNsBroadcastRefusal(APNsReason.invalidPushType)) }
        guard let channel = value[APNsHeader.channelID] else { return .failure(APNsBroadcastRefusal(.missingChannelId)) }
        guard APNsChannelManagement.isPlausibleChannelID(channel) else { return .failure(APNsBroadcastRefusal(.badChannelId)) }
        return .success(
            APNsBroadcastRequest(
                bundleID: bundleID, channelID: channel, requestID: value[APNsHeader.requestID], priority: priority, expiration: expiration,
                collapseID: value[APNsHeader.collapseID], authorization: value[APNsHeader.authorization]))
    }
}
