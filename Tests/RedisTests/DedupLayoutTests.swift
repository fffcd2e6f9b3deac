import Foundation
import Redis
import TestSupport
import Testing

private let app = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064x", n) }
private let hours12 = Duration.seconds(43_200)

@Suite struct DedupLayoutValueTests {
    @Test func storedFormRoundTripsAndRejectsGarbage() {
        let layout = DedupLayout(bucketSeconds: 86_400, subBuckets: 4096, tokenBuckets: 16)
        #expect(layout.stored == "bucket_s=86400 sub_buckets=4096 token_buckets=16")
        #expect(DedupLayout(stored: layout.stored) == layout)
        #expect(DedupLayout(stored: "token_buckets=16 bucket_s=86400 sub_buckets=4096") == layout)
        for garbage in [
            "", "bucket_s=86400", "bucket_s=0 sub_buckets=1 token_buckets=1", "bucket_s=x sub_buckets=1 token_buckets=1", "hello",
        ] {
            #expect(DedupLayout(stored: garbage) == nil, "\(garbage)")
        }
        #expect(
            layout.description
                == "redis.dedup_bucket_hours: 24, redis.dedup_sub_buckets: 4096, redis.token_buckets: 16, redis.token_tags: plain")
    }

    @Test func sameKeysMeanTheSameLayout() {
        let layout = DedupLayout(bucketSeconds: 86_400, subBuckets: 4096, tokenBuckets: 16)
        // 4100 / 16 = 256 sets per token tag, as 4096 / 16: every record has the same key.
        #expect(layout.findsRecords(of: DedupLayout(bucketSeconds: 86_400, subBuckets: 4100, tokenBuckets: 16)))
        #expect(!layout.findsRecords(of: DedupLayout(bucketSeconds: 43_200, subBuckets: 4096, tokenBuckets: 16)))
        #expect(!layout.findsRecords(of: DedupLayout(bucketSeconds: 86_400, subBuckets: 8192, tokenBuckets: 16)))
        #expect(!layout.findsRecords(of: DedupLayout(bucketSeconds: 86_400, subBuckets: 4096, tokenBuckets: 8)))
    }

    @Test func defaultsProbeTwoBuckets() {
        // Issue 14: buckets as wide as the retention, so a job costs two dedup probes (three at 12 h).
        let store = PipelineStoreConfiguration()
        #expect(store.dedupBucketWidth == store.dedupRetention)
    }
}

