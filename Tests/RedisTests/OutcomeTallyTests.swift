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
        for field in tally.fields {
            let key = "\(tally.campaigns[field.campaign] ?? "-")/\(field.name)"
            #expect(got[key] == nil, "one entry per field and campaign: \(key)")
            got[key] = field.count
        }
        #expect(got == expected)
        var gotSent: [String: Int64] = [:]
        for sent in tally.shards {
            #expect(gotSent["\(sent.app)/\(sent.shard)"] == nil)
            gotSent["\(sent.app)/\(sent.shard)"] = sent.count
        }
        #expect(gotSent == expectedSent)
        #expect(tally.campaigns.count == 3)  // nil, spring, autumn
    }
}
