import Synchronization
import Logging

/// librdkafka's mock Kafka cluster, served on loopback TCP: real Kafka protocol (produce, fetch,
/// consumer groups, committed offsets) for development, tests and the demo.
///
/// Traits of the librdkafka 2.0.2 mock worth knowing: it keeps only about 5 MiB / 100k message sets
/// per partition and silently drops older data (give topics enough partitions; the consumer reports the
/// resulting gaps); a new group's first assignment takes about 3 s; after the last member leaves, a new
/// member waits about `session.timeout.ms`; commits are refused while a group is rebalancing.
///
/// `@unchecked Sendable`: the cluster and its host handle are thread-safe librdkafka objects; `stop()`
/// is serialised by `state`.
public final class MockCluster: @unchecked Sendable {
    /// A topic to create: name and partition count.
    public struct Topic: Sendable, Hashable {
        public var name: String
        public var partitions: Int32
        public init(name: String, partitions: Int32) {
            self.name = name
            self.partitions = partitions
        }
    }

    /// `host:port,...` of the brokers, for `bootstrap.servers`.
    public let bootstrapServers: String
    public let brokerCount: Int
    private let logger: Logger
    private let state: Mutex<(host: RDKafkaClient, cluster: OpaquePointer)?>

    public init(brokers: Int = 3, topics: [Topic] = [], logger: Logger) throws {
        precondition(brokers > 0)
        // The mock cluster lives inside an rd_kafka_t (its internal bookkeeping and threads): a producer
        // handle with no brokers of its own, used for nothing else (librdkafka's own tests do the same).
        let host = try RDKafkaClient.make(
            kind: .producer, properties: ["client.id": "kafka-dev-mock-host", "log_level": "4"], logger: logger)
        guard let cluster = host.startMockCluster(brokers: Int32(brokers)) else {
            host.destroy()
            throw KafkaError(kind: .mockCluster, message: "rd_kafka_mock_cluster_new failed")
        }
        self.bootstrapServers = RDKafkaClient.mockBootstraps(cluster)
        self.brokerCount = brokers
        self.logger = logger
        self.state = Mutex((host, cluster))
        for topic in topics { try createTopic(topic.name, partitions: topic.partitions) }
        logger.info(
            "Kafka mock cluster started",
            metadata: ["kafka.bootstrap": "\(bootstrapServers)", "kafka.brokers": "\(brokers)"])
    }

    deinit { stop() }

    /// Creates a topic (replication 1: the mock keeps one copy anyway).
    public func createTopic(_ name: String, partitions: Int32) throws {
        try state.withLock { s in
            guard let s else { throw KafkaError(kind: .mockCluster, message: "mock cluster stopped") }
            try RDKafkaClient.mockCreateTopic(s.cluster, name: name, partitions: partitions, replication: 1)
        }
        logger.debug("Kafka mock topic created", metadata: ["kafka.topic": "\(name)", "kafka.partitions": "\(partitions)"])
    }

    /// Makes every request for `topic` fail with the broker error `code` (e.g. 29,
    /// TOPIC_AUTHORIZATION_FAILED) until called again with 0: a topic that refuses writes, for tests of
    /// what the pipeline does when its dead-letter topic is unusable.
    public func setTopicError(_ topic: String, code: Int32) {
        state.withLock { s in
            guard let s else { return }
            RDKafkaClient.mockSetTopicError(s.cluster, name: topic, code: code)
        }
    }

    /// Closes the listeners and frees the data. Idempotent. Clients still connected see broker-down errors.
    public func stop() {
        let s = state.withLock { s -> (host: RDKafkaClient, cluster: OpaquePointer)? in
            defer { s = nil }
            return s
        }
        guard let s else { return }
        RDKafkaClient.mockDestroy(s.cluster)
        s.host.destroy()
        logger.info("Kafka mock cluster stopped", metadata: ["kafka.bootstrap": "\(bootstrapServers)"])
    }
}
