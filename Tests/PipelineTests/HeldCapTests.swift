import APNsProtocol
import Foundation
import Kafka
import Redis
import TestSupport
import Testing
import Tools

@testable import Pipeline

/// Held jobs bounded (design §2.11) and pacing a producer cannot skip (§2.13), end to end: a `run`
/// pipeline, real Redis, the Kafka mock cluster over TCP, the gateway simulator over TLS.
@Suite(.serialized, .timeLimit(.minutes(4)), .enabled(if: RedisServer.available, RedisServer.skipReason))
struct HeldCapTests {
    /// Publishes `tokens` of `campaign` to `partitions` (round robin), as `campaign publish` records them.
    func publish(_ stack: Stack, campaign: String, tokens: [DeviceToken], partitions: [Int32], headers: [KafkaHeader] = []) async throws {
        let sets = try await stack.store.beginPublish(campaign: campaign, expectedJobs: tokens.count)
        let messages = tokens.enumerated().map { i, t in
            KafkaProducerMessage(
                topic: "apns.jobs", partition: partitions[i % partitions.count], key: Array(t.hex.utf8),
                value: Campaign.job(template: template, campaign: campaign, recipient: .init(token: t, language: nil)), headers: headers)
        }
        try await stack.producer.sendBatch(messages)
        try await stack.store.recordPublished(
            campaign: campaign, jobIDs: tokens.map { Campaign.jobID(campaign: campaign, token: $0) }, markSets: sets)
        try await stack.store.finishPublish(campaign: campaign)
    }

    func waiting(_ pipeline: RunningPipeline) -> (jobs: Int, partitions: Int) {
        pipeline.runner.capWaiting.withLock { waits in
            (waits.reduce(0) { $0 + $1.waitingJobs }, waits.reduce(0) { $0 + $1.partitionsHeld })
        }
    }

