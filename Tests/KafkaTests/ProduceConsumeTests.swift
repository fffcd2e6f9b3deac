import Kafka
import Testing

@Suite struct ProduceConsumeTests {
    /// Thousands of messages through real TCP: every one consumed once, per-partition offsets contiguous,
    /// per-key order kept; the bounded buffer fills, the consumer holds, and consumes again.
    @Test func produceAndConsumeWithBackPressure() async throws {
        let cluster = try MockCluster(brokers: 3, topics: [.init(name: "jobs", partitions: 4)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        let total = 3000
        var batch: [KafkaProducerMessage] = []
        for i in 0..<total - 100 {
            batch.append(.init(topic: "jobs", key: Support.bytes("key-\(i % 37)"), value: Support.bytes("\(i)")))
        }
        try await producer.sendBatch(batch)
        // The enqueue-then-flush path too.
        for i in (total - 100)..<total {
            try await producer.send(topic: "jobs", key: Support.bytes("key-\(i % 37)"), value: Support.bytes("\(i)"))
        }
        try await producer.flush()

        let maxBuffered = 300
        let consumer = try KafkaConsumer.started(
            configuration: Support.consumerConfig(cluster, group: "g", topics: ["jobs"], maxBatchSize: 50, maxBuffered: maxBuffered),
            logger: Support.logger)
        var seen: [Int] = []
        var lastOffset: [Int32: Int64] = [:]
        var lastValueOfKey: [String: Int] = [:]
        func take(_ messages: [KafkaConsumerMessage]) {
            #expect(messages.count <= 50)
            for m in messages {
                let v = Int(Support.string(m.value))!
                seen.append(v)
                if let last = lastOffset[m.partition] { #expect(m.offset == last + 1) } else { #expect(m.offset == 0) }
                lastOffset[m.partition] = m.offset
                let key = Support.string(m.key)
                if let last = lastValueOfKey[key] { #expect(v > last, "order within key \(key)") }
                lastValueOfKey[key] = v
            }
            #expect(consumer.settle(messages.map(\.ref)) == messages.count)
        }
        let first = try #require(await Support.nextBatch(consumer))
        take(first)
        // Stop consuming: the buffer fills up and the consumer must hold, with the buffer bounded.
        try await Support.eventually("consumer pauses") { consumer.statistics.pauses >= 1 }
        let stats = consumer.statistics
        #expect(stats.messagesReceived - first.count <= maxBuffered + 50)
        while seen.count < total {
            let messages = try #require(await Support.nextBatch(consumer), "only \(seen.count) of \(total) consumed")
            take(messages)
        }
        #expect(Set(seen).count == total)
        #expect(seen.count == total)
        try await consumer.commit()
        let positions = consumer.commitPositions
        #expect(positions.values.reduce(0, +) == Int64(total), "committed positions cover every message")
        let final = consumer.statistics
        #expect(final.offsetGaps == 0)
        #expect(final.offsetResets == 0)
        #expect(final.messagesSettled == total)
        await consumer.close()
        #expect(await consumer.nextBatch() == nil)
        await producer.close()
    }

    /// A failed delivery is an error the caller sees, never silently dropped.
    @Test func failedDeliveriesAreReported() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "small", partitions: 1)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try KafkaProducer.started(
            configuration: .init(bootstrapServers: cluster.bootstrapServers, properties: ["message.timeout.ms": "3000"]),
            logger: Support.logger)
        let good = KafkaProducerMessage(topic: "small", key: nil, value: Support.bytes("ok"))
        let badPartition = KafkaProducerMessage(topic: "small", partition: 7, key: Support.bytes("k"), value: Support.bytes("nope"))
        let error = await #expect(throws: KafkaDeliveryError.self) {
            try await producer.sendBatch([good, badPartition, good])
        }
        #expect(error?.failures.count == 1)
        #expect(error?.failures.first?.partition == 7)
        #expect(error?.failures.first?.value == Support.bytes("nope"))
        // The good ones were delivered: the batch API reports exactly the failures.
        try await producer.sendBatch([good])
        await producer.close()
        await #expect(throws: KafkaError.self) { try await producer.send(topic: "small", key: nil, value: [1]) }
    }
}

@Suite struct ProducerFailureTests {
    /// A message librdkafka refuses at enqueue (larger than `message.max.bytes`) is reported once, and
    /// the rest of the batch is still delivered.
    @Test func aRefusedMessageIsReportedOnce() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 1)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try KafkaProducer.started(
            configuration: .init(bootstrapServers: cluster.bootstrapServers, properties: ["message.max.bytes": "10000"]),
            logger: Support.logger)
        let messages = [
            KafkaProducerMessage(topic: "jobs", key: nil, value: Support.bytes("small")),
            KafkaProducerMessage(topic: "jobs", key: nil, value: [UInt8](repeating: 0x41, count: 20_000)),
            KafkaProducerMessage(topic: "jobs", key: nil, value: Support.bytes("small too")),
        ]
        do {
            try await producer.sendBatch(messages)
            Issue.record("the oversized message was not refused")
        } catch let error as KafkaDeliveryError {
            #expect(error.failures.count == 1, "\(error.failures)")
            #expect(error.failures.first?.error.isMessageTooLarge == true, "\(error)")
            #expect(error.failures.first?.value.count == 20_000)
        }
        await producer.close()
    }
}
