import Foundation
import Redis
import TestSupport
import Testing

private let app = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064x", n) }

/// Issue 13 (4): a campaign's per-job fields count each job once, whatever the redeliveries; the
/// per-message fields stay what they are.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct CampaignProgressTests {
    static func outcome(_ n: Int, _ kind: SettledOutcomeKind, campaign: String = "c") -> SettledOutcome {
        SettledOutcome(
            jobID: "\(campaign):\(token(n))", app: app, tokenHex: token(n), campaign: campaign, kind: kind,
            code: kind == .rejected ? "8" : nil, suppressToken: kind == .rejected ? TokenSuppression(reason: "invalid-token") : nil)
    }

    func jobFields(_ store: PipelineStore, _ campaign: String = "c") async throws -> [String: Int64] {
        try await store.client.hashCounters(store.keys.campaign(campaign)).filter { $0.key.hasPrefix("jobs") }
    }

    @Test(arguments: RedisTestTarget.allCases)
    func redeliveriesDoNotCountAJobTwice(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let ids = (0..<10).map { "c:\(token($0))" }

        // Published twice (a re-run of `campaign publish`): 20 messages, 10 jobs.
        let sets = try await store.beginPublish(campaign: "c", expectedJobs: 10)
        #expect(sets == 1)
        #expect(try await store.recordPublished(campaign: "c", jobIDs: ids, markSets: sets) == 10)
        #expect(try await store.recordPublished(campaign: "c", jobIDs: ids, markSets: sets) == 0)
        var p = try await store.readCampaign("c")
        #expect(p.published == 20 && p.jobs == 10 && p.isPublishing)
        try await store.finishPublish(campaign: "c", nowMs: Int64(Date().timeIntervalSince1970 * 1000) + 1)
        #expect(try await store.readCampaign("c").isPublishing == false)

        // First settlements: 6 accepted, 1 rejected, 1 suppressed, 1 dead-lettered; job 9 pending.
        try await store.settle(
            SettleBatch(
                outcomes: (0..<6).map { Self.outcome($0, .accepted) } + [
                    Self.outcome(6, .rejected), Self.outcome(7, .suppressed), Self.outcome(8, .deadLettered),
                ]))
        #expect(
            try await jobFields(store) == [
                "jobs": 10, "jobs_settled": 9, "jobs_accepted": 6, "jobs_rejected": 1, "jobs_suppressed": 1, "jobs_dead_lettered": 1,
            ])

        // Everything redelivered (a rebalance after the old owner's commit was refused), as the gate
        // then decides: accepted → deduped, rejected (now suppressed) → suppressed, suppressed again,
        // dead-lettered again; and job 9 twice in one batch (two copies, one accepted).
        try await store.settle(
            SettleBatch(
                outcomes: (0..<6).map { Self.outcome($0, .deduped) } + [
                    Self.outcome(6, .suppressed), Self.outcome(7, .suppressed), Self.outcome(8, .deadLettered),
                    Self.outcome(9, .accepted), Self.outcome(9, .suppressed),
                ]))
        #expect(
            try await jobFields(store) == [
                "jobs": 10, "jobs_settled": 10, "jobs_accepted": 7, "jobs_rejected": 1, "jobs_suppressed": 1, "jobs_dead_lettered": 1,
            ])
        p = try await store.readCampaign("c")
        #expect(p.jobsSettled == 10 && p.messagesSettled == 20, "the message figures still count every message")
        #expect(p.counters[.accepted] == 7 && p.counters[.deduped] == 6 && p.counters[.suppressed] == 4)

        // Later: the dead letter published again and accepted, a job accepted twice (a dead process's
        // settle landing after the takeover's) and a job settled first in this batch with a non-accepted
        // outcome and then accepted: a job counts once, by its first outcome.
        try await store.settle(SettleBatch(outcomes: [Self.outcome(8, .accepted), Self.outcome(3, .accepted)]))
        #expect(try await jobFields(store)["jobs_settled"] == 10)
        #expect(try await jobFields(store)["jobs_dead_lettered"] == 1)
        #expect(try await store.readCampaign("c").counters[.accepted] == 9)

        // The counted set lives as long as the longest dedup record.
        let ttl = try await store.client.send(RedisCommand("TTL", store.keys.countedJobs(campaign: "c"))).integer ?? -2
        #expect(ttl > 86_400 && ttl <= store.jobMarkRetention)
        let publishedTTL = try await store.client.send(RedisCommand("TTL", store.keys.publishedJobs(campaign: "c", set: 0))).integer ?? -2
        #expect(publishedTTL > 86_400 && publishedTTL <= store.jobMarkRetention + 60)
    }

    /// Issue 14: a mark set gets its expiry once per process and minute, a minute longer than the
    /// retention (so a write later in that minute is covered), not with every publish batch; a set that
    /// lost it gets it again with its next write once the minute has passed.
    @Test(arguments: RedisTestTarget.allCases)
    func markSetsGetTheirExpiryOncePerMinute(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let key = store.keys.publishedJobs(campaign: "m", set: 0)
        func ttl() async throws -> Int64 { try await store.client.send(RedisCommand("TTL", key)).integer ?? -3 }
        let now = PipelineStore.epochNow()
        #expect(try await store.recordPublished(campaign: "m", jobIDs: ["m:1"], markSets: 1, now: now) == 1)
        let first = try await ttl()
        #expect(first > store.jobMarkRetention && first <= store.jobMarkRetention + 60)
        _ = try await store.client.send(RedisCommand("PERSIST", key))
        #expect(try await store.recordPublished(campaign: "m", jobIDs: ["m:2"], markSets: 1, now: now + 59) == 1)
        #expect(try await ttl() == -1, "within the minute the set is not given its expiry again")
        // Another campaign's sets are its own.
        #expect(try await store.recordPublished(campaign: "n", jobIDs: ["n:1"], markSets: 1, now: now + 59) == 1)
        #expect(try await store.client.send(RedisCommand("TTL", store.keys.publishedJobs(campaign: "n", set: 0))).integer ?? -3 > 0)
        #expect(try await store.recordPublished(campaign: "m", jobIDs: ["m:3"], markSets: 1, now: now + 60) == 1)
        #expect(try await ttl() > store.jobMarkRetention, "after it, the next write gives it again")
        #expect(try await store.readCampaign("m").jobs == 3)
    }

    /// Campaigns do not see each other's marks, and a job of a campaign whose id was accepted before
    /// under another campaign is deduped and not counted (documented: its acceptance counted it there).
    @Test(arguments: RedisTestTarget.allCases)
    func campaignsAreCountedApart(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        try await store.settle(
            SettleBatch(outcomes: [
                Self.outcome(1, .rejected, campaign: "a"), Self.outcome(1, .rejected, campaign: "b"),
                Self.outcome(2, .accepted, campaign: "a"), Self.outcome(2, .suppressed, campaign: "b"),
                Self.outcome(3, .accepted, campaign: "a"),
            ]))
        #expect(try await jobFields(store, "a") == ["jobs_settled": 3, "jobs_rejected": 1, "jobs_accepted": 2])
        #expect(try await jobFields(store, "b") == ["jobs_settled": 2, "jobs_rejected": 1, "jobs_suppressed": 1])
    }

    /// A job settled first as not accepted (in an earlier batch) and accepted later is not counted twice:
    /// the accepted job is checked against the counted set, one SMISMEMBER per campaign and batch.
    @Test(arguments: RedisTestTarget.allCases)
    func acceptedAfterAnotherOutcomeCountsOnce(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        try await store.settle(SettleBatch(outcomes: (0..<1500).map { Self.outcome($0, .deadLettered) }))
        // More than one SMISMEMBER chunk (1000 members each).
        try await store.settle(SettleBatch(outcomes: (0..<3000).map { Self.outcome($0, .accepted) }))
        #expect(try await jobFields(store) == ["jobs_settled": 3000, "jobs_dead_lettered": 1500, "jobs_accepted": 1500])
    }

    /// Measures (printed, no threshold) the server's CPU per settled job (`INFO cpu`, settle calls
    /// only): jobs without a campaign (no per-job counting), campaign jobs all accepted, and
    /// campaign jobs 10 % not accepted. Same server, same run: the ratios are what to read.
    @Test func settleCostPerJob() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let store = PipelineStore(client: try server.client())
        let jobs = 50_000
        let perBatch = 1_000
        // The server process's CPU time (user + system), in µs: unlike command latency, not stretched
        // when other processes take the machine's cores.
        func usec() async throws -> Double {
            let cpu = try await store.client.info("cpu")
            return ((Double(cpu["used_cpu_user"] ?? "") ?? 0) + (Double(cpu["used_cpu_sys"] ?? "") ?? 0)) * 1_000_000
        }
        func measure(_ name: String, campaign: String?, notAccepted: Int) async throws -> Double {
            let before = try await usec()
            for start in stride(from: 0, to: jobs, by: perBatch) {
                let outcomes = (start..<start + perBatch).map { n in
                    SettledOutcome(
                        jobID: "\(name):\(n)", app: app, tokenHex: token(n), campaign: campaign,
                        kind: notAccepted > 0 && n % notAccepted == 0 ? .suppressed : .accepted)
                }
                try await store.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: perBatch)))
            }
            return (try await usec() - before) / Double(jobs)
        }
        _ = try await measure("warm", campaign: "warm", notAccepted: 10)
        let plain = try await measure("plain", campaign: nil, notAccepted: 0)
        let accepted = try await measure("acc", campaign: "acc", notAccepted: 0)
        let mixed = try await measure("mix", campaign: "mix", notAccepted: 10)
        print(
            "settle, Redis CPU µs per job (INFO cpu): no campaign \(String(format: "%.2f", plain)), campaign all accepted "
                + "\(String(format: "%.2f", accepted)) (×\(String(format: "%.2f", accepted / plain))), campaign 10 % suppressed "
                + "\(String(format: "%.2f", mixed)) (×\(String(format: "%.2f", mixed / plain)))")
        #expect(try await store.readCampaign("mix").jobsSettled == Int64(jobs))
    }

    /// Measures the memory of the marks (printed): published-job marks ~8-10 bytes per job (intsets of
    /// ~400), accepted jobs none beyond their dedup record, other outcomes one member of the counted set.
    @Test func jobMarksAreCompact() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let store = PipelineStore(client: try server.client())
        let jobs = 100_000
        let perBatch = 5_000
        let ids = (0..<jobs).map { "big:\(token($0))" }
        let sets = try await store.beginPublish(campaign: "big", expectedJobs: jobs)
        func used() async throws -> Int { Int(try await store.client.info("memory")["used_memory"] ?? "") ?? 0 }
        let before = try await used()
        for start in stride(from: 0, to: jobs, by: perBatch) {
            try await store.recordPublished(campaign: "big", jobIDs: Array(ids[start..<start + perBatch]), markSets: sets)
        }
        let published = Double(try await used() - before) / Double(jobs)
        #expect(
            try await store.client.send(RedisCommand("OBJECT", "ENCODING", store.keys.publishedJobs(campaign: "big", set: 0)))
                == .bulk(Array("intset".utf8)))
        // 10 % of the campaign not accepted.
        let beforeSettle = try await used()
        for start in stride(from: 0, to: jobs, by: perBatch) {
            let outcomes = (start..<start + perBatch).map { n in
                SettledOutcome(jobID: ids[n], app: app, tokenHex: token(n), campaign: "big", kind: n % 10 == 0 ? .suppressed : .accepted)
            }
            try await store.settle(SettleBatch(outcomes: outcomes))
        }
        let countedBytes =
            try await store.client.send(RedisCommand("MEMORY", "USAGE", store.keys.countedJobs(campaign: "big"))).integer ?? 0
        let settled = Double(try await used() - beforeSettle) / Double(jobs)
        print(
            "job marks: published \(String(format: "%.1f", published)) B/job (\(sets) sets); settling (dedup records included) "
                + "\(String(format: "%.1f", settled)) B/job; counted set \(String(format: "%.1f", Double(countedBytes) / Double(jobs / 10))) B per non-accepted job"
        )
        #expect(published < 12)
        #expect(
            try await jobFields(store, "big") == [
                "jobs": Int64(jobs), "jobs_settled": Int64(jobs), "jobs_accepted": Int64(jobs * 9 / 10),
                "jobs_suppressed": Int64(jobs / 10),
            ])
    }
}
