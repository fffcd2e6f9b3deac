import Kafka
import Logging
import ServiceLifecycle
import Testing

/// `KafkaConsumer` and `KafkaProducer` as `Service`s, against the mock cluster over TCP: `run()` polls,
/// and every way it ends (`close()`, its cancellation, a service group's graceful shutdown) commits the
/// settled positions and leaves the group, which the group's next member shows by starting there.
@Suite(.timeLimit(.minutes(3))) struct ClientLifecycleTests {
    static let count = 20

    /// Publishes `count` messages ("0"…) and returns the cluster.
    private static func cluster() async throws -> (MockCluster, KafkaProducer) {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 2)], logger: Support.logger)
        let producer = try Support.producer(cluster)
        try await producer.sendBatch((0..<count).map { .init(topic: "jobs", key: nil, value: Support.bytes("\($0)")) })
        return (cluster, producer)
    }

    /// Takes and settles `count` messages.
    private static func consumeAll(_ consumer: KafkaConsumer) async throws {
        var got = 0
        while got < count {
            let batch = try #require(await Support.nextBatch(consumer), "only \(got) of \(count) consumed")
            got += batch.count
            #expect(consumer.settle(batch.map(\.ref)) == batch.count)
        }
        #expect(got == count)
    }

    /// The group's next member gets only what was published after the first one's positions were
    /// committed: a message "after".
    private static func expectNextMemberStartsAtTheCommit(_ cluster: MockCluster, _ producer: KafkaProducer) async throws {
        try await producer.sendBatch([.init(topic: "jobs", key: nil, value: Support.bytes("after"))])
        let next = try KafkaConsumer.started(
            configuration: Support.consumerConfig(cluster, group: "g", topics: ["jobs"]), logger: Support.logger)
        let batch = try #require(await Support.nextBatch(next))
        #expect(batch.map { Support.string($0.value) } == ["after"], "the settled messages were committed")
        await next.close()
    }

    @Test func closeEndsRunAfterCommitting() async throws {
        let (cluster, producer) = try await Self.cluster()
        defer { cluster.stop() }
        let consumer = try KafkaConsumer(
            configuration: Support.consumerConfig(cluster, group: "g", topics: ["jobs"]), logger: Support.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await consumer.run() }
            try await Self.consumeAll(consumer)
            await #expect(throws: KafkaError.self, "one poll loop per consumer") { try await consumer.run() }
            await consumer.close()
            try await group.waitForAll()  // run() returned
        }
        #expect(await consumer.nextBatch() == nil)
        await #expect(throws: KafkaError.self) { try await consumer.commit() }
        try await Self.expectNextMemberStartsAtTheCommit(cluster, producer)
        await producer.close()
    }

    @Test func cancellingRunClosesTheConsumer() async throws {
        let (cluster, producer) = try await Self.cluster()
        defer { cluster.stop() }
        let consumer = try KafkaConsumer(
            configuration: Support.consumerConfig(cluster, group: "g", topics: ["jobs"]), logger: Support.logger)
        let running = Task { try await consumer.run() }
        try await Self.consumeAll(consumer)
        running.cancel()
        try await running.value
        #expect(await consumer.nextBatch() == nil, "closed by the cancellation")
        try await Self.expectNextMemberStartsAtTheCommit(cluster, producer)
        await producer.close()
    }

    @Test func gracefulShutdownOfAServiceGroupClosesBothClients() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 2)], logger: Support.logger)
        defer { cluster.stop() }
        var producerConfiguration = KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers)
        producerConfiguration.stopsOnGracefulShutdown = true
        let producer = try KafkaProducer(configuration: producerConfiguration, logger: Support.logger)
        var consumerConfiguration = Support.consumerConfig(cluster, group: "g", topics: ["jobs"])
        consumerConfiguration.stopsOnGracefulShutdown = true
        let consumer = try KafkaConsumer(configuration: consumerConfiguration, logger: Support.logger)
        let services = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: producer), .init(service: consumer)], logger: Support.logger))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await services.run() }
            // Delivered: the producer's run() serves the delivery reports.
            try await producer.sendBatch((0..<Self.count).map { .init(topic: "jobs", key: nil, value: Support.bytes("\($0)")) })
            try await Self.consumeAll(consumer)
            await services.triggerGracefulShutdown()
            try await group.waitForAll()  // both run()s returned
        }
        #expect(await consumer.nextBatch() == nil)
        await #expect(throws: KafkaError.self, "the producer is closed") {
            try await producer.sendBatch([.init(topic: "jobs", key: nil, value: [1])])
        }
        let next = try Support.producer(cluster)
        try await Self.expectNextMemberStartsAtTheCommit(cluster, next)
        await next.close()
    }

    @Test func closeBeforeRunThenRunReturnsAtOnce() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 1)], logger: Support.logger)
        defer { cluster.stop() }
        let consumer = try KafkaConsumer(
            configuration: Support.consumerConfig(cluster, group: "g", topics: ["jobs"]), logger: Support.logger)
        await consumer.close()
        try await consumer.run()
        #expect(await consumer.nextBatch() == nil)
        await #expect(throws: KafkaError.self) { try await consumer.commit() }

        let producer = try KafkaProducer(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: Support.logger)
        await producer.close()
        try await producer.run()
        await #expect(throws: KafkaError.self) { try await producer.sendBatch([.init(topic: "jobs", key: nil, value: [1])]) }
    }

    /// Configuration errors are thrown by `init`, before any `run()`.
    @Test func initRefusesABadConfiguration() {
        #expect(throws: KafkaError.self) {
            _ = try KafkaConsumer(
                configuration: KafkaConsumerConfiguration(
                    bootstrapServers: "localhost:1", groupID: "g", topics: ["jobs"], properties: ["no.such.property": "1"]),
                logger: Support.logger)
        }
        #expect(throws: KafkaError.self) {
            _ = try KafkaProducer(
                configuration: KafkaProducerConfiguration(bootstrapServers: "localhost:1", properties: ["no.such.property": "1"]),
                logger: Support.logger)
        }
    }
}
