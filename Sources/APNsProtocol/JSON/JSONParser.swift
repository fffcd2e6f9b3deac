/// A strict RFC 8259 parser into `JSONValue`, over raw UTF-8 bytes.
///
/// Hand-written because the protocol module depends on nothing but the standard library (it is fuzzed
/// on its own), and because it reads a job in one pass without Foundation's bridging. Nesting is
/// limited (hostile input must not blow the stack), invalid UTF-8 and lone surrogates are errors, and
/// every error says at which byte offset it happened.
public struct JSONParser {
    public struct Error: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        public var offset: Int
        public var message: String
        public var description: String { "invalid JSON at byte \(offset): \(message)" }
    }

    public static let maxDepth = 64

    public static func parse(_ bytes: some Collection<UInt8>) throws(Error) -> JSONValue {
        if let result = bytes.withContiguousStorageIfAvailable({ buffer in
            Result { () throws(Error) in try parse(UnsafeRawBufferPointer(buffer)) }
        }) {
            return try result.get()
        }
        let copy = Array(bytes)
        return try copy.withUnsafeBytes { raw in Result { () throws(Error) in try parse(raw) } }.get()
    }

    public static func parse(_ text: String) throws(Error) -> JSONValue {
        try parse(Array(text.utf8))
    }

    public static func parse(_ raw: UnsafeRawBufferPointer) throws(Error) -> JSONValue {
        var parser = JSONParser(bytes: raw)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == raw.count else { throw parser.error("unexpected data after the value") }
        return value
    }

    /// A member of a top-level object read by `parseObject(_:keepingRaw:)`: its value built, or only
    /// checked and located (the byte range it occupies in the input).
    public enum Member: Sendable {
        case value(JSONValue)
        case raw(Range<Int>)
    }

    /// Parses a top-level object like `parse`, for a caller that knows the keys it reads: `key` names
    /// each key by the caller's own code, from the key's text (its UTF-8, escapes resolved), or nil for
    /// a key it does not read; the values of the keys `keepRaw` picks are not built. Those, and the values
    /// of unknown keys, are checked exactly as `parse` checks them (the same errors at the same offsets,
    /// so the message is refused in the same way); a kept one is returned as the bytes it occupies, an
    /// unknown one is left out. Returns nil when the top-level value is not an object (`parse` then says
    /// what it is). Why: a job's payload and alerts are the same bytes for every job of a campaign; a
    /// caller can recognise them by their bytes and skip building (and validating, and encoding) them
    /// again — and a key is matched from its bytes, with no String made for it.
    ///
    /// `knownValue` may name a kept value the caller has seen checked before: given the key and the input
    /// from the value's first byte on, it returns the length of a value it knows to be valid JSON that
    /// those bytes begin with (nil: none). Such a value is taken without being read again when it is an
    /// object or an array: these end at their closing bracket, so bytes that begin with one parse as
    /// exactly that one, and the result is the one reading it gives. Why: a campaign's payload and alerts
    /// are a few hundred bytes of every job, and comparing them with the last job's is several times
    /// cheaper than checking them again.
    public static func parseObject(
        _ raw: UnsafeRawBufferPointer, key: (UnsafeRawBufferPointer) -> UInt8?, keepingRaw keepRaw: (UInt8) -> Bool,
        knownValue: (UInt8, UnsafeRawBufferPointer) -> Int? = { _, _ in nil }
    ) throws(Error) -> [(key: UInt8, value: Member)]? {
        var parser = JSONParser(bytes: raw)
        parser.skipWhitespace()
        guard parser.index < raw.count, raw[parser.index] == UInt8(ascii: "{") else { return nil }
        let members = try parser.parseTopObject(key: key, keepRaw: keepRaw, knownValue: knownValue)
        parser.skipWhitespace()
        guard parser.index == raw.count else { throw parser.error("unexpected data after the value") }
        return members
    }

    private let bytes: UnsafeRawBufferPointer
    private var index = 0

    /// `parseObject(depth: 1)` with the keys named by the caller and the values of some checked in place
    /// of being built.
    private mutating func parseTopObject(
        key name: (UnsafeRawBufferPointer) -> UInt8?, keepRaw: (UInt8) -> Bool, knownValue: (UInt8, UnsafeRawBufferPointer) -> Int?
    ) throws(Error) -> [(key: UInt8, value: Member)] {
        index += 1
        var members: [(key: UInt8, value: Member)] = []
        // A job has up to a dozen keys: room for them at once, not four regrowths per message.
        members.reserveCapacity(12)
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return members
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key string") }
            let key = try parseKey(name)
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            if let key, !keepRaw(key) {
                members.append((key: key, value: .value(try parseValue(depth: 1))))
            } else {
                let start = index
                if let key, let n = knownLength(knownValue(key, UnsafeRawBufferPointer(rebasing: bytes[start...]))) {
                    index += n
                } else {
                    try skipValue(depth: 1)
                }
                if let key { members.append((key: key, value: .raw(start..<index))) }
            }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return members
            } else {
                throw error("expected ',' or '}'")
            }
        }
    }

    /// A key string, `index` at its opening quote, named by `name` from its bytes: read in place when it
    /// holds no escape (nearly always), with the checks and errors of `parseString`.
    private mutating func parseKey(_ name: (UnsafeRawBufferPointer) -> UInt8?) throws(Error) -> UInt8? {
        if let text = try scanPlainString() { return name(text) }
        var text = try parseString()
        return text.withUTF8 { name(UnsafeRawBufferPointer($0)) }
    }

    /// The length `knownValue` named, when it can be taken as it stands (see `parseObject`): an object or
    /// an array, within the input, from its opening bracket to its closing one.
    private func knownLength(_ n: Int?) -> Int? {
        guard let n, n >= 2, index + n <= bytes.count else { return nil }
        switch (bytes[index], bytes[index + n - 1]) {
        case (UInt8(ascii: "{"), UInt8(ascii: "}")), (UInt8(ascii: "["), UInt8(ascii: "]")): return n
        default: return nil
        }
    }

    /// `parseValue` without building the value: the same checks in the same order.
    private mutating func skipValue(depth: Int) throws(Error) {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            guard depth + 1 <= Self.maxDepth else { throw error("nested deeper than \(Self.maxDepth)") }
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key string") }
                try skipString()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                try skipValue(depth: depth + 1)
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of input in object") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return
                } else {
                    throw error("expected ',' or '}'")
                }
            }
        case UInt8(ascii: "["):
            guard depth + 1 <= Self.maxDepth else { throw error("nested deeper than \(Self.maxDepth)") }
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                try skipValue(depth: depth + 1)
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of input in array") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return
                } else {
                    throw error("expected ',' or ']'")
                }
            }
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "t"): try expectLiteral("true")
        case UInt8(ascii: "f"): try expectLiteral("false")
        case UInt8(ascii: "n"): try expectLiteral("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try scanNumber()
        default: throw error("unexpected character")
        }
    }

    /// `parseString` without building the string: an all-ASCII string without escapes (nearly all) is
    /// only scanned; one with other bytes is checked as UTF-8 in place, without a copy.
    private mutating func skipString() throws(Error) {
        if try scanPlainString() == nil { _ = try parseString() }
    }

    /// A string without escapes, `index` at its opening quote: its checked bytes, `index` past its
    /// closing quote. Nil when it has an escape (rare), `index` back at the quote for the building path,
    /// `parseString`, whose checks these are.
    private mutating func scanPlainString() throws(Error) -> UnsafeRawBufferPointer? {
        let quote = index
        index += 1
        let start = index
        let scan = try scanUnescaped()
        guard scan.closed else {
            index = quote
            return nil
        }
        let text = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
        if !scan.ascii && !Self.isValidUTF8(text) { throw error("invalid UTF-8 in string") }
        index += 1
        return text
    }

    /// Scans a string's characters from `index` up to its closing quote (`closed`, `index` at the quote)
    /// or to the first backslash or the end of input (not `closed`, `index` there); `ascii` says whether
    /// every byte scanned was below 0x80. A control character is an error.
    @inline(__always)
    private mutating func scanUnescaped() throws(Error) -> (closed: Bool, ascii: Bool) {
        var ascii = true
        while index < bytes.count {
            // Eight plain characters at a time (no quote, backslash, control or non-ASCII byte): a
            // payload's strings are read in every job. A chunk with any of them goes byte by byte.
            if index + 8 <= bytes.count, Self.isPlainASCII(bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)) {
                index += 8
                continue
            }
            let b = bytes[index]
            if b == UInt8(ascii: "\"") { return (true, ascii) }
            if b == UInt8(ascii: "\\") { return (false, ascii) }
            if b < 0x20 { throw error("control character in string") }
            if b >= 0x80 { ascii = false }
            index += 1
        }
        return (false, ascii)
    }

    /// Whether none of the eight bytes of `chunk` is `"`, `\\`, below 0x20 or above 0x7F (SWAR: each
    /// test flags a lane's high bit exactly when some lane matches).
    @inline(__always)
    static func isPlainASCII(_ chunk: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let high: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func hasZero(_ v: UInt64) -> UInt64 { (v &- ones) & ~v & high }
        let quote = hasZero(chunk ^ (ones &* UInt64(UInt8(ascii: "\""))))
        let backslash = hasZero(chunk ^ (ones &* UInt64(UInt8(ascii: "\\"))))
        let control = (chunk &- (ones &* 0x20)) & ~chunk & high
        return (quote | backslash | control | (chunk & high)) == 0
    }

    /// Whether `bytes` is well-formed UTF-8 (the rules of `String(validating:)`), without allocating.
    private static func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var iterator = bytes.makeIterator()
        var parser = Unicode.UTF8.ForwardParser()
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }

    private init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    private func error(_ message: String) -> Error { Error(offset: index, message: message) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws(Error) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(Error) {
        let n = literal.utf8CodeUnitCount
        guard index + n <= bytes.count else { throw error("unexpected end of input") }
        let expected = UnsafeRawBufferPointer(start: literal.utf8Start, count: n)
        for i in 0..<n where bytes[index + i] != expected[i] { throw error("invalid literal") }
        index += n
    }

    private mutating func parseObject(depth: Int) throws(Error) -> JSONValue {
        guard depth <= Self.maxDepth else { throw error("nested deeper than \(Self.maxDepth)") }
        index += 1
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key string") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            members.append((key: key, value: value))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            } else {
                throw error("expected ',' or '}'")
            }
        }
    }

    private mutating func parseArray(depth: Int) throws(Error) -> JSONValue {
        guard depth <= Self.maxDepth else { throw error("nested deeper than \(Self.maxDepth)") }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            } else {
                throw error("expected ',' or ']'")
            }
        }
    }

    private mutating func parseNumber() throws(Error) -> String {
        let start = index
        try scanNumber()
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
    }

    private mutating func scanNumber() throws(Error) {
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error("incomplete number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if isDigit(bytes[index]) {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        } else {
            throw error("invalid number")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("digit expected after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("digit expected in exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
    }

    @inline(__always)
    private func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    /// Parses a string literal; `index` is at the opening quote.
    private mutating func parseString() throws(Error) -> String {
        index += 1
        let start = index
        // Fast path: no escapes, valid UTF-8 checked by String(validating:). An all-ASCII string (keys,
        // ids, hex tokens: nearly all of them) is valid UTF-8 as it stands and skips that check, whose
        // generic entry point cost a runtime metadata lookup per string.
        let scan = try scanUnescaped()
        if scan.closed {
            let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            let s: String
            if scan.ascii {
                s = String(decoding: slice.assumingMemoryBound(to: UInt8.self), as: UTF8.self)
            } else {
                guard let v = String(validating: slice, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                s = v
            }
            index += 1
            return s
        }
        // Slow path: copy with escapes resolved.
        var out = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let b = bytes[index]
            switch b {
            case UInt8(ascii: "\""):
                index += 1
                guard let s = String(validating: out, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                return s
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw error("unexpected end of input in escape") }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): out.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw error("lone high surrogate") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid low surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("lone low surrogate")
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw error("invalid code point") }
                    out.append(contentsOf: UTF8.encode(u)!)
                default:
                    throw error("invalid escape")
                }
            default:
                if b < 0x20 { throw error("control character in string") }
                out.append(b)
                index += 1
            }
        }
        throw error("unterminated string")
    }

    private mutating func parseHex4() throws(Error) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("incomplete \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            guard let n = DeviceToken.nibble(bytes[index]) else { throw error("invalid \\u escape") }
            v = v << 4 | UInt32(n)
            index += 1
        }
        return v
    }
}
