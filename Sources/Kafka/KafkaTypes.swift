import CRdKafka

/// A topic and partition: the unit of assignment, ordering and offset tracking.
public struct TopicPartition: Hashable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// Identifies one consumed message, enough to settle it. Cheap to keep for every in-flight message.
public struct MessageRef: Hashable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }

    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }
    public var description: String { "\(topic)[\(partition)]@\(offset)" }
}

/// A Kafka record header. Values are raw bytes; `nil` is Kafka's null header value.
public struct KafkaHeader: Hashable, Sendable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    public init(key: String, string: String) {
        self.key = key
        self.value = Array(string.utf8)
    }

    /// The value as UTF-8 text, when it is valid UTF-8.
    public var stringValue: String? {
        value.flatMap { String(validating: $0, as: UTF8.self) }
    }
}

extension Array where Element == KafkaHeader {
    /// The first header named `key` (Kafka allows repeated keys; the first one wins here).
    public func first(named key: String) -> KafkaHeader? { first { $0.key == key } }
}

/// A message as consumed: raw bytes, decoding is the caller's business.
public struct KafkaConsumerMessage: Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]
    /// Message timestamp in milliseconds since the epoch, when the broker provided one.
    public var timestampMilliseconds: Int64?

    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8],
        headers: [KafkaHeader] = [], timestampMilliseconds: Int64? = nil
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestampMilliseconds = timestampMilliseconds
    }

    public var ref: MessageRef { MessageRef(topic: topic, partition: partition, offset: offset) }
    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }
}

/// A message to produce. `partition == nil` lets librdkafka's partitioner choose (by key hash).
public struct KafkaProducerMessage: Sendable {
    public var topic: String
    public var partition: Int32?
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]

    public init(
        topic: String, partition: Int32? = nil, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = []
    ) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
    }
}

/// An error from librdkafka or from this layer.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    /// The group refused a commit because it is rebalancing (the mock cluster does while any rebalance
    /// is under way; a real one between generations): the next commit after the rebalance carries the
    /// same positions.
    public var isRebalanceInProgress: Bool { code == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS.rawValue }

    /// librdkafka's `rd_kafka_resp_err_t` value (negative: client-side, positive: broker), or 0 when
    /// the error is this layer's own (`kind` says which).
    public var code: Int32
    public var kind: Kind
    public var message: String

    public enum Kind: Sendable, Equatable {
        case rdkafka
        case configuration
        case closed
        case mockCluster
    }

    public init(code: Int32 = 0, kind: Kind, message: String) {
        self.code = code
        self.kind = kind
        self.message = message
    }

    init(_ err: rd_kafka_resp_err_t, _ context: String) {
        self.code = err.rawValue
        self.kind = .rdkafka
        self.message = "\(context): \(String(cString: rd_kafka_err2name(err))): \(String(cString: rd_kafka_err2str(err)))"
    }

    static let closed = KafkaError(kind: .closed, message: "the client is closed")

    /// librdkafka's symbolic name of `code`, e.g. `_QUEUE_FULL` or `REBALANCE_IN_PROGRESS`.
    public var name: String {
        kind == .rdkafka ? String(cString: rd_kafka_err2name(rd_kafka_resp_err_t(rawValue: code))) : "\(kind)"
    }

    /// The message is larger than the producer's `message.max.bytes` (refused at enqueue) or the
    /// broker's limit (refused at delivery): retrying the same bytes cannot succeed.
    public var isMessageTooLarge: Bool {
        kind == .rdkafka && code == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE.rawValue
    }

    public var description: String { "KafkaError(\(message))" }
}

/// One message whose delivery failed, as reported by librdkafka's delivery report.
public struct KafkaDeliveryFailure: Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32
    public var key: [UInt8]?
    public var value: [UInt8]
    public var error: KafkaError

    public init(topic: String, partition: Int32, key: [UInt8]? = nil, value: [UInt8], error: KafkaError) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.error = error
    }

    public var description: String { "\(topic)[\(partition)]: \(error.message)" }
}

/// Thrown when at least one message of a batch (or since the last `flush()`) was not delivered.
public struct KafkaDeliveryError: Error, Sendable, CustomStringConvertible {
    public var failures: [KafkaDeliveryFailure]
    public var description: String {
        "KafkaDeliveryError(\(failures.count) message(s) not delivered; first: \(failures.first.map { "\($0)" } ?? "-"))"
    }
}
