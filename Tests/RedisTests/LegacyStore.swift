import Foundation
import Logging
@testable import Redis

// The gate and settle before issue 14/15 (commit f757e0e), for an A/B of redis-server CPU in one run.
/// The pipeline's shared state in Redis: the gate before sending, the settler after, registrations,
/// suppressions and the counters dashboards read. Every write operation is one round trip (one
/// `EVALSHA`) per batch, and safe to repeat when a reply is lost with the connection.
///
/// Dedup records: a 64-bit fingerprint of the job id (``JobFingerprint``) as a member of the set
/// `<p>:dedup:<time bucket>:<sub-bucket>`, which Redis stores as an intset (8 raw bytes per member); the
/// whole set expires with its time bucket. Measured on Redis 7.0.15 (`used_memory` delta over 100 000
/// accepted jobs settled through ``settle(_:)``, test `dedupRecordsAreCompact`): 9.5 B/job with ~390
/// members per set (256 sub-buckets), 10.6 B/job with ~98 (1024 sub-buckets). For comparison, same
/// server: 8-byte fields in listpack hashes 14 B/job, one `SET <p>:dedup:<hex> 1 EX ttl` per job 117 B/job.
public struct LegacyStore: Sendable {
    public let client: RedisClient
    public let configuration: PipelineStoreConfiguration
    public let keys: LegacyKeys
    private let logger: Logger
    private let overflowWarning = LegacyOnceFlag()

    public init(client: RedisClient, configuration: PipelineStoreConfiguration = PipelineStoreConfiguration(), logger: Logger = Logger(label: "apns.redis.store")) {
        self.client = client
        self.configuration = configuration
        self.keys = LegacyKeys(prefix: configuration.keyPrefix)
        self.logger = logger
    }

    public static func epochNow() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// How long a campaign's job marks (`…:jobs:published:*`, `…:jobs:counted:*`) live after their last
    /// write: as long as the longest-lived dedup record, the mark of its accepted jobs. A campaign
    /// published again after that is a new run: its jobs are sent again (dedup expired) and count again,
    /// in `jobs` as in `jobs_settled`.
    public var jobMarkRetention: Int64 {
        configuration.dedupRetention.components.seconds + max(1, configuration.dedupBucketWidth.components.seconds)
    }

    public static func newBatchID() -> String { UUID().uuidString.lowercased() }

    // MARK: Gate

    /// Decides, for each job of a batch, whether to send it: already settled as accepted → ``GateDecision/deduped``;
    /// another copy in flight → ``GateDecision/inFlight``; token suppressed and not registered since →
    /// ``GateDecision/suppressed``; else ``GateDecision/admitted(language:)`` with an in-flight lease
    /// taken. One round trip. Decisions come back in the order of `requests`.
    public func gate(_ requests: [GateRequest], now: Int64 = PipelineStore.epochNow()) async throws -> [GateDecision] {
        if requests.isEmpty { return [] }
        var arguments = RedisArguments()
        arguments.append(configuration.leaseOwner)
        arguments.append(Self.newBatchID())  // the gate call: the same across retries of this call
        arguments.append(max(1, configuration.inFlightLease.milliseconds))
        arguments.append(keys.ownerPrefix)
        let buckets = dedupBucketsToCheck(now: now)
        arguments.append(buckets.count)
        for bucket in buckets { arguments.append(keys.dedupPrefix(bucket: bucket)) }

        var appIndex: [String: Int] = [:]
        var apps: [String] = []
        for request in requests where appIndex[request.app] == nil {
            apps.append(request.app)
            appIndex[request.app] = apps.count  // 1-based for Lua
        }
        arguments.append(apps.count)
        for app in apps {
            arguments.append(keys.suppressed(app: app))
            arguments.append(keys.registered(app: app))
            arguments.append(keys.language(app: app))
        }
        for request in requests {
            let fingerprint = JobFingerprint(jobID: request.jobID)
            arguments.append(keys.inFlight(jobID: request.jobID))
            arguments.append(appIndex[request.app]!)
            arguments.append(LegacyKeys.tokenField(request.tokenHex))
            arguments.append(fingerprint.member)
            arguments.append(fingerprint.subBucket(of: configuration.dedupSubBuckets))
        }

        let reply = try await client.eval(LegacyScripts.gate, arguments: arguments)
        guard let flat = reply.array, flat.count == requests.count * 2 else {
            throw RedisError.unexpectedReply("gate: expected \(requests.count * 2) elements, got \(reply)")
        }
        var decisions: [GateDecision] = []
        decisions.reserveCapacity(requests.count)
        for index in requests.indices {
            switch flat[index * 2].integer {
            case 1: decisions.append(.admitted(language: flat[index * 2 + 1].string))
            case 2: decisions.append(.deduped)
            case 3: decisions.append(.inFlight)
            case 4: decisions.append(.suppressed)
            case 5: decisions.append(.takenOver(language: flat[index * 2 + 1].string))
            case 6: decisions.append(.inFlightElsewhere(owner: flat[index * 2 + 1].string ?? "?"))
            default: throw RedisError.unexpectedReply("gate: bad decision \(flat[index * 2])")
            }
        }
        return decisions
    }

