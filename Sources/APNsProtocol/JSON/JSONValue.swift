/// A JSON value with object keys kept in their original order.
///
/// The pipeline reads a job's payload, may swap its alert for a localised one, and writes it back
/// compact; keeping order and number spelling means a payload passes through byte-for-byte as the
/// producer meant it, apart from whitespace. Numbers stay as their source text for the same reason
/// (a 64-bit id in a custom key must not round through a Double).
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// The number's literal text, already checked to be a valid JSON number.
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.number(let x), .number(let y)): x == y
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)):
            x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let b): hasher.combine(b)
        case .number(let n): hasher.combine(n)
        case .string(let s): hasher.combine(s)
        case .array(let a): hasher.combine(a)
        case .object(let o):
            hasher.combine(o.count)
            for (k, v) in o {
                hasher.combine(k)
                hasher.combine(v)
            }
        }
    }

    public static func integer(_ value: Int) -> JSONValue { .number(String(value)) }

    /// The first value for `key` when this is an object.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first(where: { $0.key == key })?.value
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The value as an integer when it is a number without fraction or exponent that fits an Int.
    public var intValue: Int? {
        if case .number(let n) = self { return Int(n) }
        return nil
    }

    public var objectValue: [(key: String, value: JSONValue)]? {
        if case .object(let o) = self { return o }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    /// Compact serialisation (no whitespace, as the spec advises for payloads).
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        JSONWriter.write(self, into: &out)
        return out
    }

    public var serializedString: String { String(decoding: serialized(), as: UTF8.self) }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByNilLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(String(value)) }
    public init(nilLiteral: ()) { self = .null }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(elements.map { (key: $0.0, value: $0.1) })
    }
}

/// Compact JSON output into any `ByteSink`.
public enum JSONWriter {
    public static func write(_ value: JSONValue, into out: inout some ByteSink) {
        switch value {
        case .null: out.putBytes("null".utf8)
        case .bool(let b): out.putBytes((b ? "true" : "false").utf8)
        case .number(let n): out.putBytes(n.utf8)
        case .string(let s): writeString(s, into: &out)
        case .array(let elements):
            out.putByte(UInt8(ascii: "["))
            for (i, e) in elements.enumerated() {
                if i > 0 { out.putByte(UInt8(ascii: ",")) }
                write(e, into: &out)
            }
            out.putByte(UInt8(ascii: "]"))
        case .object(let members):
            out.putByte(UInt8(ascii: "{"))
            for (i, m) in members.enumerated() {
                if i > 0 { out.putByte(UInt8(ascii: ",")) }
                writeString(m.key, into: &out)
                out.putByte(UInt8(ascii: ":"))
                write(m.value, into: &out)
            }
            out.putByte(UInt8(ascii: "}"))
        }
    }

    /// Writes a JSON string literal: `"` and `\` escaped, control characters as short escapes or
    /// `\u00XX`, everything else as raw UTF-8 (the shortest correct form, which matters at 2 KB).
    public static func writeString(_ s: String, into out: inout some ByteSink) {
        out.putByte(UInt8(ascii: "\""))
        for byte in s.utf8 {
            writeEscaped(byte, into: &out)
        }
        out.putByte(UInt8(ascii: "\""))
    }

    /// How many bytes `byte` takes inside a JSON string literal.
    @inline(__always)
    static func escapedLength(_ byte: UInt8) -> Int {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x08, 0x0C, 0x0A, 0x0D, 0x09: 2
        case 0..<0x20: 6
        default: 1
        }
    }

    @inline(__always)
    static func writeEscaped(_ byte: UInt8, into out: inout some ByteSink) {
        switch byte {
        case UInt8(ascii: "\""):
            out.putByte(UInt8(ascii: "\\"))
            out.putByte(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"):
            out.putByte(UInt8(ascii: "\\"))
            out.putByte(UInt8(ascii: "\\"))
        case 0x08:
            out.putByte(UInt8(ascii: "\\"))
            out.putByte(UInt8(ascii: "b"))
        case 0x0C:
            out.putByte(UInt8(ascii: "\\"))
            out.putByte(UInt8(ascii: "f"))
        case 0x0A:
            out.putByte(UInt8(ascii: "\\"))
            out.putByte(UInt8(ascii: "n"))
        case 0x0D:
            out.putByte(UInt8(ascii: "\\"))
            out.putByte(UInt8(ascii: "r"))
        case 0x09:
            out.putByte(UInt8(ascii: "\\"))
            out.putByte(UInt8(ascii: "t"))
        case 0..<0x20:
            let hex: [UInt8] = Array("0123456789abcdef".utf8)
            out.putBytes("\\u00".utf8)
            out.putByte(hex[Int(byte >> 4)])
            out.putByte(hex[Int(byte & 0xF)])
        default: out.putByte(byte)
        }
    }

    /// Bytes `s` takes as a JSON string literal, quotes included.
    public static func encodedLength(of s: String) -> Int {
        var n = 2
        for byte in s.utf8 { n += escapedLength(byte) }
        return n
    }
}
