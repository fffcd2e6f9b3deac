import Kafka
import Testing

@Suite struct GroupTests {
    /// Two consumers split the partitions; a third joins while messages flow; no message is lost, every
    /// message is settled once except those whose settlement the group refused to commit at revocation
    /// (counted by the consumers), and the three end up sharing the partitions.
    @Test func rebalanceLosesNothingAndSettlesOnce() async throws {
        let partitions: Int32 = 6
        let cluster = try MockCluster(brokers: 3, topics: [.init(name: "jobs", partitions: partitions)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        let config = Support.consumerConfig(cluster, group: "pipeline", topics: ["jobs"], maxBatchSize: 20, maxBuffered: 200)

        // value → number of accepted settlements, and who settled it
        let settled = Shared<[Int: [String]]>([:])
        func run(_ name: String, _ consumer: KafkaConsumer) -> Task<Void, Never> {
            Task {
                while let batch = await consumer.nextBatch() {
                    for m in batch where consumer.settle(topic: m.topic, partition: m.partition, offset: m.offset) {
                        let v = Int(Support.string(m.value))!
                        settled.withLock { $0[v, default: []].append(name) }
                    }
                    // A little work per batch, so that messages are in flight when the group rebalances.
                    try? await Task.sleep(for: .milliseconds(2))
                }
            }
        }
        let a = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        let b = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        let tasks = [run("a", a), run("b", b)]

        // A steady stream while the group forms and then rebalances. The last third waits until c has
        // its partitions, so that c has messages to consume whatever the machine's speed (on a loaded
        // machine c's join used to complete after the stream had ended, and c consumed nothing).
        let total = 6000
        let cAssigned = Shared(false)
        let stream = Task {
            for chunk in stride(from: 0, to: total, by: 100) {
                while chunk >= 4000 && !cAssigned.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(20)) }
                try await producer.sendBatch(
                    (chunk..<chunk + 100).map {
                        KafkaProducerMessage(topic: "jobs", key: Support.bytes("device-\($0 % 97)"), value: Support.bytes("\($0)"))
                    })
                try await Task.sleep(for: .milliseconds(40))
            }
        }
        try await Support.eventually("a and b split the partitions") {
            let (sa, sb) = (a.statistics.assignedPartitions, b.statistics.assignedPartitions)
            return !sa.isEmpty && !sb.isEmpty && sa.count + sb.count == Int(partitions)
        }
        try await Support.eventually("a and b consume") { settled.withLock { $0.count } >= 500 }
        let c = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        let tasksC = run("c", c)
        try await Support.eventually("c has partitions") { !c.statistics.assignedPartitions.isEmpty }
        cAssigned.withLock { $0 = true }
        try await stream.value
        // Every message settled, and every extra settlement accounted for: the only way a message is
        // settled twice is a settlement whose commit the group refused at revocation (the mock refuses
        // all commits while a group is joining: that is when the eager protocol revokes). The consumers
        // count those offsets exactly, so this fails on any other double settlement, or on a loss.
        func extraSettlements() -> Int64 { settled.withLock { Int64($0.values.reduce(0) { $0 + $1.count - 1 }) } }
        func uncommitted() -> Int64 { [a, b, c].reduce(0) { $0 + $1.statistics.settledButUncommittedAtRevoke } }
        do {
            try await Support.eventually("every message settled, extra settlements explained", timeout: .seconds(300)) {
                settled.withLock { $0.count } == total && extraSettlements() == uncommitted()
            }
        } catch {
            Issue.record(
                "\(error): settled \(settled.withLock { $0.count })/\(total), extra \(extraSettlements()), uncommitted at revoke \(uncommitted())"
            )
            throw error
        }
        // The three share the partitions once the group is stable (an eager rebalance passes through
        // moments where some members hold nothing, so wait for the settled state, not for a snapshot).
        func assignments() -> [Set<TopicPartition>] { [a, b, c].map { Set($0.statistics.assignedPartitions) } }
        do {
            try await Support.eventually("a, b and c share the partitions") {
                let sets = assignments()
                return sets.allSatisfy { !$0.isEmpty } && sets.map(\.count).reduce(0, +) == Int(partitions)
                    && sets[0].union(sets[1]).union(sets[2]).count == Int(partitions)
            }
        } catch {
            Issue.record("\(error): \(assignments())")
            throw error
        }
        let stats = [a, b, c].map(\.statistics)
        #expect(stats.allSatisfy { $0.offsetGaps == 0 && $0.offsetResets == 0 })
        print(
            "rebalance test: \(total) messages, \(extraSettlements()) settled twice (all from commits refused at revoke: \(stats.map(\.revokeCommitFailures)))"
        )
        let byConsumer = settled.withLock { Dictionary(grouping: $0.values.flatMap { $0 }, by: { $0 }).mapValues(\.count) }
        #expect(byConsumer["c", default: 0] > 0, "c took over partitions and consumed: \(byConsumer)")

        for consumer in [a, b, c] { await consumer.close() }
        for t in tasks + [tasksC] { await t.value }
        await producer.close()
    }

