import Foundation
import Kafka
import Logging

/// Mock-cluster helpers (as in KafkaTests/Support.swift: test targets cannot import each other).
enum Support {
    static var logger: Logger {
        var logger = Logger(label: "jobs-tests")
        logger.logLevel = ProcessInfo.processInfo.environment["KAFKA_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .warning
        return logger
    }

    /// Low session timeout: the mock makes a member that joins after the last one left wait about this long.
    static func consumerConfig(_ cluster: MockCluster, group: String, topics: [String]) -> KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(
            bootstrapServers: cluster.bootstrapServers, groupID: group, topics: topics,
            sessionTimeout: .seconds(3), maxBatchSize: 50, maxBufferedMessages: 1000, commitInterval: .milliseconds(200))
    }

    static func producer(_ cluster: MockCluster) throws -> KafkaProducer {
        try KafkaProducer.started(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: logger)
    }

    /// The next batch, or nil after `timeout` (a deadline against hangs, not a timing assertion).
    static func nextBatch(_ consumer: KafkaConsumer, timeout: Duration = .seconds(30)) async -> [KafkaConsumerMessage]? {
        await withTaskGroup(of: [KafkaConsumerMessage]?.self) { group in
            group.addTask { await consumer.nextBatch() }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next()!
            group.cancelAll()
            return first
        }
    }
}
