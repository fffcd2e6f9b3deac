import Foundation
import TestSupport
import Testing

@testable import Redis
@testable import RedisClient

private let shop = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064x", n) }

/// How many of `tags` fall in each of `primaries` equal slot ranges (what `redis-cli --cluster create`
/// makes), in range order.
private func perRange(_ tags: [String], primaries: Int) -> [Int] {
    var counts = Array(repeating: 0, count: primaries)
    for tag in tags {
        let slot = RedisSlot(key: tag).value
        // `--cluster create`'s ranges: primary i from ⌊i·16384/n⌋ (its own rounding; ±1 slot is nothing here).
        counts[min(primaries - 1, slot * primaries / RedisSlot.count)] += 1
    }
    return counts
}

/// Spread token tags (issue 44 item 3): an app's token tags sit evenly over the slot space, so each of
/// K primaries with equal slot ranges takes ~1/K of its jobs, where plain tags fall where CRC16 puts them.
@Suite struct SpreadTokenTagValueTests {
    @Test func eachTagSitsInItsSliceOfTheSlots() {
        for buckets in [1, 3, 16, 64, 300] {
            let keys = RedisKeys(prefix: "apns", tokenBuckets: buckets, tokenTags: .spread)
            let slices = RedisKeys.spreadSlices(buckets: buckets)
            for app in [shop, "com.example.news", "a"] {
                let tags = keys.tokenTags(app: app)
                #expect(Set(tags).count == buckets)
                for (n, tag) in tags.enumerated() {
                    let slice = n % slices
                    let slot = RedisSlot(key: tag).value
                    #expect(slot >= RedisSlot.count * slice / slices && slot < RedisSlot.count * (slice + 1) / slices, "\(tag) → \(slot)")
                    #expect(tag.hasPrefix("{apns:\(app):\(n):") && tag.hasSuffix("}"), "\(tag)")
                }
                // Found again the same by a new value (another process): the names are persistent.
                #expect(RedisKeys(prefix: "apns", tokenBuckets: buckets, tokenTags: .spread).tokenTags(app: app) == tags)
            }
        }
    }

    @Test func equalRangesTakeEqualShares() {
        let plain = RedisKeys(prefix: "apns", tokenBuckets: 16)
        let spread = RedisKeys(prefix: "apns", tokenBuckets: 16, tokenTags: .spread)
        // Plain tags: the shop's 16 fall 3 / 3 / 10 over three primaries.
        #expect(perRange(plain.tokenTags(app: shop), primaries: 3).max()! >= 10)
        for app in [shop, "com.example.news", "com.example.app"] {
            for primaries in 2...8 {
                let counts = perRange(spread.tokenTags(app: app), primaries: primaries)
                let even = 16 / primaries
                #expect(counts.allSatisfy { $0 >= even - 1 && $0 <= even + 2 }, "\(app), \(primaries) primaries: \(counts)")
            }
            #expect(perRange(spread.tokenTags(app: app), primaries: 3).allSatisfy { (5...6).contains($0) })
        }
        // Plain tags are spelled as they always were; a job's keys still share its tag's slot.
        #expect(plain.tokenTag(app: shop, bucket: 3) == "{apns:\(shop):3}")
        let tag = spread.tokenTag(app: shop, tokenHex: token(7))
        let jobKeys = [
            spread.suppressed(tag: tag), spread.registered(tag: tag), spread.language(tag: tag), spread.profile(tag: tag),
            spread.inFlight(tag: tag), spread.dedup(tag: tag, bucket: 1, subBucket: 2),
        ]
        #expect(Set(jobKeys.map { RedisSlot(key: $0) }).count == 1)
        #expect(spread.tokenBucket(token(7)) == plain.tokenBucket(token(7)), "the bucket function is the same")
        #expect(spread != plain)
    }

    @Test func theLayoutRecordsSpreadTags() {
        let spread = DedupLayout(bucketSeconds: 86_400, subBuckets: 4096, tokenBuckets: 16, tokenTags: .spread)
        #expect(spread.stored == "bucket_s=86400 sub_buckets=4096 token_buckets=16 token_tags=spread")
        #expect(DedupLayout(stored: spread.stored) == spread)
        // A layout recorded before tags could be spread has plain ones, and is stored as it was.
        let plain = DedupLayout(bucketSeconds: 86_400, subBuckets: 4096, tokenBuckets: 16)
        #expect(plain.stored == "bucket_s=86400 sub_buckets=4096 token_buckets=16")
        #expect(DedupLayout(stored: "bucket_s=86400 sub_buckets=4096 token_buckets=16")?.tokenTags == .plain)
        #expect(DedupLayout(stored: "bucket_s=86400 sub_buckets=4096 token_buckets=16 token_tags=round") == nil)
        #expect(!spread.findsRecords(of: plain) && !plain.findsRecords(of: spread))
        #expect(spread.description.hasSuffix("redis.token_tags: spread"))
    }
}

