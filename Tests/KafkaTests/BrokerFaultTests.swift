import Kafka
import Testing

/// `kafka-dev`'s broker faults (SIGUSR1/SIGUSR2, used by `ops/soak` scenario e): a broker taken down
/// hands its partitions and its group to the others, and up again serves what fails over to it next,
/// losing nothing.
@Suite struct BrokerFaultTests {
    @Test func aBrokerDownAndUpLosesNothing() async throws {
        let cluster = try MockCluster(brokers: 3, topics: [.init(name: "jobs", partitions: 6)], logger: Support.logger)
        defer { cluster.stop() }
        try cluster.pinGroupCoordinator("g", broker: 1)
        let producer = try Support.producer(cluster)
        func produce(_ range: Range<Int>) async throws {
            try await producer.sendBatch(
                range.map { .init(topic: "jobs", key: Support.bytes("key-\($0)"), value: Support.bytes("\($0)")) })
        }
        let consumer = try KafkaConsumer.started(
            configuration: Support.consumerConfig(cluster, group: "g", topics: ["jobs"], maxBatchSize: 100, maxBuffered: 1000),
            logger: Support.logger)
        var seen: [Int] = []
        var perPartition: [Int32: Int] = [:]
        func consume(until count: Int) async throws {
            while seen.count < count {
                // On a stall, say which partitions fell behind and what the consumer holds (a CI run once
                // stopped at 787 of 900 after the broker came back, not reproduced in 40 loaded runs).
                let messages = try #require(
                    await Support.nextBatch(consumer),
                    "only \(seen.count) of \(count) consumed; messages per partition \(perPartition.sorted { $0.key < $1.key }), consumer \(consumer.statistics)"
                )
                seen += messages.map { Int(Support.string($0.value))! }
                for m in messages { perPartition[m.partition, default: 0] += 1 }
                _ = consumer.settle(messages.map(\.ref))
            }
        }

        try await produce(0..<300)
        try await consume(until: 300)

        // Broker 1 leads partitions 0 and 3 and coordinates the group: all of that moves to broker 2.
        let down = try cluster.setBroker(1, up: false)
        #expect(down.partitions == 2)
        #expect(down.groups == 1)
        #expect(try cluster.setBroker(1, up: false).partitions == 0, "already down: nothing more moves")
        try await produce(300..<600)
        try await consume(until: 600)

        // Back up, broker 1 leads nothing (a restarted broker rejoins as a follower)…
        let up = try cluster.setBroker(1, up: true)
        #expect(up.partitions == 0 && up.groups == 0)
        try await produce(600..<900)
        try await consume(until: 900)

        // …until another broker fails: broker 3's partitions (2 and 5) fail over to broker 1, the next
        // one up after it, which serves them.
        let other = try cluster.setBroker(3, up: false)
        #expect(other.partitions == 2 && other.groups == 0)
        try await produce(900..<1200)
        try await consume(until: 1200)

        // Every message at least once (design §2.1). Once only, unless a commit on revoke was refused
        // while the coordinator moved (seen on a loaded machine: the group rejoined before the settled
        // positions were committed): then what it held comes again, and the consumer counts it.
        #expect(Set(seen) == Set(0..<1200), "every message at least once")
        let repeats = seen.count - Set(seen).count
        let stats = consumer.statistics
        #expect(
            repeats == 0 || stats.revokeCommitFailures + stats.commitFailures > 0 || stats.settledButUncommittedAtRevoke > 0,
            "\(repeats) messages came twice with no refused commit: \(stats)")
        #expect(consumer.statistics.offsetGaps == 0)
        #expect(throws: KafkaError.self) { try cluster.setBroker(4, up: false) }
        await consumer.close()
        await producer.close()
    }
}
