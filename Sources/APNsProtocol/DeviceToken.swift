/// A device token: opaque bytes that APNs gave an app on a device, carried around as hex (two lower-case
/// digits a byte).
///
/// **Its size is not fixed.** Apple, `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`:
/// "APNs device tokens are of variable length. Do not hard-code their size." Every token seen so far
/// is 32 bytes, and the legacy binary interface only takes that size (command 2, item 1: "Device token,
/// 32 bytes"). So a token is one of two representations, one value each:
/// - **32 bytes**: inline, as four words, so the common token costs no heap allocation to keep, hash,
///   compare or encode (every job takes this path: the decode and the send are hot);
/// - **any other size** in ``minByteCount``…``maxByteCount``: its bytes in an array. Only HTTP/2 apps
///   send these (`/3/device/<hex>` takes any length); a binary app's job with one is dead-lettered
///   (`token-size-needs-http2`, docs/design.md §3.2).
///
/// A 32-byte token is always inline, however it was made (hex, bytes), and no other size ever is: two
/// tokens are equal exactly when their bytes are, and equality, hashing, ``hex``, ``stableHash`` and the
/// wire bytes never depend on the representation.
///
/// The price of the second case for the first: a token is 33 bytes (the case's tag; 40 with padding)
/// and copying one checks its case (an array is retained). `SettledNotification`, which a binary shard
/// keeps by the ten thousand, keeps ``binaryWords`` instead. The 32-byte paths of ``hex``,
/// ``isHex(_:)``, ``stableHash`` and `==` run with a constant size, as before tokens had sizes.
///
/// The range, 8…100 bytes (16…200 hex digits, an even count): Apple documents no bound. The binary
/// interface framed a token with a 2-byte length, so the format never promised 32 forever; 100 bytes
/// is three times today's size, room for a longer token, while a job's token stays bounded (it is
/// kept per notification, in Redis fields and keys' hashes, in the request's `:path`): a hostile job
/// cannot make the pipeline hold or send an arbitrarily large one. 8 bytes (64 bits) is the least that
/// can still name one app on one device among billions; anything shorter is a truncated token.
public struct DeviceToken: Hashable, Sendable, CustomStringConvertible {
    /// The binary interface's size, and today's every token's (command 2 item 1: "Device token, 32 bytes").
    public static let binaryByteCount = 32
    /// Hex digits of a 32-byte token.
    public static let binaryHexCount = 64
    /// The sizes accepted (docs/design.md §3.1; see the type's comment for why).
    public static let minByteCount = 8
    public static let maxByteCount = 100
    public static var minHexCount: Int { 2 * minByteCount }
    public static var maxHexCount: Int { 2 * maxByteCount }

    @usableFromInline
    enum Storage: Sendable {
        /// 32 bytes, big-endian words (byte order as on the wire).
        case inline(UInt64, UInt64, UInt64, UInt64)
        /// Any other size in the range; never 32 bytes (one representation per value).
        case outOfLine([UInt8])
    }

    @usableFromInline
    internal var storage: Storage

    public enum ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        /// The hex text is not an even number of characters in 16…200 (the count is in UTF-8 bytes).
        case wrongHexLength(Int)
        /// A character that is not 0-9, a-f or A-F, at this UTF-8 offset.
        case notHex(offset: Int)
        /// Binary form outside 8…100 bytes.
        case wrongByteCount(Int)

