import NIOHPACK

/// A request's header block, checked as RFC 9113 § 8.2–8.3 asks and split for the contract check in
/// one pass. NIO's own header-block validation is off on the simulator's connections: it made
/// a String-generic pass of its own over every header and cost about a sixth of the simulator's CPU
/// per request (docs/benchmarks.md §4). A block that breaks these rules is malformed: the stream is
/// reset with PROTOCOL_ERROR, as NIO did and as any HTTP/2 server does.
package struct RequestHeaderBlock {
    package var method: String?
    package var path: String?
    /// The regular fields, in order.
    package var fields: [(String, String)] = []

    /// Nil when the block is malformed: an upper-case or illegal field name, a pseudo-header after a
    /// regular field, an unknown or repeated pseudo-header, a missing `:method`, `:scheme` or `:path`,
    /// an empty `:path`, a connection-specific field, `te` other than "trailers", or a value with NUL,
    /// CR, LF or surrounding white space.
    package init?(_ headers: HPACKHeaders) {
        fields.reserveCapacity(headers.count)
        var scheme = false
        for (name, value, _) in headers {
            guard Self.isLegalValue(value) else { return nil }
            if name.utf8.first == UInt8(ascii: ":") {
                guard fields.isEmpty else { return nil }
                switch name {
                case ":method":
                    guard method == nil else { return nil }
                    method = value
                case ":path":
                    guard path == nil, !value.isEmpty else { return nil }
                    path = value
                case ":scheme":
                    guard !scheme else { return nil }
                    scheme = true
                case ":authority": break
                default: return nil
                }
            } else {
                guard Self.isLegalName(name) else { return nil }
                switch name.utf8.count {
                case 2 where name == "te":
                    guard value == "trailers" else { return nil }
                case 7, 10, 16, 17:
                    switch name {
                    case "connection", "transfer-encoding", "proxy-connection", "keep-alive", "upgrade": return nil
                    default: break
                    }
                default: break
                }
                fields.append((name, value))
            }
        }
        guard method != nil, path != nil, scheme else { return nil }
    }

    /// RFC 9110 `token`, without upper case (RFC 9113 § 8.2.1).
    static func isLegalName(_ name: String) -> Bool {
        !name.isEmpty && allBytes(of: name, satisfy: isNameByte)
    }

    /// Over the contiguous UTF-8 (a decoded header always is) rather than through `String.UTF8View`'s
    /// indices, which cost several times more per byte: this runs over every header of every request.
    @inline(__always)
    static func allBytes(of s: String, satisfy test: (UInt8) -> Bool) -> Bool {
        if let result = s.utf8.withContiguousStorageIfAvailable({ bytes in
            for b in bytes where !test(b) { return false }
            return true
        }) {
            return result
        }
        return s.utf8.allSatisfy(test)
    }

    private static func isNameByte(_ b: UInt8) -> Bool {
        switch b {
        case 0x21, 0x23...0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x30...0x39, 0x5E...0x7A, 0x7C, 0x7E: true
        default: false
        }
    }

    /// RFC 9113 § 8.2.1: no NUL, CR or LF; no leading or trailing space or tab.
    static func isLegalValue(_ value: String) -> Bool {
        let utf8 = value.utf8
        if let first = utf8.first, first == 0x20 || first == 0x09 { return false }
        if let last = utf8.last, last == 0x20 || last == 0x09 { return false }
        return allBytes(of: value) { $0 != 0 && $0 != 0x0D && $0 != 0x0A }
    }
}
