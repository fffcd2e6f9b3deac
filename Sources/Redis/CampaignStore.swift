import Foundation
import Synchronization

/// The campaigns' role of the store: publish marks and counts (``PipelineStore/recordPublished(campaign:jobIDs:messages:markSets:now:)``),
/// the publish times, and the reads of campaign progress and of the pipeline's counters (``PipelineStore/readStats(lastMinutes:now:)``).
/// Gives mark sets their expiry once per process and minute (``MarkExpiries``), shared with the settle.
struct CampaignStore: StoreRole {
    let runner: StoreRunner
    let markExpiries: MarkExpiries

    /// Starts a publish of `campaign`: notes the time (`publish_started_ms`, so `campaign wait` is not done
    /// while it runs) and fixes, at its first publish, how many sets hold its job marks: about 400 marks
    /// per set (compact intsets) for `expectedJobs`. Returns that number, for ``recordPublished(campaign:jobIDs:messages:markSets:)``.
    func beginPublish(
        campaign: String, expectedJobs: Int, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
    ) async throws -> Int {
        let key = keys.campaign(campaign)
        let sets = max(1, (expectedJobs + 399) / 400)
        let replies = try await commands([
            RedisCommand("HSET", key, CampaignField.publishStartedMs.rawValue, String(nowMs)),
            RedisCommand("HSETNX", key, CampaignField.jobMarkSets.rawValue, String(sets)),
            RedisCommand("HGET", key, CampaignField.jobMarkSets.rawValue),
            // The hash lives jobMarkRetention after the campaign's last activity (finishPublish and the
            // settles refresh it).
            RedisCommand("EXPIRE", key, String(jobMarkRetention + MarkExpiries.memory)),
        ])
        guard let stored = replies[2].integer, stored > 0 else { throw RedisError.unexpectedReply("job_mark_sets: \(replies[2])") }
        return Int(stored)
    }

    /// Ends a publish of `campaign` (`publish_finished_ms`).
    func finishPublish(campaign: String, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) async throws {
        let key = keys.campaign(campaign)
        _ = try await commands([
            RedisCommand("HSET", key, CampaignField.publishFinishedMs.rawValue, String(nowMs)),
            RedisCommand("EXPIRE", key, String(jobMarkRetention + MarkExpiries.memory)),
        ])
    }

    /// Records a batch of published jobs: `messages` (default: one per id) to `published`, and the ids
    /// never published before in this campaign to `jobs` (marked in `{<p>}:jobs:published:<id>:<set>`,
    /// `markSets` from ``beginPublish(campaign:expectedJobs:nowMs:)``). Exactly once even if retried. One
    /// round trip. Returns how many ids were new.
    ///
    /// A mark set lives ``jobMarkRetention`` after its last write, plus up to a minute: its expiry is
    /// set once per process and minute (``MarkExpiries``), a minute longer, not with every batch (a
    /// batch of 1 000 touched ~430 of a 1M-job campaign's 2 500 sets: 0.43 `EXPIRE` per job).
    @discardableResult
    func recordPublished(
        campaign: String, jobIDs: [String], messages: Int? = nil, markSets: Int, now: Int64 = PipelineStore.epochNow()
    ) async throws -> Int {
        // The members by mark set, so that the script makes one SADD per set and batch (a batch of 1 000
        // of a 1M-job campaign touches ~430 of its 2 500 sets) rather than one per job. The sets are
        // numbered 1, 2, … as first met: set n's key is the script's KEYS[2 + n] (after the batch marker
        // and the campaign hash), its members `members[n - 1]`.
        var keyList = [keys.batch(PipelineStore.newBatchID()), keys.campaign(campaign)]
        var numberOf: [Int: Int] = [:]
        var members: [[Int64]] = []
        var expiring: [(set: Int, number: Int)] = []
        for id in jobIDs {
            let fingerprint = JobFingerprint(jobID: id)
            let set = fingerprint.subBucket(of: max(1, markSets))
            if let number = numberOf[set] {
                members[number - 1].append(fingerprint.member)
                continue
            }
            members.append([fingerprint.member])
            let number = members.count
            numberOf[set] = number
            keyList.append(keys.publishedJobs(campaign: campaign, set: set))
            if !markExpiries.isGiven(campaign: campaign, set: set, now: now) { expiring.append((set, number)) }
        }
        var jobArguments = RedisArguments()
        for (offset, list) in members.enumerated() {
            // At most 1 000 members per SADD (Lua's `unpack` stack).
            for from in stride(from: 0, to: list.count, by: 1_000) {
                let chunk = list[from..<min(list.count, from + 1_000)]
                jobArguments.append(offset + 1)  // the set's number
                jobArguments.append(chunk.count)
                for member in chunk { jobArguments.append(member) }
            }
        }
        var arguments = RedisArguments()
        arguments.append(configuration.batchMarkerRetention.components.seconds)
        arguments.append(messages ?? jobIDs.count)
        arguments.append(jobMarkRetention + MarkExpiries.memory)
        arguments.append(expiring.count)
        for set in expiring { arguments.append(set.number) }
        arguments.append(contentsOf: jobArguments)
        let reply = try await eval(Scripts.publish, keys: keyList, arguments: arguments)
        guard let new = reply.integer else { throw RedisError.unexpectedReply("publish: \(reply)") }
        // A replay (-1) wrote nothing, but its first run did, and set the same expiries.
        markExpiries.markGiven(campaign: campaign, sets: expiring.map(\.set))
        return max(0, Int(new))
    }

