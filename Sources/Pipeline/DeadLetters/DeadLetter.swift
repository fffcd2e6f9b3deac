import APNsProtocol
import Kafka

/// Sends messages the pipeline cannot process to the dead-letter topic: unchanged (same key, value and
/// original headers) plus headers saying why and where from, so an operator can inspect and replay them.
/// Delivery is checked: `send` returns only when the dead letter is stored, and throws otherwise — the
/// caller must not settle the source message before that.
///
/// A message too large for the dead-letter topic (its producer's `message.max.bytes`, or the broker's
/// limit) is dead-lettered **without its body**: our headers plus `original-size` and `body-fnv1a64`
/// identify it, and the source position says where the full message still is. One poison message thus
/// costs one dead letter, never a dead-letter write that can never succeed.
public struct DeadLetter: Sendable {
    /// Header names (contract: ops tools read them).
    public enum Header {
        public static let reason = "reason"
        public static let sourceTopic = "source-topic"
        public static let sourcePartition = "source-partition"
        public static let sourceOffset = "source-offset"
        /// Only on a dead letter without its body: why the body was left out.
        public static let bodyOmitted = "body-omitted"
        /// Only on a dead letter without its body: the original value's size in bytes (decimal).
        public static let originalSize = "original-size"
        /// Only on a dead letter without its body: FNV-1a 64 of the original value, 16 hex digits.
        public static let bodyHash = "body-fnv1a64"

        static let ours: Set<String> = [reason, sourceTopic, sourcePartition, sourceOffset, bodyOmitted, originalSize, bodyHash]
    }

    public let producer: KafkaProducer
    public let topic: String
    /// The dead-letter producer's `message.max.bytes`: a letter whose estimated wire size exceeds it is
    /// sent without its body (librdkafka would refuse it at enqueue).
    public let maxMessageBytes: Int

    /// Keys longer than this are left out of a body-less letter too (a key is normally a token or an id).
    static let maxKeptKeyBytes = 1024

    public init(producer: KafkaProducer, topic: String, maxMessageBytes: Int = 1_000_000) {
        self.producer = producer
        self.topic = topic
        self.maxMessageBytes = maxMessageBytes
    }

    /// The dead letter for `message`: same key and value; the original headers followed by ours. When it
    /// would not fit `maxMessageBytes`, the body-less letter instead (``bodylessLetter(for:reason:)``).
    public func letter(for message: KafkaConsumerMessage, reason: String) -> KafkaProducerMessage {
        var headers = message.headers.filter { !Header.ours.contains($0.key) }
        headers.append(contentsOf: Self.sourceHeaders(message, reason: reason))
        let full = KafkaProducerMessage(topic: topic, key: message.key, value: message.value, headers: headers)
        return Self.estimatedWireSize(full) > maxMessageBytes ? bodylessLetter(for: message, reason: reason) : full
    }

    /// The letter without the value (and without the original headers, and the key if it is long):
    /// our headers, the original size and a hash of the value.
    public func bodylessLetter(for message: KafkaConsumerMessage, reason: String) -> KafkaProducerMessage {
        var headers = Self.sourceHeaders(message, reason: reason)
        headers.append(
            KafkaHeader(key: Header.bodyOmitted, string: "larger than the dead-letter topic's message.max.bytes (\(maxMessageBytes))"))
        headers.append(KafkaHeader(key: Header.originalSize, string: String(message.value.count)))
        headers.append(KafkaHeader(key: Header.bodyHash, string: Self.fnv1a64Hex(message.value)))
        let key = (message.key?.count ?? 0) <= Self.maxKeptKeyBytes ? message.key : nil
        return KafkaProducerMessage(topic: topic, key: key, value: [], headers: headers)
    }

    /// Dead-letters one message; returns once delivered.
    public func send(_ message: KafkaConsumerMessage, reason: String) async throws {
        try await send([(message, reason)])
    }

