/// Turns a `Payload` into the compact JSON bytes of item 2, within a size limit.
///
/// "The maximum size allowed for a notification payload is 2 kilobytes; Apple Push Notification service
/// refuses any notification that exceeds this limit." The limit is per format and configurable
/// (2048 by default; 4096 would suit an HTTP/2 transport).
public struct PayloadEncoder: Sendable {
    public var limit: Int
    /// When the payload is too large, shorten the alert's message text and end it with "…" so that it
    /// fits, instead of failing. Cuts fall between characters (grapheme clusters), so neither a
    /// multi-byte UTF-8 sequence nor a JSON escape is ever split.
    public var truncatesAlertBody: Bool

    /// U+2026 HORIZONTAL ELLIPSIS: 3 bytes of UTF-8, no escaping.
    public static let ellipsis: Character = "\u{2026}"

    public init(limit: Int = PayloadLimits.default.command2, truncatesAlertBody: Bool = false) {
        self.limit = limit
        self.truncatesAlertBody = truncatesAlertBody
    }

    public func encode(_ payload: Payload) throws(PayloadError) -> [UInt8] {
        var out: [UInt8] = []
        try encode(payload, into: &out)
        return out
    }

    /// Appends the encoded payload to `out` (reuse `out` to avoid allocating per payload).
    public func encode(_ payload: Payload, into out: inout [UInt8]) throws(PayloadError) {
        let start = out.count
        JSONWriter.write(payload.json, into: &out)
        let size = out.count - start
        if size <= limit { return }
        out.removeSubrange(start...)
        guard truncatesAlertBody, let body = payload.aps.alert?.body else {
            throw .tooLarge(size: size, limit: limit)
        }
        // Size of everything but the body's characters: the same payload with an empty body.
        var emptied = payload
        emptied.aps.alert = Self.replacingBody(of: payload.aps.alert!, with: "")
        let fixed = emptied.json.serialized().count
        let room = limit - fixed - 3  // 3: the ellipsis
        guard room >= 0 else { throw .tooLarge(size: size, limit: limit) }
        var used = 0
        var kept = ""
        for character in body {
            var n = 0
            for byte in character.utf8 { n += JSONWriter.escapedLength(byte) }
            if used + n > room { break }
            used += n
            kept.append(character)
        }
        kept.append(Self.ellipsis)
        var truncated = payload
        truncated.aps.alert = Self.replacingBody(of: payload.aps.alert!, with: kept)
        JSONWriter.write(truncated.json, into: &out)
        assert(out.count - start <= limit)
    }

    private static func replacingBody(of alert: Alert, with body: String) -> Alert {
        switch alert {
        case .text: return .text(body)
        case .dictionary(var d):
            d.body = body
            return .dictionary(d)
        }
    }
}
