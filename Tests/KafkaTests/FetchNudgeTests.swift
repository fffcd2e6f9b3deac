import Foundation
import Testing

@testable import Kafka

@Suite struct FetchNudgeTests {
    /// Only a full batch (a backlog) is a reason to nudge, and at most once per interval.
    @Test func onlyFullBatchesNudgeAndAtMostOncePerInterval() {
        var nudge = FetchNudge(interval: .milliseconds(50))
        let start = ContinuousClock.now
        func due(_ received: Int, at offset: Duration) -> Bool {
            nudge.isDue(afterReceiving: received, capacity: 1000, now: start + offset)
        }
        let notFull = due(999, at: .zero)
        let empty = due(0, at: .zero)
        let full = due(1000, at: .zero)
        let tooSoon = due(1000, at: .milliseconds(49))
        let intervalLater = due(1000, at: .milliseconds(50))
        let idleAgain = due(10, at: .seconds(5))
        #expect(!notFull, "a batch that is not full: no backlog")
        #expect(!empty)
        #expect(full)
        #expect(!tooSoon)
        #expect(intervalLater)
        #expect(!idleAgain, "idle again: never due")
    }

    /// Over a real mock cluster, through a prefetch queue far smaller than the backlog: the poll thread
    /// nudges the fetcher (librdkafka before 2.1), and every message still arrives exactly once, in
    /// offset order per partition — the metadata requests read no message and move no position.
    @Test func aBacklogThroughASmallQueueArrivesWholeAndTheFetcherIsNudged() async throws {
        let cluster = try MockCluster(brokers: 2, topics: [.init(name: "jobs", partitions: 4)], logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        let total = 20_000
        let padding = String(repeating: "x", count: 200)
        try await producer.sendBatch(
            (0..<total).map {
                KafkaProducerMessage(topic: "jobs", key: Support.bytes("k\($0 % 97)"), value: Support.bytes("\($0) \(padding)"))
            })
        try await producer.flush()
        await producer.close()

        var configuration = Support.consumerConfig(cluster, group: "nudge", topics: ["jobs"], maxBatchSize: 100, maxBuffered: 400)
        // ~300 messages of this size: the queue fills again and again while the backlog is read.
        configuration.properties["queued.max.messages.kbytes"] = "64"
        let consumer = try KafkaConsumer.started(configuration: configuration, logger: Support.logger)
        var seen = Set<Int>()
        var lastOffset: [Int32: Int64] = [:]
        while seen.count < total {
            let batch = try #require(await Support.nextBatch(consumer), "only \(seen.count) of \(total) consumed")
            for m in batch {
                let value = Int(Support.string(m.value).prefix { $0 != " " })!
                #expect(seen.insert(value).inserted, "\(value) delivered twice")
                if let last = lastOffset[m.partition] { #expect(m.offset == last + 1) }
                lastOffset[m.partition] = m.offset
            }
            consumer.settle(batch.map(\.ref))
        }
        let stats = consumer.statistics
        #expect(stats.offsetGaps == 0)
        #expect(stats.offsetResets == 0)
        if !RDKafkaClient.hasFetchQueueBackoff {
            #expect(stats.fetchNudges > 0, "a backlog of full batches nudges the fetcher")
        } else {
            #expect(stats.fetchNudges == 0, "librdkafka 2.1+: fetch.queue.backoff.ms does it")
        }
        await consumer.close()
    }
}