@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct DedupLayoutCheckTests {
    /// The first check records the layout; later ones compare with it, and a configuration whose records
    /// would have other keys is refused with the recorded values and the keys to set.
    @Test(arguments: RedisTestTarget.allCases)
    func recordedLayoutIsEnforced(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let client = try server.connection()
        let store = PipelineStore(client: client)
        #expect(try await store.verifyDedupLayout() == .recorded(existingRecords: false))
        #expect(try await client.send(RedisCommand("GET", store.keys.dedupLayout)).string == DedupLayout(store.configuration).stored)
        #expect(try await store.verifyDedupLayout() == .matched)
        #expect(try await PipelineStore(client: client, configuration: .init(dedupSubBuckets: 4100)).verifyDedupLayout() == .matched)

        for (configuration, mine) in [
            (
                PipelineStoreConfiguration(dedupBucketWidth: hours12),
                "redis.dedup_bucket_hours: 12, redis.dedup_sub_buckets: 4096, redis.token_buckets: 16"
            ),
            (
                PipelineStoreConfiguration(tokenBuckets: 8),
                "redis.dedup_bucket_hours: 24, redis.dedup_sub_buckets: 4096, redis.token_buckets: 8"
            ),
        ] {
            let error = try await #require(throws: DedupLayoutMismatch.self) {
                try await PipelineStore(client: client, configuration: configuration).verifyDedupLayout()
            }
            #expect(
                error.description.contains(
                    "written with redis.dedup_bucket_hours: 24, redis.dedup_sub_buckets: 4096, redis.token_buckets: 16"))
            #expect(error.description.contains("this configuration has \(mine)"))
            #expect(error.description.contains(store.keys.dedupLayout))
        }
        // A value that is not a layout (an operator's typo) is refused too, never overwritten.
        try await client.send(RedisCommand("SET", store.keys.dedupLayout, "24h"))
        await #expect(throws: DedupLayoutMismatch.self) { try await store.verifyDedupLayout() }
        #expect(try await client.send(RedisCommand("GET", store.keys.dedupLayout)).string == "24h")
        await client.close()
    }

    /// Records written before the layout was recorded (an upgrade from a version without the record):
    /// their key names must fit the configuration. Records settled in 12 h buckets refuse a 24 h
    /// configuration, saying which width fits them, and are accepted (and recorded) by a 12 h one. On a
    /// cluster the records sit on the last primary, so the check scans past the first.
    @Test(arguments: RedisTestTarget.allCases)
    func unrecordedRecordsMustFit(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let client = try server.connection()
        let legacy = PipelineStore(client: client, configuration: .init(dedupBucketWidth: hours12))
        var n = 1
        if let cluster = client as? RedisCluster {
            let last = try await cluster.primaryNodes().last
            while try await cluster.node(forKey: legacy.keys.tokenTag(app: app, tokenHex: token(n))) != last { n += 1 }
        }
        try await legacy.settle(SettleBatch(outcomes: [SettledOutcome(jobID: "old", app: app, tokenHex: token(n), kind: .accepted)]))
        #expect(try await server.keys("*dedup*").count == 1)

        let current = PipelineStore(client: client)
        let error = try await #require(throws: DedupLayoutMismatch.self) { try await current.verifyDedupLayout() }
        #expect(error.description.contains("fits redis.dedup_bucket_hours: 12 rather than this width"))
        #expect(error.description.contains("written before their layout was recorded"))
        #expect(try await client.send(RedisCommand("EXISTS", current.keys.dedupLayout)).integer == 0, "nothing recorded on a misfit")

        #expect(try await legacy.verifyDedupLayout() == .recorded(existingRecords: true))
        #expect(try await client.send(RedisCommand("GET", current.keys.dedupLayout)).string == DedupLayout(legacy.configuration).stored)
        await #expect(throws: DedupLayoutMismatch.self) { try await current.verifyDedupLayout() }
        await client.close()
    }

    /// A record in a token bucket or sub-bucket the configuration does not have: written with more. A
    /// user whose ACL refuses the SCAN of that check is told what to allow.
    @Test func recordsOfMoreBucketsDoNotFit() async throws {
        let server = try await RedisUnderTest(.single)
        defer { server.stop() }
        let client = try server.connection()
        let store = PipelineStore(client: client)
        let bucket = PipelineStore.epochNow() / store.configuration.dedupBucketWidth.components.seconds
        for (key, reason) in [
            (store.keys.dedup(tag: store.keys.tokenTag(app: app, bucket: 20), bucket: bucket, subBucket: 0), "token bucket 20"),
            (store.keys.dedup(tag: store.keys.tokenTag(app: app, bucket: 3), bucket: bucket, subBucket: 300), "sub-bucket 300"),
        ] {
            try await client.send(RedisCommand("SADD", key, "1"))
            let error = try await #require(throws: DedupLayoutMismatch.self) { try await store.verifyDedupLayout() }
            #expect(error.description.contains(key) && error.description.contains(reason), "\(error)")
            try await client.send(RedisCommand("DEL", key))
        }
        // A user whose ACL refuses SCAN gets what to allow, or the command that records the layout by hand.
        try await client.send(RedisCommand("ACL", "SETUSER", "noscan", "on", ">pw", "~*", "&*", "+@all", "-scan"))
        let limited = PipelineStore(client: try RedisClient(url: "redis://noscan:pw@127.0.0.1:\(server.server!.port)/0"))
        let refused = try await #require(throws: DedupLayoutMismatch.self) { try await limited.verifyDedupLayout() }
        #expect(
            refused.description.contains("refused SCAN") && refused.description.contains("redis-cli SET '\(store.keys.dedupLayout)'"),
            "\(refused)")
        #expect(!refused.description.contains(":pw@"), "no password in the message")
        try await client.send(RedisCommand("SET", store.keys.dedupLayout, DedupLayout(store.configuration).stored))
        #expect(try await limited.verifyDedupLayout() == .matched, "once recorded, no SCAN is needed")
        await limited.client.close()
        try await client.send(RedisCommand("DEL", store.keys.dedupLayout))
        // Keys of another prefix are not this pipeline's records.
        try await client.send(RedisCommand("SADD", "{other:\(app):3}:dedup:7:0", "1"))
        #expect(try await store.verifyDedupLayout() == .recorded(existingRecords: false))
        await client.close()
    }
}