    // MARK: Lease owner

    /// Writes (or refreshes) this process's heartbeat, `<p>:owner:<leaseOwner>`, living
    /// ``PipelineStoreConfiguration/ownerHeartbeat``. While it lives, this process's leases hold.
    public func beat(description: String = "") async throws {
        _ = try await client.send(
            RedisCommand(
                "SET", keys.owner(configuration.leaseOwner), description.isEmpty ? "alive" : description, "PX",
                String(max(1, configuration.ownerHeartbeat.milliseconds))))
    }

    /// Removes the heartbeat (graceful stop): whatever this process still leases is void at once.
    public func endHeartbeat() async throws {
        _ = try await client.send(RedisCommand("DEL", keys.owner(configuration.leaseOwner)))
    }

    /// Buckets that may hold a live record: those whose expiry (end + retention) is after `now`, plus the
    /// next one in case another process's clock runs slightly ahead.
    func dedupBucketsToCheck(now: Int64) -> [Int64] {
        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        let retention = configuration.dedupRetention.components.seconds
        let first = Self.floorDivide(now - retention, width)
        let last = Self.floorDivide(now, width) + 1
        return Array(first...last)
    }

    // MARK: Settler

    /// Records a batch of outcomes: dedup records for accepted jobs, suppression of the tokens an outcome
    /// asks to suppress, releases the in-flight leases, and increments totals, the minute bucket,
    /// campaigns, `rejected:<code>` and shard counters. One round trip.
    ///
    /// Exactly once: the batch's ``SettleBatch/id`` is set as a marker in the same script; applying a
    /// batch whose marker exists changes nothing and returns `false`. So a retry after a lost reply (ours
    /// or the caller's) never counts twice.
    @discardableResult
    public func settle(_ batch: SettleBatch) async throws -> Bool {
        var writes = LegacyWrites(marker: keys.batch(batch.id), markerTTL: configuration.batchMarkerRetention.components.seconds)
        let minuteKey = keys.stats(minuteOf: batch.settledAt)
        func count(_ field: String, _ delta: Int64, campaign: String? = nil) {
            guard delta != 0 else { return }
            writes.increment(keys.stats, field, delta)
            writes.increment(minuteKey, field, delta)
            if let campaign { writes.increment(keys.campaign(campaign), field, delta) }
        }

        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        let bucket = Self.floorDivide(batch.settledAt, width)
        let dedupExpiry = (bucket + 1) * width + configuration.dedupRetention.components.seconds
        writes.countedTTL = jobMarkRetention
        struct CampaignJob: Hashable {
            var campaign: String
            var member: Int64
        }
        var seenInBatch = Set<CampaignJob>()
        for outcome in batch.outcomes {
            count(outcome.kind.rawValue, 1, campaign: outcome.campaign)
            if let code = outcome.code { count("rejected:\(code)", 1, campaign: outcome.campaign) }
            if let shard = outcome.shard, outcome.kind == .accepted || outcome.kind == .rejected || outcome.kind == .deadLettered {
                writes.increment(keys.shard(app: outcome.app, shard: shard), "sent", 1)
            }
            let fingerprint = JobFingerprint(jobID: outcome.jobID)
            // Per-job progress: counted by the script if this is the job's first settlement (LegacyScripts.apply).
            // Only a job's first outcome in this batch can be (a later one is a redelivered copy).
            var progress: (hash: String, counted: String, field: CampaignField)?
            if let campaign = outcome.campaign, let field = CampaignField.jobs(outcome.kind),
                seenInBatch.insert(CampaignJob(campaign: campaign, member: fingerprint.member)).inserted
            {
                progress = (keys.campaign(campaign), keys.countedJobs(campaign: campaign), field)
            }
            if outcome.kind == .accepted {
                let key = keys.dedup(bucket: bucket, subBucket: fingerprint.subBucket(of: configuration.dedupSubBuckets))
                writes.add(key, member: fingerprint.member, expireAt: dedupExpiry, countingFor: progress.map { ($0.hash, $0.counted) })
            } else if let progress {
                writes.progress(campaign: progress.hash, counted: progress.counted, field: progress.field.rawValue, member: fingerprint.member)
            }
            if let suppression = outcome.suppressToken {
                writes.suppress(
                    keys.suppressed(app: outcome.app), LegacyKeys.tokenField(outcome.tokenHex), at: suppression.since ?? batch.settledAt,
                    reason: suppression.reason)
            }
            // A deduped job never took a lease; its id's lease (if any) belongs to another copy.
            if outcome.kind != .deduped { writes.delete(keys.inFlight(jobID: outcome.jobID)) }
        }
        let events = batch.events
        count(CounterField.received.rawValue, Int64(events.received))
        count(CounterField.replayed.rawValue, Int64(events.replayed))
        count(CounterField.ambiguous.rawValue, Int64(events.ambiguous))
        count(CounterField.retried.rawValue, Int64(events.retried))
        count(CounterField.reconnects.rawValue, Int64(events.reconnects))
        count(CounterField.resentAfterCrash.rawValue, Int64(events.resentAfterCrash))
        count(CounterField.inFlightWaits.rawValue, Int64(events.inFlightWaits))
        count(CounterField.lostAfterSettle.rawValue, Int64(events.lostAfterSettle))
        count(CounterField.refusedAfterSettle.rawValue, Int64(events.refusedAfterSettle))
        for (campaign, e) in batch.campaignEvents {
            for (field, n) in [(CounterField.resentAfterCrash, e.resentAfterCrash), (.ambiguous, e.ambiguous)] where n != 0 {
                writes.increment(keys.campaign(campaign), field.rawValue, Int64(n))
            }
        }
        for shardEvent in batch.shardEvents where shardEvent.replayed != 0 {
            writes.increment(keys.shard(app: shardEvent.app, shard: shardEvent.shard), "replayed", Int64(shardEvent.replayed))
        }
        if writes.touches(minuteKey) {
            writes.expire(minuteKey, seconds: configuration.minuteBucketRetention.components.seconds)
        }
        return try await apply(writes, operation: "settle")
    }