    /// Settled messages are not redelivered after a restart; unsettled ones are — from the first
    /// unsettled offset of each partition on (committed offsets are positions, `docs/design.md §2.1`).
    @Test func unsettledMessagesAreRedeliveredAfterRestart() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 2)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        for p: Int32 in [0, 1] {
            try await producer.sendBatch(
                (0..<100).map {
                    KafkaProducerMessage(topic: "jobs", partition: p, key: nil, value: Support.bytes("p\(p)-\($0)"))
                })
        }
        let config = Support.consumerConfig(cluster, group: "restart", topics: ["jobs"])
        let first = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        var received: [KafkaConsumerMessage] = []
        while received.count < 200 {
            received += try #require(await Support.nextBatch(first))
        }
        #expect(received.count == 200)
        // Partition 1: all settled, in reverse order. Partition 0: all but 70 and 90..<100.
        let p1 = received.filter { $0.partition == 1 }.map(\.ref)
        #expect(first.settle(p1.reversed()) == 100)
        let p0 = received.filter { $0.partition == 0 && $0.offset != 70 && $0.offset < 90 }.map(\.ref)
        #expect(first.settle(p0.shuffled()) == 89)
        #expect(
            first.commitPositions == [
                TopicPartition(topic: "jobs", partition: 0): 70, TopicPartition(topic: "jobs", partition: 1): 100,
            ])
        await first.close()
        #expect(!first.settle(topic: "jobs", partition: 0, offset: 70), "closed: nothing to settle")

        // Markers after the restart point of each partition, to prove where each one resumes.
        try await producer.sendBatch([
            KafkaProducerMessage(topic: "jobs", partition: 0, key: nil, value: Support.bytes("p0-marker")),
            KafkaProducerMessage(topic: "jobs", partition: 1, key: nil, value: Support.bytes("p1-marker")),
        ])
        let second = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        var again: [KafkaConsumerMessage] = []
        while !(again.contains { Support.string($0.value) == "p0-marker" } && again.contains { Support.string($0.value) == "p1-marker" }) {
            again += try #require(await Support.nextBatch(second))
        }
        let redelivered0 = again.filter { $0.partition == 0 }.map(\.offset)
        let redelivered1 = again.filter { $0.partition == 1 }.map(\.offset)
        #expect(redelivered0 == Array(70...100), "from the first unsettled offset, then the marker")
        #expect(redelivered1 == [100], "only the marker: every settled message stayed settled")
        #expect(second.statistics.offsetGaps == 0)
        await second.close()
        await producer.close()
    }

    /// Data the mock dropped (it keeps ~5 MiB per partition) between a commit and a restart is detected,
    /// logged and counted, never passed by.
    @Test func droppedDataIsReportedAsAGap() async throws {
        let cluster = try MockCluster(brokers: 1, topics: [.init(name: "jobs", partitions: 1)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        try await producer.sendBatch([KafkaProducerMessage(topic: "jobs", key: nil, value: Support.bytes("first"))])
        let config = Support.consumerConfig(cluster, group: "gaps", topics: ["jobs"])
        let first = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        let batch = try #require(await Support.nextBatch(first))
        #expect(first.settle(batch.map(\.ref)) == 1)
        try await first.commit()
        await first.close()

        // ~8 MiB more: the mock drops the oldest data, including the committed position (offset 1).
        let big = [UInt8](repeating: 0x61, count: 64 * 1024)
        for _ in 0..<4 {
            try await producer.sendBatch((0..<32).map { _ in KafkaProducerMessage(topic: "jobs", key: nil, value: big) })
        }
        let second = try KafkaConsumer.started(configuration: config, logger: Support.logger)
        let resumed = try #require(await Support.nextBatch(second))
        #expect(resumed.first!.offset > 1, "the mock dropped old data (trait this test relies on)")
        let stats = second.statistics
        #expect(stats.offsetGaps + stats.offsetResets >= 1)
        #expect(stats.offsetsSkipped == resumed.first!.offset - 1)
        await second.close()
        await producer.close()
    }
}
