import Kafka
import Testing

/// `KafkaConsumer.hold` / `release` (design §2.11: a campaign at its held-bytes cap holds its partitions):
/// a held partition delivers nothing beyond what was buffered before, the others go on; once released it
/// continues from the first message not handed out, with no gap and no message twice.
@Suite struct PartitionHoldTests {
    @Test func aHeldPartitionWaitsAndContinuesWhereItStopped() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 2)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        let perPartition = 1000
        try await producer.sendBatch(
            (0..<2).flatMap { p in
                (0..<perPartition).map { i in
                    KafkaProducerMessage(topic: "jobs", partition: Int32(p), key: nil, value: Support.bytes("\(p)-\(i)"))
                }
            })
        let maxBuffered = 100
        let consumer = try KafkaConsumer.started(
            configuration: Support.consumerConfig(cluster, group: "hold", topics: ["jobs"], maxBatchSize: 50, maxBuffered: maxBuffered),
            logger: Support.logger)
        var offsets: [Int32: [Int64]] = [0: [], 1: []]
        func take(_ messages: [KafkaConsumerMessage]) {
            for m in messages { offsets[m.partition, default: []].append(m.offset) }
            consumer.settle(messages.map(\.ref))
        }
        // The first batch tells which partition comes first: that one is held.
        let first = try #require(await Support.nextBatch(consumer))
        take(first)
        let held = TopicPartition(topic: "jobs", partition: first[0].partition)
        let other = held.partition == 0 ? Int32(1) : Int32(0)
        consumer.hold([held])
        #expect(consumer.statistics.heldPartitions == [held])
        // The other partition is read to its end, and a message published to it now arrives too: the
        // consumer is fetching, while the held one gives at most what was buffered before the hold.
        try await producer.sendBatch([KafkaProducerMessage(topic: "jobs", partition: other, key: nil, value: Support.bytes("late"))])
        while offsets[other]!.count < perPartition + 1 {
            take(try #require(await Support.nextBatch(consumer), "the other partition stopped at \(offsets[other]!.count)"))
        }
        let heldSeen = offsets[held.partition]!.count
        #expect(heldSeen <= first.count + maxBuffered + 50, "\(heldSeen) messages of the held partition")
        #expect(heldSeen < perPartition)

        consumer.release([held])
        #expect(consumer.statistics.heldPartitions.isEmpty)
        while offsets[held.partition]!.count < perPartition {
            take(try #require(await Support.nextBatch(consumer), "the released partition stopped at \(offsets[held.partition]!.count)"))
        }
        for (p, list) in offsets {
            #expect(list == Array(0..<Int64(list.count)), "partition \(p): every offset once, in order")
        }
        let stats = consumer.statistics
        #expect(stats.offsetGaps == 0 && stats.offsetResets == 0)
        await consumer.close()
        await producer.close()
    }
}