/// On a real 3-primary cluster: a campaign's jobs gated and settled with spread tags leave each primary
/// the records of 5 or 6 of the app's 16 tags; the layout is recorded with them, and a process
/// configured with plain tags refuses to start against it, saying which key to set.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct SpreadTokenTagClusterTests {
    @Test func aClustersPrimariesHoldEqualSharesOfAnApp() async throws {
        let server = try await RedisClusterServer(masters: 3)
        defer { server.stop() }
        var configuration = PipelineStoreConfiguration(leaseOwner: "spread")
        configuration.tokenTags = .spread
        let store = PipelineStore(client: try server.client(logLevel: .critical), configuration: configuration)
        #expect(try await store.verifyDedupLayout() == .recorded(existingRecords: false))

        let jobs = (0..<1600).map { GateRequest(jobID: "j\($0)", app: shop, tokenHex: token($0)) }
        for part in stride(from: 0, to: jobs.count, by: 400) {
            let batch = Array(jobs[part..<part + 400])
            #expect(try await store.gate(batch).allSatisfy { $0 == .admitted(language: nil) })
            try await store.settle(
                SettleBatch(outcomes: batch.map { SettledOutcome(jobID: $0.jobID, app: shop, tokenHex: $0.tokenHex, kind: .accepted) }))
        }
        #expect(try await store.gate(Array(jobs.prefix(50))).allSatisfy { $0 == .deduped }, "the records are found again")

        var tagsPerPrimary: [Int] = []
        for index in 0..<server.masters {
            let node = try server.nodeClient(index)
            let names = try await node.send(RedisCommand("KEYS", "{apns:\(shop):*}:dedup:*")).array?.compactMap(\.string) ?? []
            tagsPerPrimary.append(Set(names.map { $0.prefix { $0 != "}" } }).count)
            await node.close()
        }
        #expect(tagsPerPrimary.reduce(0, +) == 16)
        #expect(tagsPerPrimary.allSatisfy { (5...6).contains($0) }, "tags per primary: \(tagsPerPrimary)")

        // The record names the spread tags; a plain-tag process is told to set redis.token_tags.
        let recorded = try await store.command(RedisCommand("GET", store.keys.dedupLayout)).string
        #expect(recorded?.hasSuffix("token_tags=spread") == true)
        let plain = PipelineStore(client: try server.client(logLevel: .critical), configuration: PipelineStoreConfiguration())
        let error = try await #require(throws: DedupLayoutMismatch.self) { try await plain.verifyDedupLayout() }
        #expect(error.description.contains("redis.token_tags: spread") && error.description.contains("redis.token_tags: plain"), "\(error)")
    }

    /// Records written before the layout was recorded (no `{apns}:dedup:layout`) with plain tags do not
    /// fit a spread configuration, and the reverse: the start names the kind.
    @Test func unrecordedRecordsOfTheOtherKindDoNotFit() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let bucket = PipelineStore.epochNow() / PipelineStoreConfiguration().dedupBucketWidth.components.seconds
        for (writer, reader) in [(RedisKeys.TokenTags.plain, RedisKeys.TokenTags.spread), (.spread, .plain)] {
            let keys = RedisKeys(prefix: "apns", tokenBuckets: 16, tokenTags: writer)
            let key = keys.dedup(tag: keys.tokenTag(app: shop, bucket: 5), bucket: bucket, subBucket: 1)
            try await client.send(RedisCommand("SADD", key, "1"))
            var configuration = PipelineStoreConfiguration()
            configuration.tokenTags = reader
            let error = try await #require(throws: DedupLayoutMismatch.self) {
                try await PipelineStore(client: client, configuration: configuration).verifyDedupLayout()
            }
            #expect(error.description.contains(key) && error.description.contains("token tag"), "\(error)")
            configuration.tokenTags = writer
            #expect(
                try await PipelineStore(client: client, configuration: configuration).verifyDedupLayout()
                    == .recorded(existingRecords: true))
            try await client.send(RedisCommand("FLUSHALL"))
        }
        await client.close()
    }
}