    // MARK: Registrations and suppressions

    /// Applies registration events: `registered` and the language are written only when the event is at
    /// least as new as the stored registration, so a registration lifts an older suppression and a stale
    /// one changes nothing. One round trip.
    public func applyRegistrations(_ registrations: [Registration]) async throws {
        if registrations.isEmpty { return }
        var writes = LegacyWrites()
        for registration in registrations {
            writes.register(
                keys.registered(app: registration.app), keys.language(app: registration.app),
                LegacyKeys.tokenField(registration.tokenHex), at: registration.registeredAt, language: registration.language ?? "")
        }
        _ = try await apply(writes, operation: "registrations")
    }

    /// Suppresses tokens (`<p>:suppressed:<app>` token → `<epoch>:<reason>`), keeping the newest time of
    /// each token. For the feedback poller: one round trip per batch of tuples.
    public func suppress(_ suppressions: [Suppression]) async throws {
        if suppressions.isEmpty { return }
        var writes = LegacyWrites()
        for suppression in suppressions {
            writes.suppress(keys.suppressed(app: suppression.app), LegacyKeys.tokenField(suppression.tokenHex), at: suppression.at, reason: suppression.reason)
        }
        _ = try await apply(writes, operation: "suppress")
    }

    // MARK: Counters

    /// Starts a publish of `campaign`: notes the time (`publish_started_ms`, so `campaign wait` is not done
    /// while it runs) and fixes, at its first publish, how many sets hold its job marks: about 400 marks
    /// per set (compact intsets) for `expectedJobs`. Returns that number, for ``recordPublished(campaign:jobIDs:messages:markSets:)``.
    public func beginPublish(campaign: String, expectedJobs: Int, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) async throws -> Int {
        let key = keys.campaign(campaign)
        let sets = max(1, (expectedJobs + 399) / 400)
        let replies = try await client.pipeline([
            RedisCommand("HSET", key, CampaignField.publishStartedMs.rawValue, String(nowMs)),
            RedisCommand("HSETNX", key, CampaignField.jobMarkSets.rawValue, String(sets)),
            RedisCommand("HGET", key, CampaignField.jobMarkSets.rawValue),
        ])
        guard let stored = replies[2].integer, stored > 0 else { throw RedisError.unexpectedReply("job_mark_sets: \(replies[2])") }
        return Int(stored)
    }

    /// Ends a publish of `campaign` (`publish_finished_ms`).
    public func finishPublish(campaign: String, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) async throws {
        _ = try await client.send(RedisCommand("HSET", keys.campaign(campaign), CampaignField.publishFinishedMs.rawValue, String(nowMs)))
    }

