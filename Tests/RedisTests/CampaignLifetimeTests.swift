import Foundation
import Redis
import TestSupport
import Testing

private let app = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064x", n) }

/// Issue 28 (7): a campaign's hash and its sets expire `campaignRetention` after the campaign's last
/// activity (a publish, a settled job), refreshed once per process and minute, not per batch.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct CampaignLifetimeTests {
    static let retention: Int64 = 100 * 3600

    func store(_ server: RedisUnderTest) throws -> PipelineStore {
        var c = PipelineStoreConfiguration()
        c.campaignRetention = .seconds(Self.retention)
        return PipelineStore(client: try server.connection(), configuration: c)
    }

    func ttl(_ store: PipelineStore, _ key: String) async throws -> Int64 {
        try await store.client.send(RedisCommand("TTL", key)).integer ?? -3
    }

    @Test(arguments: RedisTestTarget.allCases)
    func campaignKeysExpireAfterTheLastActivity(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = try store(server)
        #expect(store.jobMarkRetention == Self.retention)
        let hash = store.keys.campaign("c")
        // TTL counts down in whole seconds: a loaded machine may read one a few seconds after it was set.
        let fresh = (Self.retention - 10)...(Self.retention + 60)

        // Publishing gives the hash and the mark sets their expiry.
        let sets = try await store.beginPublish(campaign: "c", expectedJobs: 4)
        #expect(fresh.contains(try await ttl(store, hash)))
        try await store.recordPublished(campaign: "c", jobIDs: (0..<4).map { "c:\(token($0))" }, markSets: sets)
        #expect(fresh.contains(try await ttl(store, store.keys.publishedJobs(campaign: "c", set: 0))))
        _ = try await store.client.send(RedisCommand("PERSIST", hash))
        try await store.finishPublish(campaign: "c")
        #expect(fresh.contains(try await ttl(store, hash)))

        // A settle refreshes it once per process and minute (measured from the first).
        let now = PipelineStore.epochNow()
        func outcome(_ n: Int, _ kind: SettledOutcomeKind) -> SettledOutcome {
            SettledOutcome(jobID: "c:\(token(n))", app: app, tokenHex: token(n), campaign: "c", kind: kind)
        }
        _ = try await store.client.send(RedisCommand("PERSIST", hash))
        try await store.settle(SettleBatch(outcomes: [outcome(0, .accepted), outcome(1, .deadLettered)], settledAt: now))
        #expect(fresh.contains(try await ttl(store, hash)))
        #expect(fresh.contains(try await ttl(store, store.keys.countedJobs(campaign: "c"))))
        _ = try await store.client.send(RedisCommand("PERSIST", hash))
        try await store.settle(SettleBatch(outcomes: [outcome(2, .accepted)], settledAt: now + 30))
        #expect(try await ttl(store, hash) == -1, "within the minute a batch sends no EXPIRE")
        try await store.settle(SettleBatch(outcomes: [outcome(3, .accepted)], settledAt: now + 61))
        #expect(fresh.contains(try await ttl(store, hash)))
        #expect(try await store.readCampaign("c").jobsSettled == 4)

        // Expired (as if its time had passed): gone, and read as unknown (no fields).
        _ = try await store.client.send(RedisCommand("PEXPIRE", hash, "1"))
        try await Task.sleep(for: .milliseconds(20))
        #expect(try await store.readCampaign("c").counters.fields.isEmpty)
    }

    /// A retention below the dedup records' is taken as theirs: a job's mark must outlive its record.
    @Test func retentionNeverBelowTheDedupRecords() async throws {
        let server = try await RedisUnderTest(.single)
        defer { server.stop() }
        var c = PipelineStoreConfiguration()
        c.campaignRetention = .seconds(3600)
        let store = PipelineStore(client: try server.connection(), configuration: c)
        #expect(store.jobMarkRetention == 86_400 + 86_400)
    }
}
