import APNsProtocol

/// One accepted notification (answered 200), as the HTTP/2 simulator records it: the binary
/// simulator's NDJSON fields (`id` and `cmd` are null: HTTP/2 has no notification identifier or
/// command byte) plus the HTTP/2 request's own.
public struct HTTP2Record: Sendable, Hashable, Codable {
    /// Milliseconds since 1970-01-01 UTC.
    public var time: Int64
    /// Connection number, counted from 1 per simulator.
    public var connection: Int
    /// HTTP/2 stream id of the request.
    public var stream: Int
    /// The app's bundle id: the certificate's topic, or `apns-topic` without its push-type suffix.
    public var app: String
    public var token: String
    /// FNV-1a 64 of the payload bytes, in hex (as the binary simulator's).
    public var payloadHash: String
    /// The payload's top-level `jid`, when present.
    public var jobID: String?
    /// `apns-id` as sent, or the one the simulator made when the request had none.
    public var apnsID: String
    public var collapseID: String?
    public var pushType: String?
    public var priority: Int?
    public var expiration: Int64?
    /// `token:<team>/<key id>` or `cert:<topic>`.
    public var auth: String
    /// A broadcast (`POST /4/broadcasts/apps/<bundle id>`): its channel (then `token` is empty and
    /// `apnsID` is the request's `apns-request-id`), nil for a device's notification.
    public var channel: String?
    /// A broadcast: the devices subscribed to its channel, all reached by this one request.
    public var reached: Int?

    enum CodingKeys: String, CodingKey {
        case time = "t"
        case connection = "conn"
        case app, token
        case payloadHash = "payload_hash"
        case jobID = "job"
        case apnsID = "apns_id"
        case collapseID = "collapse_id"
        case pushType = "push_type"
        case priority, expiration, auth, stream, channel, reached
    }
}

/// An accepted request as the connection knows it, before any of it becomes a String: the NDJSON
/// line is written from these values (this runs for every accepted notification), and an
/// `HTTP2Record` is made only when records are kept in memory.
struct AcceptedRequest {
    var time: Int64
    var connection: Int
    var stream: Int
    var app: String
    var token: DeviceToken
    var payloadHash: UInt64
    var jobID: String?
    var apnsID: String
    var collapseID: String?
    var pushType: String?
    var priority: Int?
    var expiration: Int64?
    var auth: String
    /// A broadcast's channel and the devices it reached (nil for a device's notification, whose line
    /// is unchanged).
    var broadcast: (channel: String, reached: Int)?

    /// FNV-1a 64 of the payload: the binary simulator's `payload_hash` (`PayloadFacts.hash`).
    static func hash(_ payload: [UInt8]) -> UInt64 { FNV1a64.hash(payload) }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    var record: HTTP2Record {
        var hash: [UInt8] = []
        Self.appendHex(payloadHash, &hash)
        return HTTP2Record(
            time: time, connection: connection, stream: stream, app: app, token: broadcast == nil ? token.hex : "",
            payloadHash: String(decoding: hash, as: UTF8.self), jobID: jobID, apnsID: apnsID, collapseID: collapseID,
            pushType: pushType, priority: priority, expiration: expiration, auth: auth, channel: broadcast?.channel,
            reached: broadcast?.reached)
    }

