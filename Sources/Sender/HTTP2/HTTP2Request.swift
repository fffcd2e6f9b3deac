import APNsProtocol
import Crypto

/// What one notification becomes on the wire, as plain values (the driver turns them into HPACK
/// headers). Pure, so the header rules are tested without a connection.
struct HTTP2Request: Equatable, Sendable {
    var path: String
    var topic: String
    var apnsID: String
    var expiration: String
    var priority: String
    var pushType: APNsPushType
    var collapseID: String?

    /// Why a notification is refused before it is sent (validation the server would otherwise do,
    /// at the cost of a request). The reason strings are APNs' own, so counters read the same.
    enum Invalid: Error, Equatable {
        case payloadTooLarge
        case invalidPushType
        case badCollapseID
        case payloadEmpty

        var reason: String {
            switch self {
            case .payloadTooLarge: APNsReason.payloadTooLarge.rawValue
            case .invalidPushType: APNsReason.invalidPushType.rawValue
            case .badCollapseID: APNsReason.badCollapseId.rawValue
            case .payloadEmpty: APNsReason.payloadEmpty.rawValue
            }
        }
    }

    init(_ n: PushNotification) throws(Invalid) {
        let type: APNsPushType
        if let named = n.pushType {
            guard let known = APNsPushType(rawValue: named) else { throw .invalidPushType }
            type = known
        } else {
            type = Self.inferredPushType(payload: n.payload)
        }
        guard !n.payload.isEmpty else { throw .payloadEmpty }
        guard n.payload.count <= type.maxPayloadBytes else { throw .payloadTooLarge }
        if let c = n.collapseID, c.utf8.count > APNsHeader.maxCollapseIDBytes { throw .badCollapseID }
        path = APNsHeader.devicePathPrefix + n.token.hex
        // Push types such as voip need a suffixed topic; an app configured with it already keeps it.
        if let suffix = type.topicSuffix, !n.app.hasSuffix(suffix) {
            topic = n.app + suffix
        } else {
            topic = n.app
        }
        apnsID = Self.apnsID(jobID: n.jobID)
        expiration = String(n.expiry)
        priority = String(n.priority.rawValue)
        pushType = type
        collapseID = n.collapseID
    }

    /// A UUID made from SHA-256 of the job id (version 8, "custom"): the same job always carries the
    /// same `apns-id`, so a resent request is recognisably the same notification in Apple's and our logs.
    static func apnsID(jobID: String) -> String {
        var bytes = Array(SHA256.hash(data: Array(jobID.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80  // version 8
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 9562 variant
        return APNsID.string(uuidBytes: bytes)
    }

    /// `background` when the payload's `aps` holds nothing but `content-available` (a silent push:
    /// Apple requires that type for it), else `alert`. A payload that does not parse is sent as an
    /// alert: it was validated before it got here, so this only picks a header.
    static func inferredPushType(payload: [UInt8]) -> APNsPushType {
        guard let value = try? JSONParser.parse(payload), let aps = value["aps"]?.objectValue else { return .alert }
        let keys = aps.map(\.key)
        return keys == ["content-available"] ? .background : .alert
    }
}
