import Foundation
import Kafka
import Logging

/// The helpers of the test suites that talk to librdkafka's mock cluster (KafkaTests, JobsTests, the
/// broker fault tests of OperationsTests): one copy, since test targets cannot import each other.
public enum KafkaTestSupport {
    /// KAFKA_TEST_LOG=debug (etc.) shows the clients' logs; warnings only by default.
    public static var logger: Logger {
        var logger = Logger(label: "kafka-tests")
        logger.logLevel = ProcessInfo.processInfo.environment["KAFKA_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .warning
        return logger
    }

    /// Low session timeout: the mock makes a member that joins after the last one left wait about this long.
    public static func consumerConfig(
        _ cluster: MockCluster, group: String, topics: [String], maxBatchSize: Int = 200, maxBuffered: Int = 2000
    ) -> KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(
            bootstrapServers: cluster.bootstrapServers, groupID: group, topics: topics,
            // KAFKA_TEST_STRATEGY=cooperative-sticky (etc.) reruns the suites with another assignment protocol.
            // KAFKA_TEST_DEBUG=cgrp,fetch,topic (etc.) turns on librdkafka's debug contexts, to see why a run stalls.
            properties: debugProperties.merging(
                ProcessInfo.processInfo.environment["KAFKA_TEST_STRATEGY"].map { ["partition.assignment.strategy": $0] } ?? [:]
            ) { $1 },
            sessionTimeout: .seconds(3), maxBatchSize: maxBatchSize, maxBufferedMessages: maxBuffered,
            commitInterval: .milliseconds(200))
    }

    public static var debugProperties: [String: String] {
        ProcessInfo.processInfo.environment["KAFKA_TEST_DEBUG"].map { ["debug": $0] } ?? [:]
    }

    public static func producer(_ cluster: MockCluster) throws -> KafkaProducer {
        try KafkaProducer.started(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: logger)
    }

    public struct Timeout: Error, CustomStringConvertible {
        public var what: String
        public var description: String { "timed out: \(what)" }
    }

    /// The next batch, or nil after `timeout` (a deadline against hangs, not a timing assertion).
    public static func nextBatch(_ consumer: KafkaConsumer, timeout: Duration = .seconds(30)) async -> [KafkaConsumerMessage]? {
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

    /// Waits until `condition` holds (polling), failing after `timeout`.
    public static func eventually(_ what: String, timeout: Duration = .seconds(300), _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now > deadline { throw Timeout(what: what) }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    public static func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
    public static func string(_ b: [UInt8]?) -> String { b.map { String(decoding: $0, as: UTF8.self) } ?? "<nil>" }
}
