/// Sends messages the pipeline cannot process to the dead-letter topic: unchanged (same key, value and
/// original headers) plus headers saying why and where from, so an operator can inspect and replay them.
/// Delivery is checked: `send` returns only when the dead letter is stored, and throws otherwise — the
/// caller must not settle the source message before that.
public struct DeadLetter: Sendable {
    /// Header names (contract: ops tools read them).
    public enum Header {
        public static let reason = "reason"
        public static let sourceTopic = "source-topic"
        public static let sourcePartition = "source-partition"
        public static let sourceOffset = "source-offset"
    }

    public let producer: KafkaProducer
    public let topic: String

    public init(producer: KafkaProducer, topic: String) {
        self.producer = producer
        self.topic = topic
    }

    /// The dead letter for `message`: same key and value; the original headers followed by ours.
    public func letter(for message: KafkaConsumerMessage, reason: String) -> KafkaProducerMessage {
        var headers = message.headers.filter {
            ![Header.reason, Header.sourceTopic, Header.sourcePartition, Header.sourceOffset].contains($0.key)
        }
        headers.append(KafkaHeader(key: Header.reason, string: reason))
        headers.append(KafkaHeader(key: Header.sourceTopic, string: message.topic))
        headers.append(KafkaHeader(key: Header.sourcePartition, string: String(message.partition)))
        headers.append(KafkaHeader(key: Header.sourceOffset, string: String(message.offset)))
        return KafkaProducerMessage(topic: topic, key: message.key, value: message.value, headers: headers)
    }

    /// Dead-letters one message; returns once delivered.
    public func send(_ message: KafkaConsumerMessage, reason: String) async throws {
        try await producer.sendBatch([letter(for: message, reason: reason)])
    }

    /// Dead-letters several messages in one batch; returns once all are delivered.
    public func send(_ messages: [(message: KafkaConsumerMessage, reason: String)]) async throws {
        try await producer.sendBatch(messages.map { letter(for: $0.message, reason: $0.reason) })
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
}