    /// A paused campaign larger than the held-bytes cap: Redis holds at most the cap, the rest waits in
    /// Kafka with its partition held, while another campaign in other partitions goes out in full; after
    /// the resume every job is sent once, nothing is held, and the partition is released.
    @Test(arguments: [RedisTestTarget.single, .cluster])
    func aPausedCampaignLargerThanTheCapWaitsInItsPartition(_ target: RedisTestTarget) async throws {
        let stack = try await Stack(partitions: 4, redis: target)
        var c = stack.configuration()
        let cap: Int64 = 64 << 10
        c.redis.heldMaxBytes = cap
        c.redis.heldCampaignMaxBytes = cap
        let pipeline = RunningPipeline(c)
        try await eventually("the process polls campaign control") {
            try await stack.store.controlAcknowledgements().count == 1
        }
        try await stack.changeControl("big") { $0.paused = true }
        let jobs = 1500
        try await publish(stack, campaign: "big", tokens: (0..<jobs).map(token), partitions: [0])
        try await publish(stack, campaign: "other", tokens: (20_000..<20_300).map(token), partitions: [1, 2, 3])

        var most: Int64 = 0
        var last = ""
        try await eventually("the cap reached, jobs waiting at it, the other campaign sent", timeout: .seconds(300)) {
            let held = try await stack.store.heldUsage(campaigns: ["big"])["big"] ?? HeldUsage()
            most = max(most, held.bytes)
            let other = try await stack.store.readCampaign("other").jobsSettled
            let w = waiting(pipeline)
            last = "held \(held.jobs) jobs / \(held.bytes) B, waiting \(w.jobs) in \(w.partitions) partition(s), other settled \(other)"
            return w.jobs > 0 && w.partitions == 1 && other == 300
        } orRecord: {
            last
        }
        let held = try #require(try await stack.store.heldUsage(campaigns: ["big"])["big"])
        most = max(most, held.bytes)
        #expect(most <= cap, "held \(most) B, cap \(cap) B")
        #expect(held.jobs > 0 && held.jobs < Int64(jobs), "\(held.jobs) held")
        #expect(stack.recorded(campaign: "big").isEmpty, "nothing of a paused campaign is sent")
        #expect(try await stack.store.readCampaign("big").jobsSettled == 0)
        try await eventually("the other campaign recorded") { stack.recorded(campaign: "other").count == 300 }

        // What `campaign status` shows.
        let file = try stack.pipelineFile()
        let status = try await PipelineProcess.command(["campaign", "status", "big", "--pipeline", file, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        #expect((object["deferred"] as? NSNumber)?.int64Value ?? -1 > 0, "\(status.stdout)")
        #expect((object["held_bytes"] as? NSNumber)?.int64Value ?? -1 > 0, "\(status.stdout)")

        try await stack.changeControl("big") { $0.paused = false }
        try await eventually("every job of big settled", timeout: .seconds(300)) {
            try await stack.store.readCampaign("big").jobsSettled == Int64(jobs)
        }
        try await eventually("the gateway read every accepted frame") { stack.recorded(campaign: "big").count == jobs }
        #expect(stack.recorded(campaign: "big").values.allSatisfy { $0 == 1 }, "each job sent once")
        #expect(try await stack.store.readCampaign("big")[.jobsAccepted] == Int64(jobs))
        try await eventually("nothing held or waiting any more") {
            let held = try await stack.store.heldUsage(campaigns: ["big"])["big"] ?? HeldUsage()
            let w = waiting(pipeline)
            return held == HeldUsage() && w.jobs == 0 && w.partitions == 0
        }
        try await pipeline.stop()
        await stack.stop()
    }

    /// A paced job released at its slot is admitted at once when it comes back (its signature verifies):
    /// each job is deferred once, none twice, and every one is sent once.
    @Test func aReleasedPacedJobIsAdmittedWithoutAnotherSlot() async throws {
        let stack = try await Stack()
        let pipeline = RunningPipeline(stack.configuration())
        try await eventually("the process polls campaign control") {
            try await stack.store.controlAcknowledgements().count == 1
        }
        try await stack.changeControl("paced") { $0.rate = 200 }
        let jobs = 600
        try await publish(stack, campaign: "paced", tokens: (0..<jobs).map(token), partitions: [0, 1, 2, 3, 4, 5, 6, 7])
        try await eventually("every job of the campaign sent", timeout: .seconds(300)) {
            stack.recorded(campaign: "paced").count == jobs
        }
        try await stack.waitAccepted("paced", count: Int64(jobs))
        let p = try await stack.store.readCampaign("paced")
        #expect(stack.recorded(campaign: "paced").values.allSatisfy { $0 == 1 })
        // Held at most once each (a release verified as such takes no second slot; a job whose slot was due
        // at the gate is not held, at most about one per gate batch, more batches on a slower machine), and
        // the pace held most of them.
        #expect(p.counters[.deferred] <= Int64(jobs) && p.counters[.deferred] >= Int64(jobs) / 2, "\(p.counters)")
        try await pipeline.stop()
        await stack.stop()
    }

    /// A producer's `apns-paced-slot` header (the old marker, or a made-up signature) skips nothing: its
    /// jobs are held until a scheduled start like any job, and paced like any job.
    @Test func aForgedPacedSlotHeaderIsHeldLikeAnyJob() async throws {
        let stack = try await Stack()
        let pipeline = RunningPipeline(stack.configuration())
        try await eventually("the process polls campaign control") {
            try await stack.store.controlAcknowledgements().count == 1
        }
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
        try await stack.changeControl("forged") { $0.startAtMs = later }
        try await publish(
            stack, campaign: "forged", tokens: (0..<100).map(token), partitions: [0, 1, 2, 3],
            headers: [KafkaHeader(key: "apns-paced-slot", string: "1")])
        try await publish(
            stack, campaign: "forged", tokens: (100..<200).map(token), partitions: [4, 5, 6, 7],
            headers: [KafkaHeader(key: "apns-paced-slot", string: String(repeating: "a1", count: 16))])
        try await eventually("every job held until the start", timeout: .seconds(300)) {
            try await stack.store.deferredCount(campaign: "forged") == 200
        }
        #expect(stack.recorded(campaign: "forged").isEmpty, "nothing sent before the scheduled start")
        #expect(try await stack.store.readCampaign("forged").jobsSettled == 0)

        // Paced at 1/s: a forged header takes a slot like any job.
        try await stack.changeControl("slow") { $0.rate = 1 }
        let published = ContinuousClock.now
        try await publish(
            stack, campaign: "slow", tokens: (300..<330).map(token), partitions: [0, 1, 2, 3, 4, 5, 6, 7],
            headers: [KafkaHeader(key: "apns-paced-slot", string: "1")])
        var counts = ""
        try await eventually("every job paced: sent at its slot or held", timeout: .seconds(300)) {
            let p = try await stack.store.readCampaign("slow")
            let held = try await stack.store.deferredCount(campaign: "slow")
            counts = "deferred messages \(p.counters[.deferred]), held \(held), received"
            return p.counters[.deferred] + 1 >= 30 && held >= 1
        } orRecord: {
            counts
        }
        let held = try await stack.store.deferredCount(campaign: "slow")
        let seconds = (ContinuousClock.now - published).components.seconds
        // Never faster than the pace: at most one job per second since the publish (and the first at once).
        #expect(30 - held <= seconds + 2, "\(30 - held) of 30 jobs let through in \(seconds) s at 1/s")
        try await pipeline.stop()
        await stack.stop()
    }
}

/// `redis.held_max_bytes`, `redis.held_campaign_max_bytes` and `redis.held_replica_acks`: defaults, values, refusals naming the key.
struct HeldCapConfigurationTests {
    @Test func theCapsAreReadAndChecked() throws {
        let defaults = try PipelineConfiguration.load(file: try pipelineFile(redis: "  url: \"redis://127.0.0.1:6379\""))
        var store = PipelineStoreConfiguration()
        defaults.redis.apply(to: &store)
        #expect(store.heldCaps == HeldCaps(totalBytes: 128 << 20, campaignBytes: 64 << 20))
        let set = try PipelineConfiguration.load(
            file: try pipelineFile(redis: "  url: \"redis://127.0.0.1:6379\"\n  held_max_bytes: 1048576\n  held_campaign_max_bytes: 262144")
        )
        set.redis.apply(to: &store)
        #expect(store.heldCaps == HeldCaps(totalBytes: 1 << 20, campaignBytes: 1 << 18))
        #expect(store.heldReplicaAcks == 0)
        let acks = try PipelineConfiguration.load(
            file: try pipelineFile(redis: "  url: \"redis://127.0.0.1:6379\"\n  held_replica_acks: 1"))
        acks.redis.apply(to: &store)
        #expect(store.heldReplicaAcks == 1)
        // A total below the default campaign cap lowers the campaign's default with it.
        let small = try PipelineConfiguration.load(
            file: try pipelineFile(redis: "  url: \"redis://127.0.0.1:6379\"\n  held_max_bytes: 1048576"))
        #expect(small.redis.heldCampaignMaxBytes == 1 << 20)
        for (yaml, key) in [
            ("  held_campaign_max_bytes: 2097152\n  held_max_bytes: 1048576", "redis.held_campaign_max_bytes"),
            ("  held_max_bytes: 100", "redis.held_max_bytes"),
            ("  held_replica_acks: -1", "redis.held_replica_acks"),
        ] {
            let file = try pipelineFile(redis: "  url: \"redis://127.0.0.1:6379\"\n" + yaml)
            do {
                _ = try PipelineConfiguration.load(file: file)
                Issue.record("loaded \(yaml)")
            } catch {
                #expect("\(error)".contains(key) && "\(error)".contains(file), "\(error)")
            }
        }
    }
}

/// `redis.token_tags`: spread on a Redis Cluster, plain on one server unless set; a wrong value names the key.
struct TokenTagsConfigurationTests {
    @Test func theDefaultFollowsTheTarget() throws {
        var store = PipelineStoreConfiguration()
        let single = try PipelineConfiguration.load(file: try pipelineFile(redis: "  url: \"redis://127.0.0.1:6379\""))
        single.redis.apply(to: &store)
        #expect(store.tokenTags == .plain)
        let cluster = try PipelineConfiguration.load(file: try pipelineFile(redis: "  cluster: [\"127.0.0.1:7000\"]"))
        cluster.redis.apply(to: &store)
        #expect(store.tokenTags == .spread)
        let set = try PipelineConfiguration.load(
            file: try pipelineFile(redis: "  cluster: [\"127.0.0.1:7000\"]\n  token_tags: plain\n  token_buckets: 32"))
        set.redis.apply(to: &store)
        #expect(store.tokenTags == .plain && store.tokenBuckets == 32)
        let file = try pipelineFile(redis: "  url: \"redis://127.0.0.1:6379\"\n  token_tags: even")
        do {
            _ = try PipelineConfiguration.load(file: file)
            Issue.record("loaded token_tags: even")
        } catch {
            #expect(
                "\(error)".contains("redis.token_tags") && "\(error)".contains("plain or spread") && "\(error)".contains(file), "\(error)")
        }
    }
}
