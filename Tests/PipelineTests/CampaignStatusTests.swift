import Foundation
import Pipeline
import Redis
import TestSupport
import Testing

/// Issue 28 (7): `campaign status` and `campaign wait` of a campaign whose keys expired (or that was never
/// published) say so, on stderr, with exit status 3; a live one still exits 0.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct CampaignStatusTests {
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func expiredCampaignIsSaidSo() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("status-\(UUID().uuidString).yaml").path
        try """
        kafka:
          bootstrap_servers: "127.0.0.1:9092"
        redis:
          url: "redis://127.0.0.1:\(server.port)/0"
          campaign_ttl_hours: 72
        apps:
          - bundle_id: \(shop)
            certificate: "\(TestCertificates.directory)/\(shop).pem"
            key: "\(TestCertificates.directory)/\(shop).key"

        """.write(toFile: file, atomically: true, encoding: .utf8)
        let store = PipelineStore(client: try server.client())
        let sets = try await store.beginPublish(campaign: "live", expectedJobs: 1)
        try await store.recordPublished(campaign: "live", jobIDs: ["live:1"], markSets: sets)
        try await store.finishPublish(campaign: "live")

        let live = try await PipelineProcess.command(["campaign", "status", "live", "--pipeline", file])
        #expect(live.status == 0, "\(live.stderr)")
        let unknown = try await PipelineProcess.command(["campaign", "status", "never", "--pipeline", file])
        #expect(unknown.status == 3)
        #expect(unknown.stderr.contains("campaign never: unknown to Redis: never published, or expired"), "\(unknown.stderr)")
        #expect(unknown.stderr.contains("campaign_ttl_hours = 72 h"), "\(unknown.stderr)")

        // Its time passes (shortened here): the same answer.
        _ = try await store.client.send(RedisCommand("PEXPIRE", store.keys.campaign("live"), "1"))
        try await Task.sleep(for: .milliseconds(20))
        let expired = try await PipelineProcess.command(["campaign", "status", "live", "--pipeline", file])
        #expect(expired.status == 3, "\(expired.stdout) \(expired.stderr)")
        // `campaign wait` of it ends too (exit 3) once it stayed unknown for --unknown-grace, instead of
        // waiting out --timeout; a shorter --timeout still speaks first (exit 2, PipelineTests).
        let waited = try await PipelineProcess.command(
            ["campaign", "wait", "live", "--pipeline", file, "--unknown-grace", "0.5", "--timeout", "120", "--quiet"])
        #expect(waited.status == 3, "\(waited.stdout) \(waited.stderr)")
        #expect(waited.stderr.contains("campaign live: unknown to Redis after 0.5 s: never published, or expired"), "\(waited.stderr)")
    }

    /// A campaign whose job count stays short while every published message has an outcome (a `run`
    /// killed between a cluster settle's two calls, or a fail-over: its jobs' redeliveries are deduped,
    /// which counts no job) still times out — nothing tells a lost count from a slow job — but the wait
    /// says which it most likely is and what to do, instead of asking whether `run` runs.
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func aShortJobCountIsSaidSoWhenTheWaitTimesOut() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let file = try pipelineFile(redis: "  url: \"redis://127.0.0.1:\(server.port)/0\"", app: shop)
        let store = PipelineStore(client: try server.client())
        let ids = (0..<3).map { "short:\($0)" }
        let sets = try await store.beginPublish(campaign: "short", expectedJobs: 3)
        try await store.recordPublished(campaign: "short", jobIDs: ids, markSets: sets)
        try await store.finishPublish(campaign: "short")
        // Two counted; the third's first settle lost its count, and its redelivery was deduped.
        let outcomes = ids.enumerated().map { index, id in
            SettledOutcome(jobID: id, app: shop, tokenHex: token(index).hex, campaign: "short", kind: index < 2 ? .accepted : .deduped)
        }
        try await store.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: 3)))

        let waited = try await PipelineProcess.command(["campaign", "wait", "short", "--pipeline", file, "--timeout", "1", "--quiet"])
        #expect(waited.status == 2, "\(waited.stdout) \(waited.stderr)")
        #expect(waited.stderr.contains("campaign short: 2 of 3 jobs settled after 1.0 s"), "\(waited.stderr)")
        #expect(waited.stderr.contains("every published message has an outcome (3 of 3"), "\(waited.stderr)")
        #expect(waited.stderr.contains("`campaign wait --messages` waits on messages instead"), "\(waited.stderr)")
        let byMessages = try await PipelineProcess.command(
            ["campaign", "wait", "short", "--pipeline", file, "--timeout", "5", "--quiet", "--messages"])
        #expect(byMessages.status == 0, "\(byMessages.stdout) \(byMessages.stderr)")
    }

    /// `redis.campaign_ttl_hours`: default dedup_ttl_hours + dedup_bucket_hours; less is refused at start,
    /// naming the file and the key.
    @Test func campaignTTLKey() throws {
        func load(_ redis: String) throws -> PipelineConfiguration {
            let file = try pipelineFile(redis: redis, app: shop)
            return try PipelineConfiguration.load(file: file)
        }
        #expect(try load("  prefix: apns").redis.effectiveCampaignTTLHours == 48)
        #expect(try load("  dedup_ttl_hours: 72").redis.effectiveCampaignTTLHours == 96)
        #expect(try load("  campaign_ttl_hours: 200").redis.effectiveCampaignTTLHours == 200)
        do {
            _ = try load("  campaign_ttl_hours: 47")
            Issue.record("accepted")
        } catch {
            #expect("\(error)".contains("redis.campaign_ttl_hours") && "\(error)".contains("at least"), "\(error)")
        }
    }
}