    /// Records a batch of published jobs: `messages` (default: one per id) to `published`, and the ids
    /// never published before in this campaign to `jobs` (marked in `…:jobs:published:<id>:<set>`,
    /// `markSets` from ``beginPublish(campaign:expectedJobs:nowMs:)``). Exactly once even if retried. One
    /// round trip. Returns how many ids were new.
    @discardableResult
    public func recordPublished(campaign: String, jobIDs: [String], messages: Int? = nil, markSets: Int) async throws -> Int {
        var arguments = RedisArguments()
        arguments.append(keys.batch(Self.newBatchID()))
        arguments.append(configuration.batchMarkerRetention.components.seconds)
        arguments.append(keys.campaign(campaign))
        arguments.append(messages ?? jobIDs.count)
        arguments.append(jobMarkRetention)
        for id in jobIDs {
            let fingerprint = JobFingerprint(jobID: id)
            arguments.append(keys.publishedJobs(campaign: campaign, set: fingerprint.subBucket(of: max(1, markSets))))
            arguments.append(fingerprint.member)
        }
        let reply = try await client.eval(LegacyScripts.publish, arguments: arguments)
        guard let new = reply.integer else { throw RedisError.unexpectedReply("publish: \(reply)") }
        return max(0, Int(new))
    }

    /// Adds `count` to the campaign's `published` field, exactly once even if the call is retried. (Only
    /// messages: `jobs`, the base of per-job progress, comes from ``recordPublished(campaign:jobIDs:messages:markSets:)``.)
    public func incrementPublished(campaign: String, by count: Int) async throws {
        var writes = LegacyWrites(marker: keys.batch(Self.newBatchID()), markerTTL: configuration.batchMarkerRetention.components.seconds)
        writes.increment(keys.campaign(campaign), "published", Int64(count))
        _ = try await apply(writes, operation: "published")
    }

    /// Adds to counters of the totals and of the current minute (not exactly once: for events counted
    /// outside a settle batch, such as failed dead-letter writes).
    public func increment(_ field: CounterField, by delta: Int64, now: Int64 = PipelineStore.epochNow()) async throws {
        guard delta != 0 else { return }
        var writes = LegacyWrites()
        let minuteKey = keys.stats(minuteOf: now)
        writes.increment(keys.stats, field.rawValue, delta)
        writes.increment(minuteKey, field.rawValue, delta)
        writes.expire(minuteKey, seconds: configuration.minuteBucketRetention.components.seconds)
        _ = try await apply(writes, operation: "increment")
    }

    /// Writes a shard's connection state (idempotent).
    public func updateShard(_ status: ShardStatus) async throws {
        var writes = LegacyWrites()
        let key = keys.shard(app: status.app, shard: status.shard)
        writes.set(key, "state", status.state)
        if let gateway = status.gateway { writes.set(key, "gateway", gateway) }
        if let since = status.connectedSince { writes.set(key, "connected_since", String(since)) }
        if let error = status.lastError { writes.set(key, "last_error", error) }
        _ = try await apply(writes, operation: "shard")
    }

    /// Totals and the per-minute buckets of the last `lastMinutes` minutes (ending with the current
    /// one), in one round trip.
    public func readStats(lastMinutes: Int = 60, now: Int64 = PipelineStore.epochNow()) async throws -> PipelineStats {
        let currentMinute = Self.floorDivide(now, 60) * 60
        let starts = (0..<max(0, lastMinutes)).reversed().map { currentMinute - Int64($0) * 60 }
        var commands = [RedisCommand("HGETALL", keys.stats)]
        for start in starts { commands.append(RedisCommand("HGETALL", keys.stats(minuteOf: start))) }
        let replies = try await client.pipeline(commands)
        let totals = try Self.counters(replies[0])
        var minutes: [PipelineStats.Minute] = []
        for (start, reply) in zip(starts, replies.dropFirst()) {
            minutes.append(.init(minute: LegacyKeys.minuteStamp(start), start: start, counters: try Self.counters(reply)))
        }
        return PipelineStats(totals: totals, minutes: minutes)
    }

    public func readCampaign(_ id: String) async throws -> CampaignProgress {
        let counters = try Self.counters(try await client.send(RedisCommand("HGETALL", keys.campaign(id))))
        return CampaignProgress(id: id, published: counters.fields["published"] ?? 0, counters: counters)
    }

    // MARK: Internals

    private func apply(_ writes: LegacyWrites, operation: String) async throws -> Bool {
        let reply = try await client.eval(LegacyScripts.apply, arguments: writes.arguments)
        guard let result = reply.array, result.count == 2, let applied = result[0].integer, let largest = result[1].integer else {
            throw RedisError.unexpectedReply("\(operation): \(reply)")
        }
        if largest > configuration.dedupSetCapacity, overflowWarning.setOnce() {
            logger.warning("dedup sets exceed the intset size: raise dedupSubBuckets", metadata: [
                "redis.dedup_set_size": "\(largest)", "redis.dedup_sub_buckets": "\(configuration.dedupSubBuckets)",
            ])
        }
        if applied == 0 {
            logger.debug("batch already applied; replay ignored", metadata: ["redis.operation": "\(operation)"])
        }
        return applied == 1
    }

