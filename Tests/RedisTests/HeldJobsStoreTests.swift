import Foundation
import Redis
import TestSupport
import Testing

/// Held jobs (design §2.11): spread over the held slots, bounded in bytes in total and per campaign,
/// living the campaign's retention; on one redis-server and on a Redis Cluster (each shard's calls go to
/// its slot's node).
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct HeldJobsStoreTests {
    static let targets: [RedisTestTarget] = [.single, .cluster]

    func store(_ server: RedisUnderTest, caps: HeldCaps = HeldCaps(), retention: Duration? = nil) throws -> PipelineStore {
        var c = PipelineStoreConfiguration()
        c.heldCaps = caps
        if let retention {
            // The campaign retention is at least the dedup records' lifetime (retention + one bucket).
            c.dedupRetention = retention / 2
            c.dedupBucketWidth = retention / 2
        }
        return PipelineStore(client: try server.connection(), configuration: c)
    }

    /// A message as the gate holds it: a token-like key (spread over the shards) and a value of `size` bytes.
    func message(_ n: Int, size: Int = 300) -> [UInt8] {
        let key = Array(String(format: "%064x", n &* 2_654_435_761).utf8)
        return DeferredMessage.member(key: key, value: Array(repeating: UInt8(ascii: "v"), count: size))
    }

    /// What one message counts against the caps: its stored member (kind byte too) and Redis's own cost.
    func cost(_ m: [UInt8]) -> Int64 { Int64(m.count + 1) + PipelineStore.heldOverheadPerJob }

    @Test(arguments: targets)
    func heldJobsSpreadOverSlotsAndLiveTheCampaignsRetention(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let s = try store(server)
        let now: Int64 = 1_800_000_000_000
        let messages = (0..<400).map { message($0) }
        let answers = try await s.deferJobs([Deferral(campaign: "c", mode: .hold(dueMs: now), messages: messages)], nowMs: now)
        #expect(answers == [[HeldAnswer](repeating: .held, count: 400)])
        // Every shard holds some: 16 keys in as many slots, none of them the counters' slot.
        let held = try await server.keys("{apns:held:*}:jobs:c")
        #expect(held.count == RedisKeys.heldShards, "\(held)")
        let slots = Set(held.map { RedisSlot(key: $0) })
        #expect(slots.count >= 8 && !slots.contains(RedisSlot(key: s.keys.countersTag)), "\(slots.count) slots")
        #expect(try await server.keys("{apns}:deferred:*").isEmpty, "no campaign-sized key in {apns}")
        // Each lives the campaign's retention from its last hold.
        let retentionMs = s.jobMarkRetention * 1000
        for key in held {
            let pttl = try await s.client.send(RedisCommand("PTTL", key), routedBy: key).integer ?? -2
            #expect(pttl > 0 && pttl <= retentionMs, "\(key): PTTL \(pttl), retention \(retentionMs)")
        }
        let usage = try #require(try await s.heldUsage(campaigns: ["c"])["c"])
        #expect(usage.jobs == 400 && usage.bytes == messages.reduce(0) { $0 + cost($1) })
        // Held once: a redelivered copy changes nothing.
        #expect(try await s.deferJobs([Deferral(campaign: "c", mode: .hold(dueMs: now), messages: [messages[7]])], nowMs: now) == [[.held]])
        #expect(try await s.deferredCount(campaign: "c") == 400)
        #expect(try await s.deferredCampaigns() == ["c"])
    }

    /// At a cap nothing more is stored (the job is `capped`, the caller keeps it); the bytes held never pass
    /// the cap; a release makes room, and the job is held then.
    @Test(arguments: targets)
    func theCapsBoundWhatIsHeld(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let one = cost(message(0))
        // Room for 3 jobs per shard and campaign, 4 per shard in total.
        let shards = Int64(RedisKeys.heldShards)
        let caps = HeldCaps(totalBytes: 4 * one * shards, campaignBytes: 3 * one * shards)
        let s = try store(server, caps: caps)
        let now: Int64 = 1_800_000_000_000
        let messages = (0..<300).map { message($0) }
        let answers = try await s.deferJobs([Deferral(campaign: "a", mode: .hold(dueMs: now), messages: messages)], nowMs: now)[0]
        let held = answers.filter { $0 == .held }.count
        #expect(held == 3 * RedisKeys.heldShards, "3 per shard: \(held)")
        #expect(answers.filter { $0 == .full }.count == 300 - held)
        let a = try #require(try await s.heldUsage(campaigns: ["a"])["a"])
        #expect(a.jobs == Int64(held) && a.bytes <= caps.campaignBytes)
        // Capped jobs were not stored: their members are not in Redis.
        let cappedOnes = messages.indices.filter { answers[$0] == .full }
        #expect(
            try await s.heldRoom(
                cappedOnes.map { HeldRoomRequest(campaign: "a", key: key(of: messages[$0]), value: value(of: messages[$0])) }
            ).allSatisfy { !$0 })
        // Another campaign gets the total's rest: one per shard.
        let other = try await s.deferJobs(
            [Deferral(campaign: "b", mode: .hold(dueMs: now), messages: (1000..<1200).map { message($0) })], nowMs: now)[0]
        #expect(other.filter { $0 == .held }.count == RedisKeys.heldShards)
        // A release makes room: the capped jobs of that shard are held when gated again.
        let due = try await s.dueDeferred(campaign: "a", nowMs: now, limit: 10_000)
        #expect(due.count == held)
        try await s.removeDeferred(campaign: "a", messages: due)
        #expect(try await s.heldUsage(campaigns: ["a"])["a"] == HeldUsage())
        let again = try await s.deferJobs(
            [Deferral(campaign: "a", mode: .hold(dueMs: now), messages: cappedOnes.prefix(40).map { messages[$0] })], nowMs: now)[0]
        #expect(again.contains(.held))
        // Jobs a transport held back (taken from Kafka already) are stored whatever the caps.
        let forced = try await s.deferJobs(
            [Deferral(campaign: "a", mode: .hold(dueMs: now), messages: (2000..<2100).map { message($0) })], nowMs: now,
            enforcingCaps: false)[0]
        #expect(forced.allSatisfy { $0 == .held })
        // A job larger than a shard's share is held when its shard holds nothing (another prefix: empty shards).
        var c2 = PipelineStoreConfiguration()
        c2.keyPrefix = "other"
        c2.heldCaps = HeldCaps(totalBytes: 1 << 16, campaignBytes: 1 << 16)
        let s2 = PipelineStore(client: try server.connection(), configuration: c2)
        let big = message(5000, size: 20_000)
        #expect(try await s2.deferJobs([Deferral(campaign: "big", mode: .hold(dueMs: now), messages: [big])], nowMs: now) == [[.held]])
    }

    /// A paced job at the cap takes no slot, nor does a copy already held: the clock moves by the jobs held.
    @Test(arguments: targets)
    func pacedJobsAtTheCapTakeNoSlot(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let one = cost(message(0))
        let s = try store(server, caps: HeldCaps(totalBytes: 1 << 30, campaignBytes: 2 * one * Int64(RedisKeys.heldShards)))
        let now: Int64 = 1_800_000_000_000
        let messages = (0..<200).map { message($0) }
        let answers = try await s.deferJobs(
            [Deferral(campaign: "p", mode: .pace(rate: 10, notBeforeMs: 0), messages: messages)], nowMs: now)[0]
        let admitted = answers.filter { $0 == .admitted }.count
        let held = answers.filter { $0 == .held }.count
        #expect(admitted == 1 && held == 2 * RedisKeys.heldShards - 1, "admitted \(admitted), held \(held)")
        // 100 ms per slot, one per job admitted or held: the capped ones took none.
        let next = try await s.client.send(RedisCommand("GET", s.keys.pace(campaign: "p"))).integer
        #expect(next == (now + Int64(admitted + held) * 100) * 1000)
        // Copies of held jobs keep their slots and take none.
        let heldOnes = messages.indices.filter { answers[$0] == .held }.map { messages[$0] }
        #expect(
            try await s.deferJobs([Deferral(campaign: "p", mode: .pace(rate: 10, notBeforeMs: 0), messages: heldOnes)], nowMs: now) == [
                heldOnes.map { _ in .held }
            ])
        #expect(try await s.client.send(RedisCommand("GET", s.keys.pace(campaign: "p"))).integer == next)
        // Released in slot order, each due at its slot.
        #expect(try await s.dueDeferred(campaign: "p", nowMs: now + 300, limit: 1000).count == 3)
        let parsed = DeferredMessage.parse(try await s.dueDeferred(campaign: "p", nowMs: now + 100, limit: 1000)[0].stored)
        #expect(parsed.slotted && parsed.value.count == 300)
    }

    /// Jobs an older version held in one sorted set of `{<p>}` are still released, and the campaign leaves
    /// the index once it holds nothing anywhere.
    @Test(arguments: targets)
    func jobsHeldByAnOlderVersionAreReleased(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let s = try store(server)
        let now: Int64 = 1_800_000_000_000
        let legacy = (0..<5).map { [UInt8(ascii: "H")] + message($0) }
        for (i, m) in legacy.enumerated() {
            var arguments = RedisArguments([s.keys.legacyDeferred(campaign: "old"), String(now + Int64(i))])
            arguments.append(bytes: m)
            _ = try await s.client.send(RedisCommand("ZADD", arguments: arguments))
        }
        _ = try await s.client.send(RedisCommand("SADD", s.keys.deferredCampaigns, "old"))
        _ = try await s.deferJobs([Deferral(campaign: "old", mode: .hold(dueMs: now), messages: [message(99)])], nowMs: now)
        #expect(try await s.deferredCount(campaign: "old") == 6)
        let due = try await s.dueDeferred(campaign: "old", nowMs: now + 10, limit: 100)
        #expect(due.filter(\.isLegacy).map(\.stored) == legacy && due.filter { !$0.isLegacy }.count == 1)
        try await s.removeDeferred(campaign: "old", messages: Array(due.prefix(3)))
        #expect(try await s.deferredCampaigns() == ["old"], "still holds some")
        try await s.removeDeferred(campaign: "old", messages: Array(due.dropFirst(3)))
        #expect(try await s.deferredCount(campaign: "old") == 0)
        #expect(try await s.deferredCampaigns().isEmpty)
    }

    /// A campaign's held jobs expire with its retention, and their bytes stop counting against the caps then.
    @Test(arguments: targets)
    func expiredHeldJobsStopCounting(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let one = cost(message(0))
        let caps = HeldCaps(totalBytes: one * Int64(RedisKeys.heldShards), campaignBytes: one * Int64(RedisKeys.heldShards))
        let s = try store(server, caps: caps, retention: .seconds(2))
        let now: Int64 = 1_800_000_000_000
        let first = try await s.deferJobs(
            [Deferral(campaign: "e", mode: .hold(dueMs: now), messages: (0..<64).map { message($0) })], nowMs: now)[0]
        #expect(first.contains(.full), "one job per shard: the rest capped")
        // Waits for the event (the keys' expiry), however slow the machine.
        let deadline = ContinuousClock.now + .seconds(60)
        while try await !server.keys("{apns:held:*}:jobs:e").isEmpty {
            guard ContinuousClock.now < deadline else { throw TestFailure("the held jobs did not expire within 60 s") }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await s.heldUsage(campaigns: ["e"])["e"] == HeldUsage())
        let later = try await s.deferJobs(
            [Deferral(campaign: "f", mode: .hold(dueMs: now), messages: (0..<64).map { message($0) })], nowMs: now)[0]
        #expect(later.filter { $0 == .held }.count == first.filter { $0 == .held }.count, "the expired bytes no longer count")
    }

    /// What the caps count follows what Redis uses: `used_memory` grows by about the counted bytes (so a cap
    /// bounds the server's memory, not the messages alone). Prints the measured cost per job.
    @Test func heldBytesFollowRedisMemory() async throws {
        let server = try await RedisUnderTest(.single)
        defer { server.stop() }
        let s = try store(server, caps: HeldCaps(totalBytes: 1 << 40, campaignBytes: 1 << 40))
        func usedMemory() async throws -> Int64 {
            let info = try await s.client.send(RedisCommand("INFO", "memory")).string ?? ""
            let line = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("used_memory:") } ?? ""
            return Int64(line.dropFirst("used_memory:".count)) ?? 0
        }
        let now: Int64 = 1_800_000_000_000
        _ = try await s.deferJobs(
            [Deferral(campaign: "warm", mode: .hold(dueMs: now), messages: (0..<100).map { message($0) })], nowMs: now)
        let before = try await usedMemory()
        let jobs = 20_000
        for start in stride(from: 0, to: jobs, by: 1000) {
            let batch = (start..<start + 1000).map { message(10_000 + $0, size: 300 + $0 % 200) }
            _ = try await s.deferJobs([Deferral(campaign: "m", mode: .hold(dueMs: now + Int64(start % 7)), messages: batch)], nowMs: now)
        }
        let used = try await usedMemory() - before
        let counted = try #require(try await s.heldUsage(campaigns: ["m"])["m"]).bytes
        let raw = counted - Int64(jobs) * PipelineStore.heldOverheadPerJob
        print(
            "held jobs: used_memory +\(used) B for \(jobs) jobs; counted \(counted) B; Redis's cost per job beyond its member: \((used - raw) / Int64(jobs)) B"
        )
        #expect(Double(used) <= Double(counted) * 1.2, "the caps count what Redis uses (within 20 %): used \(used), counted \(counted)")
        #expect(Double(used) >= Double(counted) * 0.6, "and not far more: used \(used), counted \(counted)")
    }

    @Test(arguments: targets)
    func theReleaseKeyIsMadeOnceAndShared(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let a = try await store(server).releaseKey()
        let b = try await store(server).releaseKey()
        #expect(a.count == 32 && a == b && Set(a).count > 4)
    }

    private func key(of message: [UInt8]) -> [UInt8] { Array(message[..<message.firstIndex(of: 0)!]) }
    private func value(of message: [UInt8]) -> [UInt8] { Array(message[(message.firstIndex(of: 0)! + 1)...]) }
}