        public var description: String {
            switch self {
            case .wrongHexLength(let n) where n % 2 == 1:
                "device token must be an even number of hex digits (two a byte), got \(n)"
            case .wrongHexLength(let n):
                "device token must be \(DeviceToken.minHexCount)…\(DeviceToken.maxHexCount) hex digits (\(DeviceToken.minByteCount)…\(DeviceToken.maxByteCount) bytes; usually 64), got \(n)"
            case .notHex(let offset): "device token has a non-hex character at offset \(offset)"
            case .wrongByteCount(let n):
                "device token must be \(DeviceToken.minByteCount)…\(DeviceToken.maxByteCount) bytes, got \(n)"
            }
        }
    }

    /// Whether `n` hex digits can be a token: even, within the range.
    @inline(__always)
    public static func isValidHexCount(_ n: Int) -> Bool { n & 1 == 0 && n >= minHexCount && n <= maxHexCount }

    /// Parses hex, upper or lower case: an even number of digits in 16…200.
    public init(hex: some StringProtocol) throws(ParseError) {
        var text = String(hex)
        let result = text.withUTF8 { bytes in
            Result { () throws(ParseError) in try DeviceToken(hexBytes: UnsafeRawBufferPointer(bytes)) }
        }
        self = try result.get()
    }

    /// Parses hex from raw UTF-8 bytes (as found inside a JSON message) without building a String.
    public init(hexBytes: UnsafeRawBufferPointer) throws(ParseError) {
        if hexBytes.count == Self.binaryHexCount {
            // Every job's token comes through here: eight characters at a time (a character at a time
            // was ~4 % of `send --protocol http2`'s CPU per job). Anything that is not hex is left to the
            // loop below, which names the offending offset.
            if let w = Self.words(hex: hexBytes) {
                storage = .inline(w.0, w.1, w.2, w.3)
            } else {
                let w = try Self.scalarWords(hex: hexBytes)
                storage = .inline(w.0, w.1, w.2, w.3)
            }
            return
        }
        guard Self.isValidHexCount(hexBytes.count) else { throw .wrongHexLength(hexBytes.count) }
        storage = .outOfLine(try Self.scalarBytes(hex: hexBytes))
    }

    /// The character-at-a-time parse (tests compare the two).
    init(scalarHexBytes hexBytes: UnsafeRawBufferPointer) throws(ParseError) {
        guard Self.isValidHexCount(hexBytes.count) else { throw .wrongHexLength(hexBytes.count) }
        if hexBytes.count == Self.binaryHexCount {
            let w = try Self.scalarWords(hex: hexBytes)
            storage = .inline(w.0, w.1, w.2, w.3)
        } else {
            storage = .outOfLine(try Self.scalarBytes(hex: hexBytes))
        }
    }

    /// The bytes of an even count of hex digits, a character at a time (the error names the offset).
    private static func scalarBytes(hex hexBytes: UnsafeRawBufferPointer) throws(ParseError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: hexBytes.count / 2)
        for i in 0..<out.count {
            guard let high = Self.nibble(hexBytes[2 * i]) else { throw .notHex(offset: 2 * i) }
            guard let low = Self.nibble(hexBytes[2 * i + 1]) else { throw .notHex(offset: 2 * i + 1) }
            out[i] = high << 4 | low
        }
        return out
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

    /// Takes a token's binary bytes (as read from item 1, a feedback tuple, or a test): 8…100 of them;
    /// 32 are kept inline.
    public init(bytes: some Collection<UInt8>) throws(ParseError) {
        let count = bytes.count
        if count == Self.binaryByteCount {
            var w: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &w) { raw in
                for (i, byte) in bytes.enumerated() { raw[i] = byte }
            }
            storage = .inline(UInt64(bigEndian: w.0), UInt64(bigEndian: w.1), UInt64(bigEndian: w.2), UInt64(bigEndian: w.3))
            return
        }
        guard count >= Self.minByteCount && count <= Self.maxByteCount else { throw .wrongByteCount(count) }
        storage = .outOfLine(Array(bytes))
    }

    @inline(__always)
    static func nibble(_ c: UInt8) -> UInt8? {
        // Two unsigned range checks instead of three ranges: every job's token goes through here.
        let digit = c &- UInt8(ascii: "0")
        if digit < 10 { return digit }
        let letter = (c | 0x20) &- UInt8(ascii: "a")  // A–F folded onto a–f
        return letter < 6 ? letter &+ 10 : nil
    }

    /// The token's size in bytes: 32 for every token seen so far, 8…100 allowed.
    @inlinable
    public var byteCount: Int {
        switch storage {
        case .inline: Self.binaryByteCount
        case .outOfLine(let bytes): bytes.count
        }
    }

    /// The length of its hex form: twice ``byteCount``.
    @inlinable
    public var hexCount: Int { 2 * byteCount }

    /// Whether the legacy binary interface can carry it (exactly 32 bytes: command 2's item 1 is
    /// "Device token, 32 bytes", and the feedback service's tuples hold 32).
    @inlinable
    public var fitsBinaryInterface: Bool {
        if case .inline = storage { return true }
        return false
    }

    /// A 32-byte token's four big-endian words (nil for another size): for a store that keeps many
    /// binary-interface tokens and no other (a binary shard's grace window), in 32 bytes rather than a
    /// token's 33 (the tag of its two representations).
    @inlinable
    public var binaryWords: (UInt64, UInt64, UInt64, UInt64)? {
        if case .inline(let a, let b, let c, let d) = storage { return (a, b, c, d) }
        return nil
    }

    /// The token of ``binaryWords``.
    @inlinable
    public init(binaryWords w: (UInt64, UInt64, UInt64, UInt64)) {
        storage = .inline(w.0, w.1, w.2, w.3)
    }

    /// Calls `body` with the bytes in wire order.
    @inlinable
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch storage {
        case .inline(let a, let b, let c, let d):
            var be = (a.bigEndian, b.bigEndian, c.bigEndian, d.bigEndian)
            return try withUnsafeBytes(of: &be) { try body($0) }
        case .outOfLine(let bytes):
            return try bytes.withUnsafeBytes { try body($0) }
        }
    }

    /// The bytes in wire order.
    public var bytes: [UInt8] { withBytes { Array($0) } }

    /// Lower-case hex, the form the pipeline uses in Redis keys and logs.
    public var hex: String {
        let count = hexCount
        return String(unsafeUninitializedCapacity: count) { out in
            writeHex(into: UnsafeMutableRawBufferPointer(out))
            return count
        }
    }

    /// Writes the lower-case hex into the first ``hexCount`` bytes of `out` (the HTTP/2 sender writes a
    /// request's `:path` straight into its header block, with no String per request).
    public func writeHex(into out: UnsafeMutableRawBufferPointer) {
        // The 32-byte case with a constant count (the loop the compiler unrolls, as before tokens had
        // sizes): every job's token is written out for the gate, the settle and the request path.
        switch storage {
        case .inline(let a, let b, let c, let d):
            precondition(out.count >= Self.binaryHexCount, "a 32-byte token's hex is 64 bytes")
            var be = (a.bigEndian, b.bigEndian, c.bigEndian, d.bigEndian)
            withUnsafeBytes(of: &be) { Self.writeHex($0, count: Self.binaryByteCount, into: out) }
        case .outOfLine(let bytes):
            precondition(out.count >= 2 * bytes.count, "a token's hex is twice its byte count")
            bytes.withUnsafeBytes { Self.writeHex($0, count: $0.count, into: out) }
        }
    }

    @inline(__always)
    private static func writeHex(_ raw: UnsafeRawBufferPointer, count: Int, into out: UnsafeMutableRawBufferPointer) {
        for i in 0..<count {
            let byte = raw[i]
            out[2 * i] = hexDigit(byte >> 4)
            out[2 * i + 1] = hexDigit(byte & 0x0F)
        }
    }

    /// Whether `utf8` is exactly `hex` (lower case), without making that string.
    public func isHex(_ utf8: UnsafeRawBufferPointer) -> Bool {
        // The hex written out and compared eight bytes at a time: a compare per character, each with its
        // own early exit, was ~1 % of `run` when every notification of a campaign checked its job id.
        // A 32-byte token's 64 digits take the constant-size path; another size's last digits (its
        // length is any even count) are compared a byte at a time.
        if case .inline = storage {
            guard utf8.count == Self.binaryHexCount else { return false }
            return withUnsafeTemporaryAllocation(byteCount: Self.binaryHexCount, alignment: 8) { hex in
                writeHex(into: hex)
                return Self.equal(UnsafeRawBufferPointer(hex), utf8, count: Self.binaryHexCount)
            }
        }
        let count = hexCount
        guard utf8.count == count else { return false }
        return withUnsafeTemporaryAllocation(byteCount: count, alignment: 8) { hex in
            writeHex(into: hex)
            return Self.equal(UnsafeRawBufferPointer(hex), utf8, count: count)
        }
    }

    @inline(__always)
    private static func equal(_ hex: UnsafeRawBufferPointer, _ utf8: UnsafeRawBufferPointer, count: Int) -> Bool {
        var differ: UInt64 = 0
        let whole = count & ~7
        for offset in stride(from: 0, to: whole, by: 8) {
            differ |= hex.load(fromByteOffset: offset, as: UInt64.self) ^ utf8.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
        }
        for offset in whole..<count { differ |= UInt64(hex[offset] ^ utf8[offset]) }
        return differ == 0
    }

    // Digits computed, not looked up in an array built per call (an allocation per token, and the
    // pipeline takes the hex of every job's token for the gate and again for the settle).
    @inline(__always)
    private static func hexDigit(_ n: UInt8) -> UInt8 { n < 10 ? n &+ UInt8(ascii: "0") : n &+ (UInt8(ascii: "a") &- 10) }

    /// A stable 64-bit hash of the token (FNV-1a over its bytes): routing to shards must not change
    /// between runs or processes, which Swift's seeded `Hasher` would.
    public var stableHash: UInt64 {
        switch storage {
        case .inline(let a, let b, let c, let d):
            var be = (a.bigEndian, b.bigEndian, c.bigEndian, d.bigEndian)
            return withUnsafeBytes(of: &be) { FNV1a64.hash($0) }
        case .outOfLine(let bytes):
            return FNV1a64.hash(bytes)
        }
    }

    // A 32-byte token is always inline and no other is, so tokens of different representations have
    // different sizes: they are never equal, and equal tokens hash alike.
    @inlinable
    public static func == (a: DeviceToken, b: DeviceToken) -> Bool {
        if case .inline(let a0, let a1, let a2, let a3) = a.storage {
            guard case .inline(let b0, let b1, let b2, let b3) = b.storage else { return false }
            return a0 == b0 && a1 == b1 && a2 == b2 && a3 == b3
        }
        guard case .outOfLine(let x) = a.storage, case .outOfLine(let y) = b.storage else { return false }
        return x == y
    }

    @inlinable
    public func hash(into hasher: inout Hasher) {
        switch storage {
        case .inline(let a, let b, let c, let d):
            hasher.combine(a)
            hasher.combine(b)
            hasher.combine(c)
            hasher.combine(d)
        case .outOfLine(let bytes):
            // `[UInt8]`'s hash combines its count first, so a prefix never collides by construction.
            hasher.combine(bytes)
        }
    }

    public var description: String { hex }
}
