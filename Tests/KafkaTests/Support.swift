import Foundation
import Kafka
import Logging

/// Tests' shared helpers.
enum Support {
    static var logger: Logger {
        var logger = Logger(label: "kafka-tests")
        logger.logLevel = ProcessInfo.processInfo.environment["KAFKA_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .warning
        return logger
    }

    /// Low session timeout: the mock makes a member that joins after the last one left wait about this long.
    static func consumerConfig(
        _ cluster: MockCluster, group: String, topics: [String], maxBatchSize: Int = 200, maxBuffered: Int = 2000
    ) -> KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(
            bootstrapServers: cluster.bootstrapServers, groupID: group, topics: topics,
            // KAFKA_TEST_STRATEGY=cooperative-sticky (etc.) reruns the suite with another assignment protocol.
            // KAFKA_TEST_DEBUG=cgrp,fetch,topic (etc.) turns on librdkafka's debug contexts, to see why a run stalls.
            properties: debugProperties.merging(
                ProcessInfo.processInfo.environment["KAFKA_TEST_STRATEGY"].map { ["partition.assignment.strategy": $0] } ?? [:]
            ) { $1 },
            sessionTimeout: .seconds(3), maxBatchSize: maxBatchSize, maxBufferedMessages: maxBuffered,
            commitInterval: .milliseconds(200))
    }

    static var debugProperties: [String: String] {
        ProcessInfo.processInfo.environment["KAFKA_TEST_DEBUG"].map { ["debug": $0] } ?? [:]
    }

    static func producer(_ cluster: MockCluster) throws -> KafkaProducer {
        try KafkaProducer.started(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: logger)
    }

    struct Timeout: Error, CustomStringConvertible {
        var what: String
        var description: String { "timed out: \(what)" }
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

    /// Waits until `condition` holds (polling), failing after `timeout`.
    static func eventually(_ what: String, timeout: Duration = .seconds(30), _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now > deadline { throw Timeout(what: what) }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    static func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
    static func string(_ b: [UInt8]?) -> String { b.map { String(decoding: $0, as: UTF8.self) } ?? "<nil>" }
}

/// A lock-protected value for test bookkeeping shared between tasks.
final class Shared<Value>: @unchecked Sendable {
    // @unchecked: every access goes through `lock`.
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
