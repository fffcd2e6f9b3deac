import APNsProtocol
import Crypto

/// What one notification becomes on the wire, as plain values (the driver turns them into HPACK
/// headers). Pure, so the header rules are tested without a connection.
struct HTTP2Request: Equatable, Sendable {
    /// The device: `:path` is `/3/device/` + its hex, written straight into the header block (``devicePath(_:)``
    /// as a String is for tests and logs; a String per request was an allocation and a copy per job).
    var token: DeviceToken
    var topic: String
    /// `apns-id`'s 16 bytes (``apnsID(jobID:)``), inline and formatted into the header block as it is written.
    var id: UUIDBytes
    var expiration: String
    var priority: String
    var pushType: APNsPushType
    var collapseID: String?
    /// A broadcast's channel (`POST /4/broadcasts/apps/<bundle id>`, then `topic` holds the bundle id the
    /// path names); nil for a device, whose request is as above (no cost to it: one nil field). What a
    /// broadcast request carries beyond the shared headers ("Sending broadcast push notification requests
    /// to APNs", `APNsBroadcast`): `:path` names the app, `apns-channel-id` the channel; no `apns-topic`
    /// (the bundle id is in the path), and `apns-request-id` in place of `apns-id`.
    var channel: String?

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
        let type = n.pushType ?? memo.inferredPushType(n.payload)
        guard !n.payload.isEmpty else { throw .payloadEmpty }
        if n.payload.count > type.maxPayloadBytes {
            // A broadcast's own limit is 5120 bytes ("Sending broadcast push notification requests to APNs",
            // `APNsBroadcast.maxPayloadBytes`); looked at only past the push type's, so a device push pays
            // nothing for it.
            guard n.channel != nil, n.payload.count <= APNsBroadcast.maxPayloadBytes else { throw .payloadTooLarge }
        }
        if let c = n.collapseID, c.utf8.count > APNsHeader.maxCollapseIDBytes || !Self.isFieldValue(c) { throw .badCollapseID }
        token = n.token
        // Push types such as voip need a suffixed topic; an app configured with it already keeps it. A
        // broadcast's "topic" is the bundle id its path names (no apns-topic is sent for it).
        if let channel = n.channel {
            // A broadcast carries a Live Activity only (the decoder makes sure; a notification built by
            // hand with another type is refused here, as APNs would).
            guard type == APNsBroadcast.pushType else { throw .invalidPushType }
            self.channel = channel.value
            topic = APNsBroadcast.bundleID(app: n.app)
        } else if let suffix = type.topicSuffix, !n.app.hasSuffix(suffix) {
            topic = n.app + suffix
        } else {
            topic = n.app
        }
        id = n.withJobIDBytes { Self.apnsIDBytes(jobIDBytes: $0) }
        expiration = memo.expiration(n.expiry)
        priority =
            switch n.priority {
            case .immediate: "10"
            case .conservePower: "5"
            case .powerFirst: "1"
            }
        pushType = type
        collapseID = n.collapseID
    }

    var path: String { channel != nil ? APNsBroadcast.path(bundleID: topic) : Self.devicePath(token) }
    var apnsID: String { id.withBytes { APNsID.string(uuidBytes: $0) } }

    /// The 16 bytes of a UUID, in order, as two words (no allocation, and Equatable, unlike a tuple).
    struct UUIDBytes: Equatable, Sendable {
        var high: UInt64
        var low: UInt64

        func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
            var be = (high.bigEndian, low.bigEndian)
            return withUnsafeBytes(of: &be) { body($0) }
        }
    }

    /// A UUID made from SHA-256 of the job id (version 8, "custom"): the same job always carries the
    /// same `apns-id`, so a resent request is recognisably the same notification in Apple's and our logs.
    static func apnsID(jobID: String) -> String {
        var id = jobID
        return id.withUTF8 { apnsIDBytes(jobIDBytes: UnsafeRawBufferPointer($0)) }.withBytes { APNsID.string(uuidBytes: $0) }
    }

    /// The bytes of ``apnsID(jobID:)``, from the id's UTF-8.
    static func apnsIDBytes(jobIDBytes: UnsafeRawBufferPointer) -> UUIDBytes {
        // Hashed in place: copying the id and the digest into arrays first was two allocations per request.
        var sha = SHA256()
        sha.update(bufferPointer: jobIDBytes)
        let digest = sha.finalize()
        return digest.withUnsafeBytes { hash in
            var high: UInt64 = 0
            var low: UInt64 = 0
            for i in 0..<8 {
                high = high << 8 | UInt64(hash[i])
                low = low << 8 | UInt64(hash[8 + i])
            }
            // Version 8 (byte 6's high nibble) and the RFC 9562 variant (byte 8's top two bits).
            high = (high & ~0x0000_0000_0000_F000) | 0x0000_0000_0000_8000
            low = (low & ~0xC000_0000_0000_0000) | 0x8000_0000_0000_0000
            return UUIDBytes(high: high, low: low)
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

    /// `/3/device/<lower-case hex digits>` (64 for today's 32-byte tokens; a token's size varies, Apple:
    /// "Do not hard-code their size"), written in one allocation (the prefix + `token.hex` took three
    /// per request).
    static func devicePath(_ token: DeviceToken) -> String {
        let count = devicePathCount(token)
        return String(unsafeUninitializedCapacity: count) { out in
            writeDevicePath(token, into: UnsafeMutableRawBufferPointer(out))
            return count
        }
    }

    /// The length of `token`'s ``devicePath(_:)``.
    @inline(__always)
    static func devicePathCount(_ token: DeviceToken) -> Int { devicePathPrefixCount + token.hexCount }

    private static let devicePathPrefixCount = APNsHeader.devicePathPrefix.utf8.count

    /// ``devicePath(_:)`` into the first ``devicePathCount(_:)`` bytes of `out`.
    static func writeDevicePath(_ token: DeviceToken, into out: UnsafeMutableRawBufferPointer) {
        var i = 0
        for b in APNsHeader.devicePathPrefix.utf8 {
            out[i] = b
            i += 1
        }
        token.writeHex(into: UnsafeMutableRawBufferPointer(rebasing: out[i...]))
    }

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

extension PushNotification {
    /// The `apns-id` (a broadcast's `apns-request-id`) its HTTP/2 requests carry: made from SHA-256 of
    /// the job id (``HTTP2Request/apnsID(jobID:)``), so the same job always has the same one. APNs
    /// echoes it in its answer. For the outcomes stream; the request itself formats it in place.
    public var apnsID: String {
        withJobIDBytes { HTTP2Request.apnsIDBytes(jobIDBytes: $0) }.withBytes { APNsID.string(uuidBytes: $0) }
    }
}
