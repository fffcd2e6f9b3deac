/// The JSON body of an unsuccessful provider API response: `{"reason":"BadDeviceToken"}`, and for 410
/// `{"reason":"Unregistered","timestamp":1700000000000}`. Apple: "timestamp — The time, in milliseconds
/// since Epoch, at which APNs confirmed the token was no longer valid for the topic. This key is included
/// only when the error in the :status field is 410." The same body may ride in a GOAWAY frame's debug data.
public struct APNsErrorBody: Sendable, Hashable, CustomStringConvertible {
    /// The reason as sent: kept as text so a reason Apple adds later still reaches the caller.
    public var reasonText: String
    /// Milliseconds since 1970 (410 only).
    public var timestamp: Int64?

    public init(reasonText: String, timestamp: Int64? = nil) {
        self.reasonText = reasonText
        self.timestamp = timestamp
    }

    public init(reason: APNsReason, timestamp: Int64? = nil) {
        self.init(reasonText: reason.rawValue, timestamp: timestamp)
    }

    /// The documented reason, or nil for one this code does not know.
    public var reason: APNsReason? { APNsReason(rawValue: reasonText) }

    public var description: String {
        timestamp.map { "\(reasonText) (timestamp \($0))" } ?? reasonText
    }

    /// Writes the body (compact, `reason` first) into `out`.
    public func encode(into out: inout some ByteSink) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(reasonText.utf8.count + 40)
        bytes.append(contentsOf: #"{"reason":"#.utf8)
        JSONWriter.writeString(reasonText, into: &bytes)
        if let timestamp {
            bytes.append(contentsOf: #","timestamp":"#.utf8)
            bytes.append(contentsOf: String(timestamp).utf8)
        }
        bytes.append(UInt8(ascii: "}"))
        bytes.withUnsafeBytes { out.putBytes($0) }
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    public enum DecodeError: Error, Equatable, Sendable, CustomStringConvertible {
        case notJSON(JSONParser.Error)
        case notAnObject
        case noReason
        case badTimestamp

        public var description: String {
            switch self {
            case .notJSON(let e): "APNs error body: \(e)"
            case .notAnObject: "APNs error body: not a JSON object"
            case .noReason: "APNs error body: no string \"reason\""
            case .badTimestamp: "APNs error body: \"timestamp\" is not a whole number"
            }
        }
    }

    /// Reads a response body (or GOAWAY debug data). Unknown keys are ignored, as a client must; a
    /// timestamp written as a string of digits is accepted too (be liberal in what you accept).
    public init(decoding bytes: some Collection<UInt8>) throws(DecodeError) {
        let value: JSONValue
        do { value = try JSONParser.parse(bytes) } catch { throw .notJSON(error) }
        guard value.objectValue != nil else { throw .notAnObject }
        guard let reason = value["reason"]?.stringValue else { throw .noReason }
        var timestamp: Int64?
        switch value["timestamp"] {
        case nil, .null?: break
        case .number(let digits)?, .string(let digits)?:
            guard let ms = Int64(digits) else { throw .badTimestamp }
            timestamp = ms
        default: throw .badTimestamp
        }
        self.init(reasonText: reason, timestamp: timestamp)
    }
}
