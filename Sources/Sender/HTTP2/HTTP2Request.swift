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
        var memo = Memo()
        try self.init(n, memo: &memo)
    }

    /// What consecutive notifications usually share, worked out once: a campaign's notifications carry
    /// one payload buffer (`JobTemplate`) and one expiry, so its push type is inferred and its expiry
    /// formatted once per batch rather than once per notification.
    struct Memo {
        /// The last payload whose type was inferred, held so that its buffer cannot be freed and its
        /// address reused: a payload at the same address with the same count is then the same bytes.
        private var payload: [UInt8] = []
        private var pushType = APNsPushType.alert
        private var expiry: UInt32 = 0
        private var expiration = "0"

        mutating func inferredPushType(_ bytes: [UInt8]) -> APNsPushType {
            if !bytes.isEmpty, bytes.count == payload.count, Self.sameBuffer(bytes, payload) { return pushType }
            pushType = HTTP2Request.inferredPushType(payload: bytes)
            payload = bytes
            return pushType
        }

        mutating func expiration(_ value: UInt32) -> String {
            if value != expiry {
                expiry = value
                expiration = String(value)
            }
            return expiration
        }

        private static func sameBuffer(_ a: [UInt8], _ b: [UInt8]) -> Bool {
            a.withUnsafeBufferPointer { a in b.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
        }
    }

    /// As `init(_:)`, with what `memo` already knows from the notifications before this one.
    init(_ n: PushNotification, memo: inout Memo) throws(Invalid) {
        let type: APNsPushType
        if let named = n.pushType {
            guard let known = APNsPushType(rawValue: named) else { throw .invalidPushType }
            type = known
        } else {
            type = memo.inferredPushType(n.payload)
        }
        guard !n.payload.isEmpty else { throw .payloadEmpty }
        guard n.payload.count <= type.maxPayloadBytes else { throw .payloadTooLarge }
        if let c = n.collapseID, c.utf8.count > APNsHeader.maxCollapseIDBytes || !Self.isFieldValue(c) { throw .badCollapseID }
        path = Self.devicePath(n.token)
        // Push types such as voip need a suffixed topic; an app configured with it already keeps it.
        if let suffix = type.topicSuffix, !n.app.hasSuffix(suffix) {
            topic = n.app + suffix
        } else {
            topic = n.app
        }
        apnsID = Self.apnsID(jobID: n.jobID)
        expiration = memo.expiration(n.expiry)
        priority =
            switch n.priority {
            case .immediate: "10"
            case .conservePower: "5"
            }
        pushType = type
        collapseID = n.collapseID
    }

    /// A UUID made from SHA-256 of the job id (version 8, "custom"): the same job always carries the
    /// same `apns-id`, so a resent request is recognisably the same notification in Apple's and our logs.
    static func apnsID(jobID: String) -> String {
        // Hashed and formatted in place: copying the id and the digest into arrays first was two
        // allocations per request.
        var id = jobID
        var sha = SHA256()
        id.withUTF8 { sha.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        let digest = sha.finalize()
        return digest.withUnsafeBytes { hash in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { bytes in
                for i in 0..<16 { bytes[i] = hash[i] }
                bytes[6] = (bytes[6] & 0x0F) | 0x80  // version 8
                bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 9562 variant
                return APNsID.string(uuidBytes: UnsafeRawBufferPointer(bytes))
            }
        }
    }

    /// `background` when the payload's `aps` holds nothing but `content-available` (a silent push:
    /// Apple requires that type for it), else `alert`. A payload that does not parse is sent as an
    /// alert: it was validated before it got here, so this only picks a header.
    static func inferredPushType(payload: [UInt8]) -> APNsPushType {
        // Only a payload naming `content-available` can be background. Without those bytes, and
        // without a backslash (an escape could spell the key otherwise), it cannot be: skip the parse,
        // which was a second JSON parse of every payload.
        if !payload.contains(UInt8(ascii: "\\")) && !Self.contains(payload, Self.contentAvailable) { return .alert }
        guard let value = try? JSONParser.parse(payload), let aps = value["aps"]?.objectValue else { return .alert }
        let keys = aps.map(\.key)
        return keys == ["content-available"] ? .background : .alert
    }

    /// `/3/device/<64 lower-case hex digits>`, written in one allocation (the prefix + `token.hex`
    /// took three per request).
    static func devicePath(_ token: DeviceToken) -> String {
        let prefix = APNsHeader.devicePathPrefix.utf8
        return String(unsafeUninitializedCapacity: prefix.count + DeviceToken.hexCount) { out in
            var i = 0
            for b in prefix {
                out[i] = b
                i += 1
            }
            token.withBytes { raw in
                for byte in raw {
                    out[i] = Self.hexDigits[Int(byte >> 4)]
                    out[i + 1] = Self.hexDigits[Int(byte & 0x0F)]
                    i += 2
                }
            }
            return i
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private static let contentAvailable = Array("content-available".utf8)

    private static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard let first = needle.first, haystack.count >= needle.count else { return false }
        var i = 0
        let last = haystack.count - needle.count
        while i <= last {
            if haystack[i] == first && haystack[i..<(i + needle.count)].elementsEqual(needle) { return true }
            i += 1
        }
        return false
    }

    /// What HTTP/2 allows in a header value (RFC 9113 §8.2.1): no NUL, CR or LF, no leading or
    /// trailing space or tab. The transport's own headers are built from validated values, so header
    /// validation is off on the connection; the one free-form value from a job is checked here, where
    /// a bad one is a clear per-job refusal rather than a stream that never opens.
    static func isFieldValue(_ value: String) -> Bool {
        let bytes = value.utf8
        if bytes.contains(where: { $0 == 0 || $0 == 0x0A || $0 == 0x0D }) { return false }
        let blank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
        if let f = bytes.first, blank(f) { return false }
        if let l = bytes.last, blank(l) { return false }
        return true
    }
}