    /// Dead-letters several messages in one batch; returns once all are delivered. A letter the producer
    /// or broker refuses as too large is sent again without its body; any other failure is thrown as
    /// ``DeadLetterError``, naming the source messages whose letters were not stored (the others were).
    public func send(_ messages: [(message: KafkaConsumerMessage, reason: String)]) async throws {
        if messages.isEmpty { return }
        let letters = messages.map { letter(for: $0.message, reason: $0.reason) }
        let failed = await sendMatching(letters, sources: messages)
        if failed.isEmpty { return }
        // Letters refused as too large go again without their body.
        let tooLarge = failed.filter { $0.failure.error.isMessageTooLarge && !$0.letter.value.isEmpty }
        var unsent = failed.filter { !($0.failure.error.isMessageTooLarge && !$0.letter.value.isEmpty) }
        if !tooLarge.isEmpty {
            let bodyless = tooLarge.map { bodylessLetter(for: $0.source.message, reason: $0.source.reason) }
            unsent += await sendMatching(bodyless, sources: tooLarge.map(\.source))
        }
        if !unsent.isEmpty {
            throw DeadLetterError(unsent: unsent.map(\.source.message.ref), failures: unsent.map(\.failure))
        }
    }

    /// Sends `letters`; returns the ones not delivered with their source and failure. A failure carries
    /// its letter's key and value, which is how it is matched back (each failure matched once).
    private func sendMatching(
        _ letters: [KafkaProducerMessage], sources: [(message: KafkaConsumerMessage, reason: String)]
    ) async -> [(letter: KafkaProducerMessage, source: (message: KafkaConsumerMessage, reason: String), failure: KafkaDeliveryFailure)] {
        do {
            try await producer.sendBatch(letters)
            return []
        } catch let error as KafkaDeliveryError {
            var failures = error.failures
            var out:
                [(letter: KafkaProducerMessage, source: (message: KafkaConsumerMessage, reason: String), failure: KafkaDeliveryFailure)] =
                    []
            for (letter, source) in zip(letters, sources) {
                if let i = failures.firstIndex(where: { $0.key == letter.key && $0.value == letter.value }) {
                    out.append((letter, source, failures.remove(at: i)))
                }
            }
            return out
        } catch {
            // Closed producer and the like: nothing was stored.
            let failure = { (l: KafkaProducerMessage) in
                KafkaDeliveryFailure(
                    topic: l.topic, partition: -1, key: l.key, value: l.value,
                    error: (error as? KafkaError) ?? KafkaError(kind: .closed, message: "\(error)"))
            }
            return zip(letters, sources).map { ($0, $1, failure($0)) }
        }
    }

    /// Reads the dead-letter headers of a message from the dead-letter topic.
    public static func info(of message: KafkaConsumerMessage) -> (reason: String, source: MessageRef)? {
        guard let reason = message.headers.first(named: Header.reason)?.stringValue,
            let topic = message.headers.first(named: Header.sourceTopic)?.stringValue,
            let partition = message.headers.first(named: Header.sourcePartition)?.stringValue.flatMap({ Int32($0) }),
            let offset = message.headers.first(named: Header.sourceOffset)?.stringValue.flatMap({ Int64($0) })
        else { return nil }
        return (reason, MessageRef(topic: topic, partition: partition, offset: offset))
    }

    static func sourceHeaders(_ message: KafkaConsumerMessage, reason: String) -> [KafkaHeader] {
        [
            KafkaHeader(key: Header.reason, string: reason),
            KafkaHeader(key: Header.sourceTopic, string: message.topic),
            KafkaHeader(key: Header.sourcePartition, string: String(message.partition)),
            KafkaHeader(key: Header.sourceOffset, string: String(message.offset)),
        ]
    }

    /// An upper estimate of what librdkafka checks against `message.max.bytes`: key, value, headers and
    /// the record batch overhead (v2 records: ~61 bytes of batch header plus varints per record/header).
    static func estimatedWireSize(_ message: KafkaProducerMessage) -> Int {
        let headers = message.headers.reduce(0) { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) + 10 }
        return (message.key?.count ?? 0) + message.value.count + headers + 128
    }

    /// FNV-1a 64 in 16 lower-case hex digits (the simulator's payload hash uses the same function).
    public static func fnv1a64Hex(_ bytes: [UInt8]) -> String { FNV1a64.hex(FNV1a64.hash(bytes)) }
}

/// Dead letters that could not be stored: their source messages must stay unsettled.
public struct DeadLetterError: Error, Sendable, CustomStringConvertible {
    /// The source messages whose letters were not stored (the batch's others were).
    public var unsent: [MessageRef]
    public var failures: [KafkaDeliveryFailure]

    public var description: String {
        "DeadLetterError(\(unsent.count) dead letter(s) not stored; first: \(failures.first.map { "\($0)" } ?? "-"))"
    }
}
