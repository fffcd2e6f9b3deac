import Foundation
import Redis
import TestSupport
import Testing

/// Issue 30: the store's campaign control and deferral calls, on one redis-server and on a Redis Cluster
/// (every key in `{<p>}`: each call goes to one slot's node).
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct CampaignControlStoreTests {
    func store(_ server: RedisUnderTest, owner: String) throws -> PipelineStore {
        var c = PipelineStoreConfiguration()
        c.leaseOwner = owner
        // A heartbeat that outlives the test however slow the machine (the default, 10 s, lapsed in the
        // middle of a run on a loaded CI machine, and the process stopped counting as running).
        c.ownerHeartbeat = .seconds(600)
        return PipelineStore(client: try server.connection(), configuration: c)
    }

    @Test(arguments: RedisTestTarget.allCases)
    func controlStateVersionsAndAcknowledgements(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let a = try store(server, owner: "a")
        try await a.beat(value: "host-a pid 1")
        // First poll: registers the process (-1) and reads the whole state.
        let first = try #require(try await a.pollControl(applied: -1))
        #expect(first.version == 0 && first.campaigns.isEmpty)
        try await a.acknowledgeControl(version: first.version)
        #expect(try await a.pollControl(applied: 0) == nil, "unchanged: nothing read")

        let (version, state) = try await a.changeControl(campaign: "c") {
            var s = $0
            s.paused = true
            s.rate = 2000
            s.startAtMs = 1_800_000_000_000
            return s
        }
        #expect(version == 1 && state.stored == "paused,at=1800000000000,pace=2000")
        #expect(try await a.controlAcknowledgements().map(\.version) == [0], "not applied yet")
        let read = try #require(try await a.pollControl(applied: 0))
        #expect(read.version == 1 && read.campaigns["c"] == state)
        try await a.acknowledgeControl(version: 1)
        #expect(try await a.controlAcknowledgements() == [ControlAcknowledgement(owner: "a", process: "host-a pid 1", version: 1)])
        // Words of a newer version are kept through a change; an empty state removes the field.
        _ = try await a.client.send(RedisCommand("HSET", a.keys.control, "d", "cancelled,future=1"))
        let (_, kept) = try await a.changeControl(campaign: "d") { $0 }
        #expect(kept.cancelled && kept.stored == "cancelled,future=1")
        #expect(CampaignControlState(stored: "cancelled,cancelled_at=17").cancelledAtMs == 17)
        #expect(CampaignControlState(stored: "cancelled_at=17,cancelled").stored == "cancelled,cancelled_at=17")
        _ = try await a.changeControl(campaign: "c") { _ in CampaignControlState() }
        #expect(try await a.readControl().campaigns["c"] == nil)
        #expect(CampaignControlState(stored: "paused,pace=10").description(nowMs: 0) == "paused, paced at 10/s")
    }

    @Test(arguments: RedisTestTarget.allCases)
    func deferralHoldsPacesAndReleases(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let s = try store(server, owner: "a")
        let now: Int64 = 1_800_000_000_000
        func member(_ n: Int) -> [UInt8] { DeferredMessage.member(key: Array("k\(n)".utf8), value: Array("v\(n)".utf8)) }
        // Pace 10/s: of 5 jobs the first is due now, the others 100 ms apart; a hold keeps all.
        let flags = try await s.deferJobs(
            [
                Deferral(campaign: "p", mode: .pace(rate: 10, notBeforeMs: 0), messages: (0..<5).map(member)),
                Deferral(campaign: "h", mode: .hold(dueMs: now + 5000), messages: [member(9), member(9)]),
            ], nowMs: now)
        #expect(flags == [[.admitted, .held, .held, .held, .held], [.held, .held]])
        #expect(try await s.deferredCampaigns() == ["h", "p"])
        #expect(try await s.deferredCount(campaign: "h") == 1, "the same message is held once")
        let due = try await s.dueDeferred(campaign: "p", nowMs: now + 250, limit: 100)
        #expect(due.count == 2)
        let parsed = DeferredMessage.parse(try #require(due.first { DeferredMessage.parse($0.stored).key == Array("k1".utf8) }).stored)
        #expect(parsed.slotted && parsed.value == Array("v1".utf8))
        // A redelivered copy of a held job keeps its slot and takes none; the next new job follows the last slot.
        let again = try await s.deferJobs(
            [Deferral(campaign: "p", mode: .pace(rate: 10, notBeforeMs: 0), messages: [member(3), member(5)])], nowMs: now)
        #expect(again == [[.held, .held]])
        #expect(try await s.dueDeferred(campaign: "p", nowMs: now + 500, limit: 100).count == 5, "slots 100…500 ms: job 5 at 500")
        // The release: one lock holder at a time; removal drops the campaign once empty.
        #expect(try await s.lockRelease(campaign: "p", lease: .seconds(5)))
        let other = try store(server, owner: "b")
        #expect(try await !other.lockRelease(campaign: "p", lease: .seconds(5)))
        let all = try await s.dueDeferred(campaign: "p", nowMs: now + 10_000, limit: 100)
        try await s.removeDeferred(campaign: "p", messages: all)
        try await s.unlockRelease(campaign: "p")
        #expect(try await other.lockRelease(campaign: "p", lease: .seconds(5)))
        #expect(try await s.deferredCampaigns() == ["h"])
    }

    /// A cancel lives as long as its campaign: removed once older than the retention and the campaign's
    /// hash is gone (the version moves, so every process drops it); kept while the campaign has activity
    /// or the cancel is recent; a cancel recorded without its time is stamped first.
    @Test(arguments: RedisTestTarget.allCases)
    func cancelsExpireWithTheirCampaign(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let s = try store(server, owner: "a")
        let day: Int64 = 86_400_000
        let now: Int64 = 1_800_000_000_000
        func cancel(_ campaign: String, at: Int64?) async throws {
            _ = try await s.changeControl(campaign: campaign) {
                var state = $0
                state.cancelled = true
                state.cancelledAtMs = at
                return state
            }
        }
        try await cancel("old", at: now - 3 * day)
        try await cancel("active", at: now - 3 * day)
        try await cancel("recent", at: now - day / 2)
        try await cancel("legacy", at: nil)
        _ = try await s.changeControl(campaign: "paused") {
            var state = $0
            state.paused = true
            return state
        }
        // "active" still settles jobs: its hash exists.
        _ = try await s.client.send(RedisCommand("HSET", s.keys.campaign("active"), "accepted", "1"))
        let before = try await s.readControl().version
        let removed = try await s.expireCancellations(retentionMs: 2 * day, nowMs: now)
        #expect(removed == ["old"])
        let after = try await s.readControl()
        #expect(Set(after.campaigns.keys) == ["active", "recent", "legacy", "paused"])
        #expect(after.version > before, "every process reloads")
        #expect(after.campaigns["legacy"]?.cancelledAtMs == now && after.campaigns["legacy"]?.cancelled == true)
        // Nothing due: nothing removed, the version stays.
        #expect(try await s.expireCancellations(retentionMs: 2 * day, nowMs: now).isEmpty)
        #expect(try await s.readControl().version == after.version)
        // Two days on the legacy cancel goes too; "active" stays while its hash lives.
        #expect(try await s.expireCancellations(retentionMs: 2 * day, nowMs: now + 2 * day + 1) == ["legacy", "recent"])
        #expect(Set(try await s.readControl().campaigns.keys) == ["active", "paused"])
    }

    /// `job status` of a job its campaign's control holds: cancelled, or deferred (until a scheduled start).
    @Test func jobStatusSaysCancelledOrDeferred() async throws {
        let server = try await RedisUnderTest(.single)
        defer { server.stop() }
        let s = try store(server, owner: "a")
        let hex = String(repeating: "ab", count: 32)
        let now: Int64 = 1_800_000_000
        #expect(try await s.jobStatus(jobID: "c:\(hex)", app: "com.example.shop", tokenHex: hex, campaign: "c", now: now).state == .notSeen)
        _ = try await s.changeControl(campaign: "c") {
            var state = $0
            state.startAtMs = (now + 60) * 1000
            return state
        }
        let scheduled = try await s.jobStatus(jobID: "c:\(hex)", app: "com.example.shop", tokenHex: hex, campaign: "c", now: now)
        #expect(scheduled.state == .deferred && scheduled.deferredUntilMs == (now + 60) * 1000)
        _ = try await s.changeControl(campaign: "c") {
            var state = $0
            state.cancelled = true
            return state
        }
        #expect(
            try await s.jobStatus(jobID: "c:\(hex)", app: "com.example.shop", tokenHex: hex, campaign: "c", now: now).state == .cancelled)
    }
}
