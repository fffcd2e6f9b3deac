import APNsProtocol

/// Compact sizes counted without writing anything: the size check of every job runs on these, so it
/// allocates nothing (no `Payload.json` tree, no bytes).
///
/// The counts mirror `Payload.json` / `JSONWriter` exactly (key order does not change a size; a body-only
/// alert dictionary is a string; `content-available` is written only when true). `JobsTests` checks them
/// against `PayloadEncoder` on generated payloads, so a change in the encoder shows up as a failure.
enum PayloadSize {
    /// Bytes of the compact encoding of `payload`, as `PayloadEncoder` writes it.
    static func of(_ payload: Payload) -> Int {
        var n = 7 + of(payload.aps) + 1  // {"aps": … }
        for c in payload.custom { n += 1 + string(c.key) + 1 + of(c.value) }
        return n
    }

    static func of(_ aps: APS) -> Int {
        var members = Members()
        if let alert = aps.alert { members.add(7, of(alert)) }  // "alert"
        if let badge = aps.badge { members.add(7, String(badge).utf8.count) }  // "badge"
        if let sound = aps.sound { members.add(7, string(sound)) }  // "sound"
        if aps.contentAvailable { members.add(19, 1) }  // "content-available":1
        if let category = aps.category { members.add(10, string(category)) }  // "category"
        for o in aps.other { members.add(string(o.key), of(o.value)) }
        return members.size
    }

    /// Bytes the alert value takes in a compact payload.
    static func of(_ alert: Alert) -> Int {
        switch alert {
        case .text(let s): return string(s)
        case .dictionary(let d) where d.isBodyOnly: return string(d.body!)
        case .dictionary(let d):
            var members = Members()
            if let title = d.title { members.add(7, string(title)) }  // "title"
            if let body = d.body { members.add(6, string(body)) }  // "body"
            if let v = d.titleLocKey { members.add(15, nullable(v, string)) }  // "title-loc-key"
            if let v = d.titleLocArgs { members.add(16, nullable(v, strings)) }  // "title-loc-args"
            if let v = d.actionLocKey { members.add(16, nullable(v, string)) }  // "action-loc-key"
            if let v = d.locKey { members.add(9, string(v)) }  // "loc-key"
            if let v = d.locArgs { members.add(10, strings(v)) }  // "loc-args"
            if let v = d.launchImage { members.add(14, string(v)) }  // "launch-image"
            for o in d.other { members.add(string(o.key), of(o.value)) }
            return members.size
        }
    }

    /// Bytes of `value`'s compact serialisation (`JSONValue.serialized()`).
    static func of(_ value: JSONValue) -> Int {
        switch value {
        case .null: return 4
        case .bool(let b): return b ? 4 : 5
        case .number(let n): return n.utf8.count
        case .string(let s): return string(s)
        case .array(let elements):
            var n = 1  // [ … ] with count − 1 commas
            for e in elements { n += of(e) + 1 }
            return max(n, 2)
        case .object(let members):
            var n = 1
            for m in members { n += string(m.key) + 1 + of(m.value) + 1 }
            return max(n, 2)
        }
    }

    /// Bytes of `s` as a JSON string literal, quotes included (as `JSONWriter.writeString`).
    static func string(_ s: String) -> Int {
        let counted = s.utf8.withContiguousStorageIfAvailable { bytes -> Int in
            var n = 2 + bytes.count
            for b in bytes where b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") {
                switch b {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x08, 0x0C, 0x0A, 0x0D, 0x09: n += 1  // \x
                default: n += 5  // \u00XX
                }
            }
            return n
        }
        return counted ?? JSONWriter.encodedLength(of: s)
    }

    static func strings(_ a: [String]) -> Int {
        var n = 1
        for s in a { n += string(s) + 1 }
        return max(n, 2)
    }

    static func nullable<T>(_ v: Nullable<T>, _ size: (T) -> Int) -> Int {
        switch v {
        case .null: return 4
        case .value(let x): return size(x)
        }
    }

    /// `{` members separated by commas `}`; each member is `"key":value`.
    struct Members {
        var n = 1
        var count = 0
        /// `key`: the key's size with its quotes.
        mutating func add(_ key: Int, _ value: Int) {
            n += key + 1 + value
            count += 1
        }
        var size: Int { n + max(count - 1, 0) + 1 }
    }
}
