/// The `apns-push-type` header values Apple documents ("Sending notification requests to APNs"), with
/// the topic suffix each requires and its payload limit.
public enum APNsPushType: String, Sendable, Hashable, CaseIterable {
    case alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk
    case widgets, controls

    /// "For Voice over Internet Protocol (VoIP) notifications, the maximum payload size is 5 KB
    /// (5120 bytes). For all other remote notifications, the maximum payload size is 4 KB (4096 bytes)."
    public var maxPayloadBytes: Int { self == .voip ? 5120 : 4096 }

    /// The suffix Apple requires on `apns-topic` for this push type (nil: the bare bundle id, except
    /// `mdm`, whose topic is the MDM certificate's own topic and is not checked).
    public var topicSuffix: String? {
        switch self {
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .location: ".location-query"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        case .alert, .background, .mdm: nil
        }
    }

    /// True for the push types Apple serves over token-based connections only ("Sending notification
    /// requests to APNs": "The location push type supports only token-based authentication"; Live
    /// Activities: "use them establish a token-based connection to APNs", and "Certificate-based
    /// authentication is not supported for these APNs pushes"). "Certificate-based connection supports only
    /// a subset of push types and token-based connection supports all push-types."
    public var requiresTokenAuthentication: Bool { self == .liveactivity || self == .location }

    /// The bundle id a topic names for this push type (the topic without the push type's suffix);
    /// nil when the topic lacks a suffix the push type requires.
    public func bundleID(ofTopic topic: Substring) -> Substring? {
        guard let suffix = topicSuffix else { return topic }
        guard topic.hasSuffix(suffix), topic.count > suffix.count else { return nil }
        return topic.dropLast(suffix.count)
    }

    public func bundleID(fromTopic topic: String) -> String? { bundleID(ofTopic: Substring(topic)).map(String.init) }
}