    /// Adds `count` to the campaign's `published` field, exactly once even if the call is retried. (Only
    /// messages: `jobs`, the base of per-job progress, comes from ``recordPublished(campaign:jobIDs:messages:markSets:)``.)
    func incrementPublished(campaign: String, by count: Int) async throws {
        var counters = CounterWrites(marker: keys.batch(PipelineStore.newBatchID()))
        counters.increment(keys.campaign(campaign), "published", Int64(count))
        counters.expire(keys.campaign(campaign), seconds: jobMarkRetention + MarkExpiries.memory)
        try await applyCounters(counters, operation: "published")
    }

    // MARK: Reads

    /// Totals and the per-minute buckets of the last `lastMinutes` minutes (ending with the current
    /// one), in one round trip.
    func readStats(lastMinutes: Int = 60, now: Int64 = PipelineStore.epochNow()) async throws -> PipelineStats {
        let currentMinute = StoreRunner.floorDivide(now, 60) * 60
        let starts = (0..<max(0, lastMinutes)).reversed().map { currentMinute - Int64($0) * 60 }
        var list = [RedisCommand("HGETALL", keys.stats)]
        for start in starts { list.append(RedisCommand("HGETALL", keys.stats(minuteOf: start))) }
        let replies = try await commands(list)
        let totals = try Self.counters(replies[0])
        var minutes: [PipelineStats.Minute] = []
        for (start, reply) in zip(starts, replies.dropFirst()) {
            minutes.append(.init(minute: RedisKeys.minuteStamp(start), start: start, counters: try Self.counters(reply)))
        }
        return PipelineStats(totals: totals, minutes: minutes)
    }

    func readCampaign(_ id: String) async throws -> CampaignProgress {
        let counters = try Self.counters(try await command(RedisCommand("HGETALL", keys.campaign(id))))
        return CampaignProgress(id: id, published: counters.fields["published"] ?? 0, counters: counters)
    }

    static func counters(_ reply: RedisReply) throws -> Counters {
        guard let elements = reply.array, elements.count % 2 == 0 else {
            throw RedisError.unexpectedReply("HGETALL: \(reply)")
        }
        var fields: [String: Int64] = [:]
        for index in stride(from: 0, to: elements.count, by: 2) {
            if let field = elements[index].string, let value = elements[index + 1].integer { fields[field] = value }
        }
        return Counters(fields: fields)
    }
}

/// Which campaign mark sets (`{<p>}:jobs:published:<id>:<set>`) this process gave their expiry within
/// the current minute, as ``DedupExpiries`` does for dedup sets. A mark set's expiry follows its last
/// write, so it is set ``memory`` seconds longer than the retention: a write later in the same minute is
/// covered. Forgotten every minute; marked only once the call that set them succeeded.
final class MarkExpiries: Sendable {
    private struct State {
        var given: [String: Set<Int>] = [:]
        var window = ExpiryWindow()
    }
    private let state = Mutex(State())
    static let memory = ExpiryWindow.seconds
    /// The "set" that stands for the campaign's hash (`{<p>}:campaign:<id>`): mark sets are 0…n−1.
    static let hashSet = -1

    func isGiven(campaign: String, set: Int, now: Int64) -> Bool {
        state.withLock { state in
            if state.window.startsAnew(now: now) { state.given.removeAll() }
            return state.given[campaign]?.contains(set) ?? false
        }
    }

    func markGiven(campaign: String, sets: [Int]) {
        if sets.isEmpty { return }
        state.withLock { $0.given[campaign, default: []].formUnion(sets) }
    }
}
