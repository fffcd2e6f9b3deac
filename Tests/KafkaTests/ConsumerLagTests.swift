import Kafka
import Testing

@Suite struct ConsumerLagTests {
    /// The lag per partition (librdkafka's statistics: high watermark, minus the first unsettled offset):
    /// messages taken but not settled count as lag; once settled, 0. Without statistics, no lag at all.
    @Test func lagFollowsSettlement() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 1)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        try await producer.sendBatch((0..<120).map { KafkaProducerMessage(topic: "jobs", key: nil, value: Support.bytes("\($0)")) })
        var config = Support.consumerConfig(cluster, group: "lag", topics: ["jobs"], maxBatchSize: 500)
        config.properties["statistics.interval.ms"] = "100"
        let consumer = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        var taken: [KafkaConsumerMessage] = []
        while taken.count < 120 {
            taken += try #require(await Support.nextBatch(consumer))
        }
        let tp = TopicPartition(topic: "jobs", partition: 0)
        try await Support.eventually("lag of the 120 unsettled messages") { consumer.consumerLag[tp] == 120 }
        consumer.settle(Array(taken.prefix(100)).map(\.ref))
        try await Support.eventually("lag of the 20 still unsettled") { consumer.consumerLag[tp] == 20 }
        consumer.settle(taken.map(\.ref))
        try await Support.eventually("no lag") { consumer.consumerLag[tp] == 0 }
        await consumer.close()
        await producer.close()

        // No statistics asked for: nothing reported (not a misleading 0).
        let quiet = try KafkaConsumer.started(
            configuration: Support.consumerConfig(cluster, group: "quiet", topics: ["jobs"]), logger: Support.logger)
        _ = try #require(await Support.nextBatch(quiet))
        #expect(quiet.consumerLag.isEmpty)
        await quiet.close()
    }
}
