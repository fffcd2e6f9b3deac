import Foundation
import Kafka
import Logging
import Pipeline
import Testing

/// `DeadLetter` (the pipeline's dead-letter format, design §3.4) against the librdkafka mock cluster.
@Suite struct DeadLetterTests {
    static var logger: Logger {
        var logger = Logger(label: "dead-letter-tests")
        logger.logLevel = .warning
        return logger
    }

    static func consumerConfig(_ cluster: MockCluster, group: String, topics: [String]) -> KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(
            bootstrapServers: cluster.bootstrapServers, groupID: group, topics: topics, sessionTimeout: .seconds(3),
            commitInterval: .milliseconds(200))
    }

    /// The next batch, or nil after 30 s (a deadline against hangs, not a timing assertion).
    static func nextBatch(_ consumer: KafkaConsumer) async -> [KafkaConsumerMessage]? {
        await withTaskGroup(of: [KafkaConsumerMessage]?.self) { group in
            group.addTask { await consumer.nextBatch() }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                return nil
            }
            let first = await group.next()!
            group.cancelAll()
            return first
        }
    }

    /// A dead letter keeps key, value and headers and says why and where from.
    @Test func deadLetterHeadersRoundTrip() async throws {
        let cluster = try MockCluster(
            brokers: 1, topics: [.init(name: "jobs", partitions: 3), .init(name: "jobs.dlq", partitions: 1)],
            logger: Self.logger)
        defer { cluster.stop() }
        let producer = try KafkaProducer.started(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: Self.logger)
        let value: [UInt8] = Array("{not json".utf8) + [0, 0xFF]
        try await producer.sendBatch([
            KafkaProducerMessage(
                topic: "jobs", key: Array("abcd".utf8), value: value,
                headers: [KafkaHeader(key: "trace", string: "t-1"), KafkaHeader(key: "empty", value: nil)])
        ])
        let jobs = try KafkaConsumer.started(
            configuration: Self.consumerConfig(cluster, group: "ingest", topics: ["jobs"]), logger: Self.logger)
        let message = try #require(await Self.nextBatch(jobs)?.first)
        #expect(message.headers.first(named: "empty") == KafkaHeader(key: "empty", value: nil))
        let dlq = DeadLetter(producer: producer, topic: "jobs.dlq")
        try await dlq.send(message, reason: "bad-json")
        #expect(jobs.settle([message.ref]) == 1)

        let reader = try KafkaConsumer.started(
            configuration: Self.consumerConfig(cluster, group: "ops", topics: ["jobs.dlq"]), logger: Self.logger)
        let letter = try #require(await Self.nextBatch(reader)?.first)
        #expect(letter.key == Array("abcd".utf8))
        #expect(letter.value == value)
        #expect(letter.headers.first(named: "trace")?.stringValue == "t-1")
        #expect(letter.headers.first(named: "reason")?.stringValue == "bad-json")
        #expect(letter.headers.first(named: "source-topic")?.stringValue == "jobs")
        #expect(letter.headers.first(named: "source-partition")?.stringValue == "\(message.partition)")
        #expect(letter.headers.first(named: "source-offset")?.stringValue == "\(message.offset)")
        let info = try #require(DeadLetter.info(of: letter))
        #expect(info.reason == "bad-json")
        #expect(info.source == message.ref)
        await jobs.close()
        await reader.close()
        await producer.close()
    }
}
