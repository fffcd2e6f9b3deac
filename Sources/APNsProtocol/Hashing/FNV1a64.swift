/// FNV-1a 64 (Fowler–Noll–Vo, 64-bit, xor then multiply): a tiny hash that is the same in every process
/// and run, unlike Swift's seeded `Hasher`. The pipeline routes tokens and broadcast channels to
/// connections with it, and the simulators and dead letters name payloads by it, so all of them must
/// agree byte for byte: one definition. Not for Redis' key buckets, which have their own (``RedisKeys``).
public enum FNV1a64 {
    public static let offsetBasis: UInt64 = 0xcbf2_9ce4_8422_2325
    public static let prime: UInt64 = 0x0000_0100_0000_01B3

    /// Inlinable: the shard routing hashes every token of a campaign with it.
    @inlinable
    public static func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var h = offsetBasis
        for byte in bytes {
            h ^= UInt64(byte)
            h &*= prime
        }
        return h
    }

    /// Over a concrete array, so it is specialized (a generic `Sequence` one cost ~1 µs per payload in
    /// the HTTP/2 simulator).
    @inlinable
    public static func hash(_ bytes: [UInt8]) -> UInt64 {
        bytes.withUnsafeBytes { hash($0) }
    }

    /// Of a string's UTF-8 bytes.
    @inlinable
    public static func hash(_ string: String) -> UInt64 {
        var string = string
        return string.withUTF8 { hash(UnsafeRawBufferPointer($0)) }
    }

    /// `hash` in 16 lower-case hex digits, zero-padded (the records' `payload_hash`, the dead letters'
    /// `body-fnv1a64`).
    public static func hex(_ hash: UInt64) -> String {
        let digits = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
