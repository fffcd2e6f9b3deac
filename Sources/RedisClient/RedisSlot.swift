/// The Redis Cluster hash slot of a key, as the cluster specification defines it:
/// `slot = CRC16(tag) mod 16384`, where CRC16 is the XMODEM variant (polynomial 0x1021, initial value 0,
/// no reflection) and `tag` is the text between the key's first `{` and the next `}` when that text is
/// non-empty, else the whole key.
///
/// The pipeline groups the keys of a batch by slot with this, so a script call touches one slot (what
/// Cluster requires) whether it is sent to a cluster node or, grouped further, to a single Redis.
/// Pure and allocation-free: it runs per key of every batch.
public struct RedisSlot: Sendable, Hashable, Comparable, CustomStringConvertible {
    public static let count = 16_384

    public let value: Int

    public init(_ value: Int) {
        precondition((0..<Self.count).contains(value), "slot \(value) out of 0..<16384")
        self.value = value
    }

    /// The slot of `key`.
    public init(key: String) {
        var key = key
        self = key.withUTF8 { RedisSlot(keyBytes: UnsafeRawBufferPointer($0)) }
    }

    /// The slot of a key given as bytes.
    public init(keyBytes bytes: UnsafeRawBufferPointer) {
        let tag = Self.hashTag(bytes)
        value = Int(Self.crc16(UnsafeRawBufferPointer(rebasing: bytes[tag])) & 0x3FFF)
    }

    public static func < (lhs: RedisSlot, rhs: RedisSlot) -> Bool { lhs.value < rhs.value }
    public var description: String { String(value) }

    /// The range of `bytes` that is hashed: inside the first `{…}` when non-empty, else all of it.
    static func hashTag(_ bytes: UnsafeRawBufferPointer) -> Range<Int> {
        guard let open = bytes.firstIndex(of: UInt8(ascii: "{")) else { return 0..<bytes.count }
        guard let close = bytes[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1 else {
            return 0..<bytes.count
        }
        return (open + 1)..<close
    }

    /// CRC16-CCITT (XMODEM): poly 0x1021, init 0, no reflection, no final xor.
    public static func crc16(_ bytes: UnsafeRawBufferPointer) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
        }
        return crc
    }

    public static func crc16(_ text: String) -> UInt16 {
        var text = text
        return text.withUTF8 { crc16(UnsafeRawBufferPointer($0)) }
    }

    private static let table: [UInt16] = (0..<256).map { index in
        var crc = UInt16(index) << 8
        for _ in 0..<8 {
            crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
        }
        return crc
    }
}