    private static func counters(_ reply: RedisReply) throws -> Counters {
        guard let elements = reply.array, elements.count % 2 == 0 else {
            throw RedisError.unexpectedReply("HGETALL: \(reply)")
        }
        var fields: [String: Int64] = [:]
        for index in stride(from: 0, to: elements.count, by: 2) {
            if let field = elements[index].string, let value = elements[index + 1].integer { fields[field] = value }
        }
        return Counters(fields: fields)
    }

    static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }
}

/// The sections of one `LegacyScripts.apply` call, collected in Swift (counters summed per key and field, so
/// a batch of 1000 accepted jobs is one HINCRBY per counter, not 1000).
struct LegacyWrites {
    var marker = ""
    var markerTTL: Int64 = 0
    private var adds: [(String, Int64)] = []
    private var expireAts: [String: Int64] = [:]
    private var suppressions: [(String, String, Int64, String)] = []
    private var registrations: [(String, String, String, Int64, String)] = []
    private var deletes: [String] = []
    private var increments: [String: [String: Int64]] = [:]
    private var expires: [String: Int64] = [:]
    private var sets: [(String, String, String)] = []
    private struct CampaignProgressWrites {
        var hash: String
        var counted: String
        /// Dedup records of the campaign's accepted jobs: emitted together, first in the #sadd section.
        var accepted: [(String, Int64)] = []
        var others: [(field: String, member: Int64)] = []
    }
    private var progress: [CampaignProgressWrites] = []
    private var campaignIndex: [String: Int] = [:]
    var countedTTL: Int64 = 1

    init(marker: String = "", markerTTL: Int64 = 0) {
        self.marker = marker
        self.markerTTL = markerTTL
    }

    /// `countingFor`: the campaign (hash, counted set) whose per-job progress this accepted job's dedup
    /// record counts in.
    mutating func add(_ key: String, member: Int64, expireAt: Int64, countingFor campaign: (hash: String, counted: String)? = nil) {
        if let campaign {
            progress[self.campaign(campaign.hash, campaign.counted)].accepted.append((key, member))
        } else {
            adds.append((key, member))
        }
        expireAts[key] = expireAt
    }
    /// A job's first outcome other than accepted, for its campaign's per-job fields.
    mutating func progress(campaign hash: String, counted: String, field: String, member: Int64) {
        progress[campaign(hash, counted)].others.append((field, member))
    }
    private mutating func campaign(_ hash: String, _ counted: String) -> Int {
        if let known = campaignIndex[hash] { return known }
        progress.append(CampaignProgressWrites(hash: hash, counted: counted))
        campaignIndex[hash] = progress.count - 1
        return progress.count - 1
    }
    mutating func suppress(_ key: String, _ token: String, at: Int64, reason: String) {
        suppressions.append((key, token, at, "\(at):\(reason)"))
    }
    mutating func register(_ key: String, _ languageKey: String, _ token: String, at: Int64, language: String) {
        registrations.append((key, languageKey, token, at, language))
    }
    mutating func delete(_ key: String) { deletes.append(key) }
    mutating func increment(_ key: String, _ field: String, _ delta: Int64) {
        increments[key, default: [:]][field, default: 0] += delta
    }
    mutating func expire(_ key: String, seconds: Int64) { expires[key] = seconds }
    mutating func set(_ key: String, _ field: String, _ value: String) { sets.append((key, field, value)) }
    func touches(_ key: String) -> Bool { increments[key] != nil }

    var arguments: RedisArguments {
        var a = RedisArguments()
        a.append(marker)
        a.append(markerTTL)
        a.append(adds.count + progress.reduce(0) { $0 + $1.accepted.count })
        for campaign in progress {
            for (key, member) in campaign.accepted { a.append(key); a.append(member) }
        }
        for (key, member) in adds { a.append(key); a.append(member) }
        a.append(expireAts.count)
        for (key, at) in expireAts { a.append(key); a.append(at) }
        a.append(suppressions.count)
        for (key, token, at, value) in suppressions { a.append(key); a.append(token); a.append(at); a.append(value) }
        a.append(registrations.count)
        for (key, languageKey, token, at, language) in registrations {
            a.append(key); a.append(languageKey); a.append(token); a.append(at); a.append(language)
        }
        a.append(deletes.count)
        for key in deletes { a.append(key) }
        a.append(increments.values.reduce(0) { $0 + $1.count })
        for (key, fields) in increments {
            for (field, delta) in fields { a.append(key); a.append(field); a.append(delta) }
        }
        a.append(expires.count)
        for (key, seconds) in expires { a.append(key); a.append(seconds) }
        a.append(sets.count)
        for (key, field, value) in sets { a.append(key); a.append(field); a.append(value) }
        a.append(countedTTL)
        a.append(progress.count)
        var firstAdd = 1
        for campaign in progress {
            a.append(campaign.hash)
            a.append(campaign.counted)
            a.append(firstAdd)
            a.append(campaign.accepted.count)
            a.append(campaign.others.count)
            for (field, member) in campaign.others { a.append(field); a.append(member) }
            firstAdd += campaign.accepted.count
        }
        return a
    }
}

