/// A device token: 32 opaque bytes that APNs gave a device (Apple's guide, "Token Generation and Dispersal"),
/// carried around as 64 hex characters.
///
/// Stored inline as four words, so a token costs no heap allocation to keep, hash or encode.
public struct DeviceToken: Hashable, Sendable, CustomStringConvertible {
    /// Length of a device token on the wire (item 1 of command 2: "Device token, 32 bytes").
    public static let byteCount = 32
    /// Length of its hex form.
    public static let hexCount = 64

    @usableFromInline
    internal var words: (UInt64, UInt64, UInt64, UInt64)  // big-endian byte order, as on the wire

    public enum ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        /// The hex text is not 64 characters long (the count is in UTF-8 bytes).
        case wrongHexLength(Int)
        /// A character that is not 0-9, a-f or A-F, at this UTF-8 offset.
        case notHex(offset: Int)
        /// Binary form that is not 32 bytes.
        case wrongByteCount(Int)

        public var description: String {
            switch self {
            case .wrongHexLength(let n): "device token must be 64 hex characters, got \(n)"
            case .notHex(let offset): "device token has a non-hex character at offset \(offset)"
            case .wrongByteCount(let n): "device token must be 32 bytes, got \(n)"
            }
        }
    }

    /// Parses 64 hex characters, upper or lower case.
    public init(hex: some StringProtocol) throws(ParseError) {
        var text = String(hex)
        let result = text.withUTF8 { bytes in
            Result { () throws(ParseError) in try DeviceToken(hexBytes: UnsafeRawBufferPointer(bytes)) }
        }
        self = try result.get()
    }

    /// Parses hex from raw UTF-8 bytes (as found inside a JSON message) without building a String.
    public init(hexBytes: UnsafeRawBufferPointer) throws(ParseError) {
        guard hexBytes.count == Self.hexCount else { throw .wrongHexLength(hexBytes.count) }
        // Every job's token comes through here: eight characters at a time (a character at a time
        // was ~4 % of `send --protocol http2`'s CPU per job). Anything that is not hex is left to the
        // loop below, which names the offending offset.
        if let w = Self.words(hex: hexBytes) {
            words = w
        } else {
            words = try Self.scalarWords(hex: hexBytes)
        }
    }

    /// The character-at-a-time parse (tests compare the two).
    init(scalarHexBytes hexBytes: UnsafeRawBufferPointer) throws(ParseError) {
        guard hexBytes.count == Self.hexCount else { throw .wrongHexLength(hexBytes.count) }
        words = try Self.scalarWords(hex: hexBytes)
    }

    /// The four words of 64 characters, one at a time: the parse that names where the text stops being hex.
    private static func scalarWords(hex hexBytes: UnsafeRawBufferPointer) throws(ParseError) -> (UInt64, UInt64, UInt64, UInt64) {
        var w: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        for wordIndex in 0..<4 {
            var word: UInt64 = 0
            for i in 0..<16 {
                let offset = wordIndex * 16 + i
                guard let nibble = Self.nibble(hexBytes[offset]) else { throw .notHex(offset: offset) }
                word = word << 4 | UInt64(nibble)
            }
            switch wordIndex {
            case 0: w.0 = word
            case 1: w.1 = word
            case 2: w.2 = word
            default: w.3 = word
            }
        }
        return w
    }

    /// The four words of 64 hex characters, nil if any is not 0-9, a-f or A-F.
    @inline(__always)
    static func words(hex: UnsafeRawBufferPointer) -> (UInt64, UInt64, UInt64, UInt64)? {
        guard let a = word(hex, 0), let b = word(hex, 16), let c = word(hex, 32), let d = word(hex, 48) else { return nil }
        return (a, b, c, d)
    }

    /// 16 hex characters from `offset` as one big-endian word.
    @inline(__always)
    private static func word(_ hex: UnsafeRawBufferPointer, _ offset: Int) -> UInt64? {
        guard let high = nibbles(hex, offset), let low = nibbles(hex, offset + 8) else { return nil }
        return UInt64(high) << 32 | UInt64(low)
    }

    /// 8 hex characters from `offset` as 32 bits (the first character in the top nibble), in one
    /// 64-bit word: each byte is range-checked in its lane (SWAR), none can carry into the next.
    @inline(__always)
    private static func nibbles(_ hex: UnsafeRawBufferPointer, _ offset: Int) -> UInt32? {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let high: UInt64 = 0x8080_8080_8080_8080
        let x = UInt64(littleEndian: hex.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        guard x & high == 0 else { return nil }  // ASCII only: below, a lane + 0x80 cannot carry
        // A lane's high bit after `+ (0x80 - lo)` says byte >= lo; after `+ (0x7F - hi)`, byte > hi.
        @inline(__always) func within(_ v: UInt64, _ lo: UInt8, _ hi: UInt8) -> UInt64 {
            (v &+ (ones &* UInt64(0x80 - lo))) & ~(v &+ (ones &* UInt64(0x7F - hi))) & high
        }
        let digit = within(x, UInt8(ascii: "0"), UInt8(ascii: "9"))
        let letter = within(x | (ones &* 0x20), UInt8(ascii: "a"), UInt8(ascii: "f"))  // A-F folded onto a-f
        guard digit | letter == high else { return nil }
        // '0'-'9' are 0x30-0x39 and 'a'-'f' / 'A'-'F' end in 1-6: the low nibble, plus 9 for letters.
        let n = (x & (ones &* 0x0F)) &+ ((letter >> 7) &* 9)
        // Lanes (first character lowest) → pairs → four bytes, first pair on top.
        let pairs = ((n << 4) | (n >> 8)) & 0x00FF_00FF_00FF_00FF
        let b0 = UInt32(truncatingIfNeeded: pairs)
        let b1 = UInt32(truncatingIfNeeded: pairs >> 16)
        let b2 = UInt32(truncatingIfNeeded: pairs >> 32)
        let b3 = UInt32(truncatingIfNeeded: pairs >> 48)
        return (b0 & 0xFF) << 24 | (b1 & 0xFF) << 16 | (b2 & 0xFF) << 8 | (b3 & 0xFF)
    }

    /// Takes the 32 binary bytes of a token (as read from item 1 or a feedback tuple).
    public init(bytes: some Collection<UInt8>) throws(ParseError) {
        guard bytes.count == Self.byteCount else { throw .wrongByteCount(bytes.count) }
        var w: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &w) { raw in
            for (i, byte) in bytes.enumerated() { raw[i] = byte }
        }
        words = (UInt64(bigEndian: w.0), UInt64(bigEndian: w.1), UInt64(bigEndian: w.2), UInt64(bigEndian: w.3))
    }

    @inline(__always)
    static func nibble(_ c: UInt8) -> UInt8? {
        // Two unsigned range checks instead of three ranges: every job's token goes through here.
        let digit = c &- UInt8(ascii: "0")
        if digit < 10 { return digit }
        let letter = (c | 0x20) &- UInt8(ascii: "a")  // A–F folded onto a–f
        return letter < 6 ? letter &+ 10 : nil
    }

    /// Calls `body` with the 32 bytes in wire order.
    @inlinable
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var be = (words.0.bigEndian, words.1.bigEndian, words.2.bigEndian, words.3.bigEndian)
        return try withUnsafeBytes(of: &be) { try body($0) }
    }

    /// The 32 bytes in wire order.
    public var bytes: [UInt8] { withBytes { Array($0) } }

    /// Lower-case hex, the form the pipeline uses in Redis keys and logs.
    public var hex: String {
        String(unsafeUninitializedCapacity: Self.hexCount) { out in
            writeHex(into: UnsafeMutableRawBufferPointer(out))
            return Self.hexCount
        }
    }

    /// Writes the lower-case hex into the first ``hexCount`` bytes of `out` (the HTTP/2 sender writes a
    /// request's `:path` straight into its header block, with no String per request).
    public func writeHex(into out: UnsafeMutableRawBufferPointer) {
        precondition(out.count >= Self.hexCount, "a token's hex is 64 bytes")
        withBytes { raw in
            for i in 0..<Self.byteCount {
                let byte = raw[i]
                out[2 * i] = Self.hexDigit(byte >> 4)
                out[2 * i + 1] = Self.hexDigit(byte & 0x0F)
            }
        }
    }

    /// Whether `utf8` is exactly `hex` (lower case), without making that string.
    public func isHex(_ utf8: UnsafeRawBufferPointer) -> Bool {
        guard utf8.count == Self.hexCount else { return false }
        // The hex written out and compared eight bytes at a time: a compare per character, each with its
        // own early exit, was ~1 % of `run` when every notification of a campaign checked its job id.
        return withUnsafeTemporaryAllocation(byteCount: Self.hexCount, alignment: 8) { hex in
            writeHex(into: hex)
            var differ: UInt64 = 0
            for offset in stride(from: 0, to: Self.hexCount, by: 8) {
                differ |= hex.load(fromByteOffset: offset, as: UInt64.self) ^ utf8.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            }
            return differ == 0
        }
    }

    // Digits computed, not looked up in an array built per call (an allocation per token, and the
    // pipeline takes the hex of every job's token for the gate and again for the settle).
    @inline(__always)
    private static func hexDigit(_ n: UInt8) -> UInt8 { n < 10 ? n &+ UInt8(ascii: "0") : n &+ (UInt8(ascii: "a") &- 10) }

    /// A stable 64-bit hash of the token (FNV-1a over the 32 bytes): routing to shards must not change
    /// between runs or processes, which Swift's seeded `Hasher` would.
    public var stableHash: UInt64 {
        withBytes { raw in
            var h: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in raw {
                h ^= UInt64(byte)
                h &*= 0x0000_0100_0000_01B3
            }
            return h
        }
    }

    public static func == (a: DeviceToken, b: DeviceToken) -> Bool {
        a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }

    public var description: String { hex }
}
