import Crypto
import Kafka
import Redis

/// The mark of a paced job released at its slot (design §2.13): the release publishes it again with the
/// header `apns-paced-slot`, whose value is an HMAC-SHA256 of the message (its Kafka key, a 0 byte, its
/// value) under a key that only `run` reads (`{<p>}:release-key` in Redis, made by the first `run`). The
/// gate admits such a message without taking another slot only if the value verifies: a producer, who
/// writes to Kafka but does not read Redis, cannot make one, and a header copied from a released message
/// verifies for that very message only (the same job id: deduped).
struct ReleaseSignature: Sendable {
    static let header = "apns-paced-slot"
    /// Bytes of the MAC kept: 128 bits.
    static let tagBytes = 16

    /// The MAC with its key already padded in (copied per message: the key's processing is done once).
    private let keyed: HMAC<SHA256>

    init(key: [UInt8]) {
        keyed = HMAC<SHA256>(key: SymmetricKey(data: key))
    }

    /// The header a released message carries; `message` as held (``DeferredMessage/member(key:value:)``).
    func header(for message: [UInt8]) -> KafkaHeader {
        var mac = keyed
        mac.update(data: message)
        return KafkaHeader(key: Self.header, value: Self.hex(mac.finalize()))
    }

    /// Whether `message` carries a signature that verifies: released by `run` at its slot. A message with
    /// no such header costs one scan of its (usually empty) headers.
    func verifies(_ message: KafkaConsumerMessage) -> Bool {
        guard !message.headers.isEmpty, let claimed = message.headers.first(where: { $0.key == Self.header })?.value,
            claimed.count == 2 * Self.tagBytes
        else { return false }
        // The MAC of the message as held (key, 0, value), without making that copy of it.
        var mac = keyed
        if let key = message.key { mac.update(data: key) }
        mac.update(data: [0])
        mac.update(data: message.value)
        let expected = Self.hex(mac.finalize())
        // Constant time: how much of a guess matched does not show.
        var difference: UInt8 = 0
        for i in 0..<expected.count { difference |= claimed[i] ^ expected[i] }
        return difference == 0
    }

    /// The first ``tagBytes`` of a MAC as lower-case hex digits.
    private static func hex(_ code: HMAC<SHA256>.MAC) -> [UInt8] {
        code.withUnsafeBytes { raw in
            [UInt8](unsafeUninitializedCapacity: 2 * tagBytes) { out, count in
                for i in 0..<tagBytes {
                    out[2 * i] = digit(raw[i] >> 4)
                    out[2 * i + 1] = digit(raw[i] & 0x0f)
                }
                count = 2 * tagBytes
            }
        }
    }

    private static func digit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10 }
}
