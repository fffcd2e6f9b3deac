import Testing

@testable import Redis

/// The settle sums its per-job counters before they become counter writes: the sums must be those of
/// counting every outcome one by one, whatever the order of campaigns, fields and shards.
@Suite struct OutcomeTallyTests {
    @Test func sumsPerFieldCampaignAndShardInAnyOrder() {
        var tally = OutcomeTally()
        var expected: [String: Int64] = [:]
        var expectedSent: [String: Int64] = [:]
        let campaigns: [String?] = ["spring", nil, "autumn", "spring", "spring", nil]
        let fields = ["accepted", "accepted", "rejected", "rejected:8", "accepted", "deduped"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let campaign = campaigns.randomElement(using: &generator)!
            let field = fields.randomElement(using: &generator)!
            tally.count(field, campaign: tally.campaign(campaign))
            expected["\(campaign ?? "-")/\(field)", default: 0] += 1
            let app = Bool.random(using: &generator) ? "com.example.shop" : "com.example.news"
            let shard = Int.random(in: 0..<4, using: &generator)
            tally.sent(app: app, shard: shard)
            expectedSent["\(app)/\(shard)", default: 0] += 1
        }
        var got: [String: Int64] = [:]
        for (field, n) in tally.fields.entries {
            let key = "\(tally.campaigns[field.campaign] ?? "-")/\(field.name)"
            #expect(got[key] == nil, "one entry per field and campaign: \(key)")
            got[key] = n
        }
        #expect(got == expected)
        var gotSent: [String: Int64] = [:]
        for (sent, n) in tally.shards.entries {
            #expect(gotSent["\(sent.app)/\(sent.shard)"] == nil)
            gotSent["\(sent.app)/\(sent.shard)"] = n
        }
        #expect(gotSent == expectedSent)
        #expect(tally.campaigns.count == 3)  // nil, spring, autumn
    }
}

/// Dedup set names are made once per (tag, time bucket) and shared by the gate and the settle.
@Suite struct DedupSetNamesTests {
    @Test func namesAreTheKeysOnesAndOldBucketsAreDropped() {
        let keys = RedisKeys(prefix: "apns", tokenBuckets: 16)
        let names = DedupSetNames(keys: keys, subBuckets: 256, liveBuckets: 3)
        let tag = keys.tokenTag(app: "com.example.shop", bucket: 5)
        let table = names.table(tag: tag, bucket: 100)
        #expect(table.count == 256)
        #expect(table.names[0] == keys.dedup(tag: tag, bucket: 100, subBucket: 0))
        #expect(table.names[255] == keys.dedup(tag: tag, bucket: 100, subBucket: 255))
        // A call's keys are copied from the table's one buffer, each name one argument.
        var arguments = RedisArguments()
        for sub in [0, 255, 7, 7] { table.appendName(sub, to: &arguments) }
        #expect(arguments.elements == [0, 255, 7, 7].map { Array(keys.dedup(tag: tag, bucket: 100, subBucket: $0).utf8) })
        #expect(names.table(tag: tag, bucket: 100) === table)  // made once
        let other = names.table(tag: keys.tokenTag(app: "com.example.shop", bucket: 6), bucket: 100)
        #expect(other.serial != table.serial)
        _ = names.table(tag: tag, bucket: 101)
        #expect(names.count == 3)
        // Four buckets on, bucket 100 is older than the three kept: dropped, and made again (a new
        // serial, so an expiry noted for the old table is never taken for the new one's).
        _ = names.table(tag: tag, bucket: 104)
        #expect(names.count == 2)  // 101 and 104
        let again = names.table(tag: tag, bucket: 100)
        #expect(again !== table && again.serial > table.serial)
        #expect(again.names == table.names)
    }

    /// Issue 28: told its apps, the cache keeps their tags' tables only; a table of any other app's tag
    /// is made for its call (serial 0: its expiry is never remembered) and not kept. Not told, it keeps
    /// at most `maxTablesForAnyApp`.
    @Test func onlyConfiguredAppsAreKept() {
        let keys = RedisKeys(prefix: "apns", tokenBuckets: 16)
        let names = DedupSetNames(keys: keys, subBuckets: 4, liveBuckets: 3, apps: ["com.example.shop"])
        let kept = names.table(tag: keys.tokenTag(app: "com.example.shop", bucket: 3), bucket: 100)
        #expect(kept.serial > 0 && names.count == 1)
        for i in 0..<500 {
            let t = names.table(tag: keys.tokenTag(app: "com.hostile.\(i)", bucket: i % 16), bucket: 100)
            #expect(t.serial == DedupSetNames.unkeptSerial && t.count == 4)
        }
        #expect(names.count == 1)
        let expiries = DedupExpiries()
        let unkept = DedupSetID(table: DedupSetNames.unkeptSerial, subBucket: 1)
        let keptID = DedupSetID(table: kept.serial, subBucket: 1)
        #expect(!expiries.isGiven(keptID, now: 1000))  // starts the minute
        expiries.markGiven([unkept, keptID])
        #expect(expiries.isGiven(keptID, now: 1001) && !expiries.isGiven(unkept, now: 1001))

        let any = DedupSetNames(keys: keys, subBuckets: 1, liveBuckets: 3)
        for i in 0..<(DedupSetNames.maxTablesForAnyApp + 50) { _ = any.table(tag: keys.tokenTag(app: "a\(i)", bucket: 0), bucket: 7) }
        #expect(any.count == DedupSetNames.maxTablesForAnyApp)
    }
}
