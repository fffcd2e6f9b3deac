import Kafka
import Redis
import Testing

@testable import Pipeline

/// A paced job released at its slot carries a signature only `run` can make (design §2.13): the gate
/// admits it without another slot, and no other message (a producer's header, a copied one).
struct ReleaseSignatureTests {
    let signature = ReleaseSignature(key: (0..<32).map { UInt8($0) })

    func message(key: String? = "ab12", value: String = #"{"id":"c:ab12"}"#, header: KafkaHeader? = nil) -> KafkaConsumerMessage {
        KafkaConsumerMessage(
            topic: "apns.jobs", partition: 0, offset: 1, key: key.map { Array($0.utf8) }, value: Array(value.utf8),
            headers: header.map { [$0] } ?? [])
    }

    @Test func onlyTheReleasedMessageVerifies() {
        let released = message()
        let header = signature.header(for: DeferredMessage.member(key: released.key, value: released.value))
        #expect(header.key == "apns-paced-slot" && header.value?.count == 32)
        #expect(signature.verifies(message(header: header)))
        // No header, the old marker "1", a made-up value, another message's signature, another key's.
        #expect(!signature.verifies(message()))
        #expect(!signature.verifies(message(header: KafkaHeader(key: "apns-paced-slot", string: "1"))))
        #expect(!signature.verifies(message(header: KafkaHeader(key: "apns-paced-slot", string: String(repeating: "0", count: 32)))))
        #expect(!signature.verifies(message(value: #"{"id":"c:other"}"#, header: header)))
        #expect(!signature.verifies(message(key: nil, header: header)))
        #expect(!ReleaseSignature(key: [UInt8](repeating: 7, count: 32)).verifies(message(header: header)))
        // A message without a key is signed as held (an empty key).
        let keyless = message(key: nil)
        #expect(
            signature.verifies(message(key: nil, header: signature.header(for: DeferredMessage.member(key: nil, value: keyless.value)))))
    }
}