/// A flag that is set once, from any thread (to log a configuration warning once, not per batch).
final class LegacyOnceFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false

    /// True for the first caller only.
    func setOnce() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if done { return false }
        done = true
        return true
    }
}

/// The Lua scripts. Each runs atomically and is one `EVALSHA`: one round trip per batch. Key names are
/// computed in Swift (``LegacyKeys``) and passed in, so the layout is spelled in one place. (That, and the
/// mix of per-app and global keys in one call, means these scripts target a single Redis server or
/// primary, not Redis Cluster.)
enum LegacyScripts {
    /// Gate. ARGV: owner, call, lease-ms, heartbeat-prefix, #buckets, bucket-prefix…, #apps,
    /// (suppressed-key registered-key lang-key)…, then per job: lease-key app-index token member sub-bucket.
    /// Returns a flat array: per job a code (1 admitted, 2 deduped, 3 in flight in this process,
    /// 4 suppressed, 5 admitted by taking over the lease of a dead process, 6 in flight in another live
    /// process) and a value: the language for 1 and 5 (nil when none), the lease holder for 6.
    ///
    /// A lease's value is `<owner>/<call>`: the owner is the process (its heartbeat key
    /// `<heartbeat-prefix><owner>` lives while the process does), the call is this gate call, so a retry
    /// of the call after a lost reply recognises (and refreshes) its own leases, while another batch of
    /// the same process holding the id is still in flight. A lease whose owner's heartbeat is gone is
    /// void: that process died between gate and settle, and its job is taken over at once instead of
    /// waiting out the lease.
    static let gate = RedisScript(#"""
        local owner, call, leaseMs, heartbeatPrefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
        local mine = owner .. '/' .. call
        local i = 5
        local nb = tonumber(ARGV[i]); i = i + 1
        local buckets = {}
        for b = 1, nb do buckets[b] = ARGV[i]; i = i + 1 end
        local na = tonumber(ARGV[i]); i = i + 1
        local apps = {}
        for a = 1, na do apps[a] = { ARGV[i], ARGV[i + 1], ARGV[i + 2] }; i = i + 3 end
        local out, admittedInBatch, alive = {}, {}, {}
        while i <= #ARGV do
          local lease, app, token, member, sub = ARGV[i], apps[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
          i = i + 5
          local code, lang = 1, false
          for b = 1, nb do
            if redis.call('SISMEMBER', buckets[b] .. sub, member) == 1 then code = 2; break end
          end
          if code == 1 then
            if admittedInBatch[lease] then
              code = 3
            elseif not redis.call('SET', lease, mine, 'NX', 'PX', leaseMs) then
              local held = redis.call('GET', lease)
              if held == mine then
                -- A retry of this very call (its reply was lost): its own lease.
                redis.call('PEXPIRE', lease, leaseMs)
              else
                local holder = held and string.match(held, '^([^/]+)/')
                if not holder or holder == owner then
                  -- Another batch of this process (or a lease of unknown form): in flight.
                  code = 3
                else
                  -- Another process's lease: void if its heartbeat lapsed (it died). NOTE: the heartbeat
                  -- key is not in the lease's hash slot, so this read is cross-slot under Redis Cluster
                  -- (issue 15 reworks the key layout).
                  if alive[holder] == nil then alive[holder] = redis.call('EXISTS', heartbeatPrefix .. holder) == 1 end
                  if alive[holder] then
                    code = 6; lang = holder
                  else
                    redis.call('SET', lease, mine, 'PX', leaseMs)
                    code = 5
                  end
                end
              end
            end
          end
          if code == 1 or code == 5 then
            local s = redis.call('HGET', app[1], token)
            if s then
              local t = tonumber(string.match(s, '^(%d+)'))
              local r = redis.call('HGET', app[2], token)
              local rt = r and tonumber(r)
              -- Suppressed unless registered strictly after the suppression time.
              if not (t and rt and rt > t) then code = 4; redis.call('DEL', lease) end
            end
          end
          if code == 1 or code == 5 then
            admittedInBatch[lease] = true
            lang = redis.call('HGET', app[3], token)
          end
          out[#out + 1] = code
          out[#out + 1] = lang
        end
        return out
        """#)

    /// Records published jobs of a campaign. ARGV: marker-key, marker-ttl-s, campaign-hash, messages,
    /// marks-ttl-s, then per job: mark-set member. Adds `messages` to `published` and the number of job
    /// ids never published before (their fingerprint added to a mark set) to `jobs`; every mark set
    /// touched lives marks-ttl-s from now. Returns the number added to `jobs`, or -1 when the marker
    /// existed (a replay of this call: nothing done).
    static let publish = RedisScript(#"""
        if not redis.call('SET', ARGV[1], '1', 'NX', 'EX', ARGV[2]) then return -1 end
        local hash, messages, ttl = ARGV[3], ARGV[4], ARGV[5]
        local new, touched = 0, {}
        for i = 6, #ARGV, 2 do
          new = new + redis.call('SADD', ARGV[i], ARGV[i + 1])
          touched[ARGV[i]] = true
        end
        for key in pairs(touched) do redis.call('EXPIRE', key, ttl) end
        redis.call('HINCRBY', hash, 'published', messages)
        redis.call('HINCRBY', hash, 'jobs', new)
        return new
        """#)

    /// Applies one batch of writes; used by settle, suppress, registrations and published counts.
    /// ARGV sections, each led by its entry count:
    ///   marker-key ('' for none), marker-ttl-s;
    ///   #sadd (key member)…;  #expireat (key epoch)…;
    ///   #suppress (hash token epoch value)…      newest time wins;
    ///   #register (reg-hash lang-hash token epoch lang)…  newest time wins; lang '' = keep;
    ///   #del (key)…;  #hincrby (key field delta)…;  #expire (key seconds)…;  #hset (key field value)…;
    ///   counted-ttl-s, #campaigns (campaign-hash counted-set first-add #accepted #others (field member)…)…
    /// Returns { applied (0 when the marker existed: a replay), largest dedup set touched }.
    ///
    /// The progress section counts each job of a campaign once in the campaign's `jobs_*` fields
    /// (`docs/design.md §4.4`), whatever the redeliveries. An accepted job (its dedup record's entry in
    /// the #sadd section) counts when that SADD added its fingerprint (the id was never accepted before)
    /// and its fingerprint is not in the campaign's counted set; any other outcome counts when the SADD
    /// of its fingerprint to the counted set adds it. So the dedup record is the mark of accepted jobs
    /// (no extra call, no extra byte), the counted set that of the others; one SMISMEMBER per campaign
    /// and batch (when the set exists) checks the accepted ones against it. Swift sends only a job's
    /// first outcome in the batch here (a later one in the same batch cannot be its first settlement).
    static let apply = RedisScript(#"""
        local i = 1
        local function take() local v = ARGV[i]; i = i + 1; return v end
        local marker, markerTTL = take(), take()
        if marker ~= '' and not redis.call('SET', marker, '1', 'NX', 'EX', markerTTL) then
          return { 0, 0 }
        end
        local largest, added = 0, {}
        local addsBase = i  -- the member of add a is ARGV[addsBase + 2a]
        for a = 1, tonumber(take()) do
          local key = take(); local member = take()
          added[a] = redis.call('SADD', key, member)
          local n = redis.call('SCARD', key)
          if n > largest then largest = n end
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local at = take()
          redis.call('EXPIREAT', key, at)
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local token = take(); local t = tonumber(take()); local value = take()
          local current = redis.call('HGET', key, token)
          local ct = current and tonumber(string.match(current, '^(%d+)'))
          if not ct or t > ct then redis.call('HSET', key, token, value) end
        end
        for _ = 1, tonumber(take()) do
          local reg = take(); local langKey = take(); local token = take(); local ts = take(); local lang = take()
          local t = tonumber(ts)
          local current = redis.call('HGET', reg, token)
          local ct = current and tonumber(current)
          if not ct or t >= ct then
            redis.call('HSET', reg, token, ts)
            if lang ~= '' then redis.call('HSET', langKey, token, lang) end
          end
        end
        for _ = 1, tonumber(take()) do redis.call('DEL', take()) end
        for _ = 1, tonumber(take()) do
          local key = take(); local field = take(); local delta = take()
          redis.call('HINCRBY', key, field, delta)
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local seconds = take()
          redis.call('EXPIRE', key, seconds)
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local field = take(); local value = take()
          redis.call('HSET', key, field, value)
        end
        -- Per-job progress (see above). Per campaign: its accepted jobs' dedup records are the #sadd
        -- entries first-add … first-add + #accepted - 1 (Swift puts them together), so an accepted job
        -- costs no argument here; other outcomes come as (field member).
        local countedTTL = take()
        for _ = 1, tonumber(take()) do
          local hash, counted = take(), take()
          local first, na, no = tonumber(take()), tonumber(take()), tonumber(take())
          local last = first + na - 1
          local counts, total = {}, 0
          local accepted = 0
          if na > 0 and redis.call('EXISTS', counted) == 1 then
            -- Accepted jobs counted before with another outcome (e.g. a dead letter published again):
            -- SMISMEMBER in chunks (Lua's stack), not a call per job.
            local marked = {}
            for from = first, last, 1000 do
              local chunk = {}
              for a = from, math.min(last, from + 999) do chunk[#chunk + 1] = ARGV[addsBase + 2 * a] end
              local found = redis.call('SMISMEMBER', counted, unpack(chunk))
              for k = 1, #chunk do if found[k] == 1 then marked[chunk[k]] = true end end
            end
            for a = first, last do
              if added[a] == 1 and not marked[ARGV[addsBase + 2 * a]] then accepted = accepted + 1 end
            end
          else
            for a = first, last do accepted = accepted + added[a] end
          end
          if accepted > 0 then counts['jobs_accepted'] = accepted; total = accepted end
          for _ = 1, no do
            local field, member = take(), take()
            if redis.call('SADD', counted, member) == 1 then
              counts[field] = (counts[field] or 0) + 1
              total = total + 1
            end
          end
          if no > 0 then redis.call('EXPIRE', counted, countedTTL) end
          for field, n in pairs(counts) do redis.call('HINCRBY', hash, field, n) end
          if total > 0 then redis.call('HINCRBY', hash, 'jobs_settled', total) end
        end
        return { 1, largest }
        """#)
}

public struct LegacyKeys: Sendable, Hashable {
    /// A device token as it is stored in Redis (hash fields, script arguments): lower-case hex. The one
    /// place token hex is normalised on its way into Redis, whatever case a producer or Apple used.
    public static func tokenField(_ hex: String) -> String { hex.lowercased() }

    public let prefix: String

    /// The prefix when none is configured (`redis.prefix`): its one home; commands and the pipeline
    /// file read it from here.
    public static let defaultPrefix = "apns"

    public init(prefix: String = "apns") {
        self.prefix = prefix
    }

    public var stats: String { "\(prefix):stats" }
    public func stats(minute: String) -> String { "\(prefix):stats:\(minute)" }
    public func stats(minuteOf epochSeconds: Int64) -> String { stats(minute: Self.minuteStamp(epochSeconds)) }
    public func campaign(_ id: String) -> String { "\(prefix):campaign:\(id)" }
    /// Marks of a campaign's published job ids, one of `sets` sets (``CampaignField/jobMarkSets``).
    public func publishedJobs(campaign: String, set: Int) -> String { "\(prefix):jobs:published:\(campaign):\(set)" }
    /// Marks of a campaign's jobs counted in `jobs_*` with an outcome other than accepted (accepted ones
    /// are marked by their dedup record).
    public func countedJobs(campaign: String) -> String { "\(prefix):jobs:counted:\(campaign)" }
    public func shard(app: String, shard: Int) -> String { "\(prefix):shard:\(app):\(shard)" }
    public func suppressed(app: String) -> String { "\(prefix):suppressed:\(app)" }
    public func registered(app: String) -> String { "\(prefix):registered:\(app)" }
    public func language(app: String) -> String { "\(prefix):lang:\(app)" }
    public func inFlight(jobID: String) -> String { "\(prefix):inflight:\(jobID)" }
    public func batch(_ id: String) -> String { "\(prefix):batch:\(id)" }
    /// `<p>:owner:`; the owner id follows (the gate script appends it).
    public var ownerPrefix: String { "\(prefix):owner:" }
    public func owner(_ id: String) -> String { ownerPrefix + id }
    /// `<p>:dedup:<bucket>:`; the sub-bucket number follows (the gate script appends it).
    public func dedupPrefix(bucket: Int64) -> String { "\(prefix):dedup:\(bucket):" }
    public func dedup(bucket: Int64, subBucket: Int) -> String { dedupPrefix(bucket: bucket) + String(subBucket) }

    /// `yyyyMMddHHmm` of the UTC minute holding `epochSeconds` (no Foundation calendar: this runs per batch).
    public static func minuteStamp(_ epochSeconds: Int64) -> String {
        let days = epochSeconds >= 0 ? epochSeconds / 86_400 : (epochSeconds - 86_399) / 86_400
        let secondOfDay = epochSeconds - days * 86_400
        // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return pad(year, 4) + pad(month, 2) + pad(day, 2) + pad(secondOfDay / 3600, 2) + pad(secondOfDay % 3600 / 60, 2)
    }
}


extension RedisCPUBenchmark {
    static func legacy(_ client: RedisClient) -> Variant {
        let store = LegacyStore(client: client)
        return Variant(
            name: "before (f757e0e)", gate: { try await store.gate($0) }, settle: { try await store.settle($0) },
            suppress: { try await store.suppress($0) }, stats: store.keys.stats)
    }
}