    /// The NDJSON line: the binary simulator's fields (`id` and `cmd` null) and the HTTP/2 ones.
    func appendLine(to out: inout [UInt8]) {
        out.append(contentsOf: #"{"t":"#.utf8)
        Self.appendDecimal(time, &out)
        out.append(contentsOf: #","conn":"#.utf8)
        Self.appendDecimal(Int64(connection), &out)
        out.append(contentsOf: #","app":"#.utf8)
        Self.appendString(app, &out)
        out.append(contentsOf: #","token":""#.utf8)
        if broadcast == nil {
            token.withBytes { raw in
                for byte in raw {
                    out.append(Self.hexDigits[Int(byte >> 4)])
                    out.append(Self.hexDigits[Int(byte & 0x0F)])
                }
            }
        }
        out.append(contentsOf: #"","id":null,"cmd":null,"payload_hash":""#.utf8)
        Self.appendHex(payloadHash, &out)
        out.append(contentsOf: #"","job":"#.utf8)
        Self.optional(jobID, &out)
        out.append(contentsOf: #","apns_id":"#.utf8)
        Self.appendString(apnsID, &out)
        out.append(contentsOf: #","collapse_id":"#.utf8)
        Self.optional(collapseID, &out)
        out.append(contentsOf: #","push_type":"#.utf8)
        Self.optional(pushType, &out)
        out.append(contentsOf: #","priority":"#.utf8)
        if let priority { Self.appendDecimal(Int64(priority), &out) } else { out.append(contentsOf: "null".utf8) }
        out.append(contentsOf: #","expiration":"#.utf8)
        if let expiration { Self.appendDecimal(expiration, &out) } else { out.append(contentsOf: "null".utf8) }
        out.append(contentsOf: #","auth":"#.utf8)
        Self.appendString(auth, &out)
        out.append(contentsOf: #","stream":"#.utf8)
        Self.appendDecimal(Int64(stream), &out)
        if let broadcast {
            out.append(contentsOf: #","channel":"#.utf8)
            Self.appendString(broadcast.channel, &out)
            out.append(contentsOf: #","reached":"#.utf8)
            Self.appendDecimal(Int64(broadcast.reached), &out)
        }
        out.append(contentsOf: "}\n".utf8)
    }

    /// 16 lower-case hex digits, zero-padded (as `PayloadFacts.hash` writes them).
    static func appendHex(_ value: UInt64, _ out: inout [UInt8]) {
        for shift in stride(from: 60, through: 0, by: -4) {
            out.append(hexDigits[Int((value >> UInt64(shift)) & 0xF)])
        }
    }

    /// Decimal digits (a String of up to 15 bytes is stored inline: no allocation).
    static func appendDecimal(_ value: Int64, _ out: inout [UInt8]) {
        out.append(contentsOf: String(value).utf8)
    }

    /// A JSON string: printable ASCII without a quote or a backslash (topics, ids, UUIDs: nearly always) copied
    /// as is, anything else through `JSONWriter` (whose generic sink is not specialized here).
    static func appendString(_ s: String, _ out: inout [UInt8]) {
        let plain = RequestHeaderBlock.allBytes(of: s) {
            $0 >= 0x20 && $0 <= 0x7E && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\")
        }
        guard plain else {
            JSONWriter.writeString(s, into: &out)
            return
        }
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: s.utf8)
        out.append(UInt8(ascii: "\""))
    }

    private static func optional(_ s: String?, _ out: inout [UInt8]) {
        if let s { appendString(s, &out) } else { out.append(contentsOf: "null".utf8) }
    }
}

/// Counts an operator or a test can read: on exit, on SIGUSR1, or through `HTTP2Simulator.totals`.
public struct HTTP2SimulatorTotals: Sendable, Equatable, Encodable {
    /// Responses by HTTP status ("200", "400", …).
    public var byStatus: [Int: Int] = [:]
    /// Error responses by reason ("BadDeviceToken", …).
    public var byReason: [String: Int] = [:]
    public var connections = 0
    public var refusedConnections = 0
    public var handshakeFailures = 0
    /// Streams answered RST_STREAM REFUSED_STREAM (beyond SETTINGS_MAX_CONCURRENT_STREAMS).
    public var refusedStreams = 0
    public var goAways = 0
    public var abruptCloses = 0
    /// Requests answered RST_STREAM INTERNAL_ERROR (`reset_stream_rate`).
    public var resetStreams = 0
    /// Requests left unanswered (`never_answer_tokens`).
    public var unansweredStreams = 0
    /// Channel management answers by operation and outcome ("create 201", "get ChannelNotRegistered", …);
    /// kept apart from `byStatus`, which counts notifications.
    public var channelAnswers: [String: Int] = [:]
    /// Broadcasts answered 200 (also in `byStatus`), and the devices they reached in all.
    public var broadcasts = 0
    public var broadcastDevicesReached = 0

    public var accepted: Int { byStatus[200, default: 0] }

    enum CodingKeys: String, CodingKey {
        case accepted
        case byStatus = "by_status"
        case byReason = "by_reason"
        case connections
        case refusedConnections = "refused_connections"
        case handshakeFailures = "handshake_failures"
        case refusedStreams = "refused_streams"
        case goAways = "goaways"
        case abruptCloses = "abrupt_closes"
        case resetStreams = "reset_streams"
        case unansweredStreams = "unanswered_streams"
        case channelAnswers = "channel_answers"
        case broadcasts
        case broadcastDevicesReached = "broadcast_devices_reached"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(accepted, forKey: .accepted)
        try c.encode(Dictionary(uniqueKeysWithValues: byStatus.map { (String($0.key), $0.value) }), forKey: .byStatus)
        try c.encode(byReason, forKey: .byReason)
        try c.encode(connections, forKey: .connections)
        try c.encode(refusedConnections, forKey: .refusedConnections)
        try c.encode(handshakeFailures, forKey: .handshakeFailures)
        try c.encode(refusedStreams, forKey: .refusedStreams)
        try c.encode(goAways, forKey: .goAways)
        try c.encode(resetStreams, forKey: .resetStreams)
        try c.encode(unansweredStreams, forKey: .unansweredStreams)
        try c.encode(abruptCloses, forKey: .abruptCloses)
        try c.encode(channelAnswers, forKey: .channelAnswers)
        try c.encode(broadcasts, forKey: .broadcasts)
        try c.encode(broadcastDevicesReached, forKey: .broadcastDevicesReached)
    }
}
