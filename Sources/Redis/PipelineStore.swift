import Foundation
import Logging
import Synchronization
import TimeUnits

/// Tuning of the pipeline's Redis state. TTLs are whole seconds on the server.
///
/// The defaults of `init` are the one home of these settings: the pipeline file's `redis.*` keys
/// default to them (`PipelineConfiguration.Redis`), so `run`, the commands and the tests agree.
public struct PipelineStoreConfiguration: Sendable, Hashable {
    /// Prefix of every key (`docs/design.md §4.1`: `apns`).
    public var keyPrefix: String
    /// How long an accepted job id is remembered (at least this long, at most one bucket width longer).
    public var dedupRetention: Duration
    /// Dedup records are grouped in time buckets of this width; a whole bucket expires at once. The gate
    /// probes every bucket that can hold a live record (retention / width + 1 lookups per job, and the
    /// next bucket near its start), so wider buckets mean fewer lookups but records kept longer. The
    /// default, as wide as the default retention, probes 2 (12 h probed 3: ~0.9 µs more Redis CPU per
    /// job in `ops/bench e2e`, issue 14) and keeps a record 24–48 h (12 h: 24–36). Part of the
    /// ``DedupLayout``: fixed for the data's life (checked at start).
    public var dedupBucketWidth: Duration
    /// Sets per time bucket and app, split over its token buckets (``dedupSubBucketsPerTag`` per tag). Size it so a set stays below the server's `set-max-intset-entries`
    /// (default 512), where it is a compact intset: sub-buckets ≈ peak accepted jobs per bucket / 400
    /// (the default, 4096 per 24 h bucket, suits up to ~1.6 million accepted jobs a day).
    /// Beyond that a set still works but converts to a hash table (~7× the memory); the settler logs a
    /// warning when it sees a set above ``dedupSetCapacity``.
    public var dedupSubBuckets: Int
    /// The server's `set-max-intset-entries`, for that warning.
    public var dedupSetCapacity: Int
    /// How long a job admitted by the gate blocks other copies of its id if it is never settled (a
    /// crashed process). Longer than gate-to-settle takes: settle_after, retries and replays.
    public var inFlightLease: Duration
    /// How long a settle batch id is remembered to make retries of the batch no-ops (its counters'
    /// marker `{<p>}:batch:<id>`).
    public var batchMarkerRetention: Duration
    /// How long the marker of a settle batch's part in one token tag (`{<p>:<app>:<n>}:batch:<id>`, which
    /// holds the part's result) lives: a retry of the batch within it replays the part instead of applying
    /// it again. One marker per tag and batch, so shorter than ``batchMarkerRetention``; longer than a
    /// client retries a call (``RedisReconnectPolicy/maximumWait``, 300 s by default).
    public var partMarkerRetention: Duration
    /// Token buckets per app (`redis.token_buckets`): the hash tags, so Redis Cluster slots, one app's
    /// per-token keys spread over (``RedisKeys/tokenBucket(_:)``). Fixed for the life of the data: changing
    /// it moves every token to another bucket (dedup records, suppressions and registrations unfindable).
    public var tokenBuckets: Int
    /// How far another process's clock may run ahead of this one's: within this much of the next dedup
    /// time bucket's start, the gate probes that bucket too (a record settled by a process whose clock
    /// already passed the boundary lands there).
    public var clockSkewAllowance: Duration
    /// Send each script call with the keys of one Redis Cluster slot only (``RedisSlot``). Off for a
    /// single Redis, which then gets all groups of a batch in one call (one round trip); the groups and
    /// their keys are the same either way.
    public var oneSlotPerCall: Bool
    /// The apps whose per-tag key names this process keeps (``DedupSetNames``): the pipeline file's, so
    /// the cache is bounded by configuration whatever app names reach the store (issue 28). nil: any
    /// app, up to ``DedupSetNames/maxTablesForAnyApp`` tables; names of other apps are made per call.
    public var apps: Set<String>? = nil
    /// How long a campaign's keys (`{<p>}:campaign:<id>`, its `jobs:published` and `jobs:counted` sets)
    /// live after the campaign's last activity (a publish, a settled job): `redis.campaign_ttl_hours`.
    /// nil: ``dedupRetention`` + one ``dedupBucketWidth``, the longest a dedup record lives (a job's
    /// mark must outlive its dedup record); a shorter value is taken as that.
    public var campaignRetention: Duration? = nil
    /// Lifetime of the per-minute counter hashes.
    public var minuteBucketRetention: Duration
    /// The process that holds the leases this store's gate takes: its heartbeat key must live (see
    /// ``beat()``) or other processes take its leases over. One per process; random by default.
    public var leaseOwner: String
    /// How long a heartbeat lives without being refreshed: a crashed process's leases are void this long
    /// after its last beat. Refresh well within it (the runner beats every quarter of it).
    public var ownerHeartbeat: Duration

    public init(
        keyPrefix: String = RedisKeys.defaultPrefix,
        dedupRetention: Duration = .seconds(86_400),
        dedupBucketWidth: Duration = .seconds(86_400),
        dedupSubBuckets: Int = 4096,
        dedupSetCapacity: Int = 512,
        inFlightLease: Duration = .seconds(600),
        batchMarkerRetention: Duration = .seconds(3600),
        minuteBucketRetention: Duration = .seconds(86_400),
        leaseOwner: String = UUID().uuidString.lowercased(),
        ownerHeartbeat: Duration = .seconds(10),
        partMarkerRetention: Duration = .seconds(600),
        tokenBuckets: Int = RedisKeys.defaultTokenBuckets,
        clockSkewAllowance: Duration = .seconds(600),
        oneSlotPerCall: Bool = false
    ) {
        self.keyPrefix = keyPrefix
        self.dedupRetention = dedupRetention
        self.dedupBucketWidth = dedupBucketWidth
        self.dedupSubBuckets = dedupSubBuckets
        self.dedupSetCapacity = dedupSetCapacity
        self.inFlightLease = inFlightLease
        self.batchMarkerRetention = batchMarkerRetention
        self.minuteBucketRetention = minuteBucketRetention
        self.leaseOwner = leaseOwner
        self.ownerHeartbeat = ownerHeartbeat
        self.partMarkerRetention = partMarkerRetention
        self.tokenBuckets = max(1, tokenBuckets)
        self.clockSkewAllowance = clockSkewAllowance
        self.oneSlotPerCall = oneSlotPerCall
    }

    /// Dedup sets per token tag and time bucket: ``dedupSubBuckets`` is per app, split over its token buckets.
    public var dedupSubBucketsPerTag: Int { max(1, dedupSubBuckets / max(1, tokenBuckets)) }
}

/// The pipeline's shared state in Redis: the gate before sending, the settler after, registrations,
/// suppressions and the counters dashboards read. Every write operation is one round trip (one
/// `EVALSHA`) per batch on a single Redis; with ``PipelineStoreConfiguration/oneSlotPerCall`` (Redis
/// Cluster) one call per slot the batch touches, each touching keys of that slot only. Every call is safe
/// to repeat when a reply is lost with the connection.
///
/// Dedup records: a 64-bit fingerprint of the job id (``JobFingerprint``) as a member of the set
/// `{<p>:<app>:<n>}:dedup:<time bucket>:<sub-bucket>`, which Redis stores as an intset (8 raw bytes per member); the
/// whole set expires with its time bucket. Measured on Redis 7.0.15 (`used_memory` delta over 100 000
/// accepted jobs settled through ``settle(_:)``, test `dedupRecordsAreCompact`): 9.5 B/job with ~390
/// members per set (256 sub-buckets), 10.6 B/job with ~98 (1024 sub-buckets). For comparison, same
/// server: 8-byte fields in listpack hashes 14 B/job, one `SET <p>:dedup:<hex> 1 EX ttl` per job 117 B/job.
public struct PipelineStore: Sendable {
    public let client: any RedisConnection
    public let configuration: PipelineStoreConfiguration
    public let keys: RedisKeys
    let logger: Logger
    private let overflowWarning = OnceFlag()
    private let dedupExpiries = DedupExpiries()
    private let markExpiries = MarkExpiries()
    private let dedupSetNames: DedupSetNames

    public init(
        client: any RedisConnection, configuration: PipelineStoreConfiguration = PipelineStoreConfiguration(),
        logger: Logger = Logger(label: "apns.redis.store")
    ) {
        self.client = client
        var configuration = configuration
        // A cluster refuses a call spanning slots: whoever made the store, it sends one slot per call there.
        if client is RedisCluster { configuration.oneSlotPerCall = true }
        self.configuration = configuration
        self.keys = RedisKeys(prefix: configuration.keyPrefix, tokenBuckets: configuration.tokenBuckets)
        self.logger = logger
        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        // The buckets a gate probes or a settle writes (retention ÷ width + 2), and one to spare.
        self.dedupSetNames = DedupSetNames(
            keys: keys, subBuckets: configuration.dedupSubBucketsPerTag,
            liveBuckets: Int(configuration.dedupRetention.components.seconds / width) + 3, apps: configuration.apps)
    }

    public static func epochNow() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// How long a campaign's keys live after its last activity, in seconds (``PipelineStoreConfiguration/campaignRetention``):
    /// its hash, and its job marks (`…:jobs:published:*`, `…:jobs:counted:*`) after their last write. At
    /// least as long as the longest-lived dedup record, the mark of its accepted jobs. A campaign
    /// published again after that is a new run: its jobs are sent again (dedup expired) and count again,
    /// in `jobs` as in `jobs_settled`. Each is given its expiry once per process and minute (a minute
    /// longer), not per batch.
    public var jobMarkRetention: Int64 {
        let dedup = configuration.dedupRetention.components.seconds + max(1, configuration.dedupBucketWidth.components.seconds)
        return max(dedup, configuration.campaignRetention?.components.seconds ?? 0)
    }

    public static func newBatchID() -> String { UUID().uuidString.lowercased() }

    // MARK: Gate

    /// Decides, for each job of a batch, whether to send it: already settled as accepted → ``GateDecision/deduped``;
    /// another copy in flight → ``GateDecision/inFlight``; token suppressed and not registered since →
    /// ``GateDecision/suppressed``; else ``GateDecision/admitted(language:)`` with an in-flight lease
    /// taken. One round trip on a single Redis (one call per slot on a cluster), plus one when a lease of
    /// another process is met (its heartbeat is read, and a dead owner's lease taken over). Decisions come
    /// back in the order of `requests`.
    public func gate(
        _ requests: [GateRequest], call: String = PipelineStore.newBatchID(), now: Int64 = PipelineStore.epochNow()
    ) async throws -> [GateDecision] {
        if requests.isEmpty { return [] }
        // `call`: the gate call, the same across retries of this call; its leases name it.
        var (decisions, held) = try await gateOnce(requests, indices: Array(requests.indices), voids: [:], call: call, now: now)
        if held.isEmpty { return decisions }

        // Leases of other processes: void if the owner's heartbeat is gone (it died between gate and
        // settle). Heartbeats are keys of no job's slot, so they are read here with plain commands, and
        // the take-over is a second gate call that overwrites a lease only if it still holds the value
        // read (a conditional write in the lease's own slot). The alternative, a copy of every heartbeat
        // in every token tag, would write apps × token buckets keys per beat for a path taken only after
        // a crash.
        var alive: [String: Bool] = [:]
        for value in Set(held.values) {
            let owner = Self.leaseOwner(of: value)
            if alive[owner] == nil { alive[owner] = try await command(RedisCommand("EXISTS", keys.owner(owner))).integer == 1 }
        }
        let void = held.filter { alive[Self.leaseOwner(of: $0.value)] == false }
        if void.isEmpty { return decisions }
        let indices = void.keys.sorted()
        let (retried, _) = try await gateOnce(requests, indices: indices, voids: void, call: call, now: now)
        // Which of the dead process's batches it had handed to its transports (issue 28): only those
        // jobs may have reached a device. Read like the heartbeats, once per gate call of the dead owner.
        var written: [String: Bool] = [:]
        for value in Set(void.values) {
            let holder = Self.leaseHolder(of: value)
            if written[holder] == nil { written[holder] = try await command(RedisCommand("EXISTS", keys.written(holder))).integer == 1 }
        }
        var inheritsWritten = false
        for index in indices {
            if case .takenOver(let language, _) = retried[index], let value = void[index] {
                let wasWritten = written[Self.leaseHolder(of: value)] ?? true
                decisions[index] = .takenOver(language: language, written: wasWritten)
                inheritsWritten = inheritsWritten || wasWritten
            } else {
                decisions[index] = retried[index]
            }
        }
        // A job the dead owner may have written may reach a device once more through this call. If this
        // process dies too before its own mark, its successor must still count the job `ambiguous`: the
        // mark is inherited now, for the whole call (over-counting its fresh jobs in that double crash).
        // Without it a second kill -9 during a take-over hid ~1 000 real duplicates (CI, 2026-11-27).
        if inheritsWritten { try await markWritten(call: call) }
        return decisions
    }

    /// `<owner>/<call>` of a lease value `<owner>/<call>/<expiry ms>`.
    static func leaseHolder(of value: String) -> String {
        guard let slash = value.lastIndex(of: "/") else { return value }
        return String(value[..<slash])
    }

    /// Marks gate call `call`'s batch as handed to the transports, before any of it is written: if this
    /// process dies, a take-over of its leases counts `ambiguous` only for marked batches (issue 28,
    /// design §2.2). Lives as long as a lease. One write per batch.
    public func markWritten(call: String) async throws {
        _ = try await command(
            RedisCommand(
                "SET", keys.written(configuration.leaseOwner + "/" + call), "1", "PX",
                String(max(1, configuration.inFlightLease.milliseconds))))
    }

    static func leaseOwner(of value: String) -> String {
        String(value.prefix { $0 != "/" })
    }

    /// One gate pass over `requests[indices]`; `voids`: leases (by request index) to take over if they
    /// still hold that value. Returns the decisions (only `indices` filled) and, for jobs in flight in
    /// another process, the lease's value.
    ///
    /// Per job the call carries its token, its fingerprint and its dedup keys (in probe order, repeated
    /// when two jobs share a set: no index argument per job); the lease is a field of the group's hash.
    private func gateOnce(
        _ requests: [GateRequest], indices: [Int], voids: [Int: String], call: String, now: Int64
    ) async throws -> (decisions: [GateDecision], held: [Int: String]) {
        struct Group {
            var tag: String
            var jobs: [Int] = []
            var keys: RedisArguments
            /// The tag's dedup set names of each probed time bucket, in probe order.
            var dedupSets: [DedupSetNames.Table]
            var voids = RedisArguments()
            var voidCount = 0
            var jobArguments = RedisArguments()
        }
        let probes = dedupBucketsToProbe(now: now)
        let subs = configuration.dedupSubBucketsPerTag
        var groups: [Group] = []
        // Groups by token tag, in first-seen order. A batch touches a few dozen tags: a scan comparing the
        // bucket first is cheaper than hashing the app's name per job (as in the settle). The request's
        // fields are read in place, not copied out (three retains and releases per job).
        var groupIDs: [TagID] = []
        for index in indices {
            let bucket = keys.tokenBucket(requests[index].tokenHex)
            let g: Int
            if let known = groupIDs.firstIndex(where: { $0.bucket == bucket && $0.app == requests[index].app }) {
                g = known
            } else {
                let app = requests[index].app
                let tag = keys.tokenTag(app: app, bucket: bucket)
                groups.append(
                    Group(
                        tag: tag,
                        keys: RedisArguments([
                            keys.suppressed(tag: tag), keys.registered(tag: tag), keys.language(tag: tag), keys.inFlight(tag: tag),
                        ]),
                        dedupSets: probes.map { dedupSetNames.table(tag: tag, bucket: $0) }))
                groupIDs.append(TagID(app: app, bucket: bucket))
                g = groups.count - 1
            }
            let fingerprint = JobFingerprint(jobID: requests[index].jobID)
            let sub = fingerprint.subBucket(of: subs)
            let tables = groups[g].dedupSets
            for table in tables { table.appendName(sub, to: &groups[g].keys) }
            groups[g].jobs.append(index)
            if !voids.isEmpty, let void = voids[index] {
                groups[g].voids.append(groups[g].jobs.count)
                groups[g].voids.append(void)
                groups[g].voidCount += 1
            }
            // A broadcast's token argument is empty: the script reads no suppression, registration or
            // language for it (a channel id is no token, and must never match one).
            if requests[index].isChannel {
                groups[g].jobArguments.append("")
            } else {
                groups[g].jobArguments.append(lowercasingASCII: requests[index].tokenHex)
            }
            groups[g].jobArguments.append(fingerprint.member)
        }
        let scriptGroups = groups.map { group -> ScriptGroup in
            var arguments = RedisArguments()
            arguments.append(group.jobs.count)
            arguments.append(group.voidCount)
            arguments.append(contentsOf: group.voids)
            arguments.append(contentsOf: group.jobArguments)
            return ScriptGroup(tag: group.tag, keys: group.keys, arguments: arguments)
        }
        var header = RedisArguments()
        header.append(configuration.leaseOwner)
        header.append(call)
        header.append(max(1, configuration.inFlightLease.milliseconds))
        header.append(probes.count)
        let replies = try await run(Scripts.gate, header: header, groups: scriptGroups)

        var decisions = Array(repeating: GateDecision.inFlight, count: requests.count)
        var held: [Int: String] = [:]
        for (group, reply) in zip(groups, replies) {
            // { codes (a digit per job), (job-index value)… }
            guard let parts = reply.array, parts.count % 2 == 1, case .bulk(let codes) = parts[0], codes.count == group.jobs.count else {
                throw RedisError.unexpectedReply("gate: expected \(group.jobs.count) decisions, got \(reply)")
            }
            var values: [Int: String] = [:]
            for at in stride(from: 1, to: parts.count, by: 2) {
                guard let position = parts[at].integer, let value = parts[at + 1].string else {
                    throw RedisError.unexpectedReply("gate: bad value \(parts[at]) \(parts[at + 1])")
                }
                values[Int(position) - 1] = value
            }
            for (position, index) in group.jobs.enumerated() {
                guard let answer = GateAnswer(digit: codes[position]) else {
                    throw RedisError.unexpectedReply("gate: bad decision \(codes[position])")
                }
                let (decision, value) = answer.decision(value: values[position])
                decisions[index] = decision
                if let value { held[index] = value }
            }
        }
        return (decisions, held)
    }

    /// The lease on a job id as stored (`nil`: none; a lease past ``InFlightLease/expiresAtMs`` is free for
    /// the gate): for operators and tests.
    public func lease(jobID: String, app: String, tokenHex: String) async throws -> InFlightLease? {
        let reply = try await command(
            RedisCommand("HGET", keys.inFlight(app: app, tokenHex: tokenHex), String(JobFingerprint(jobID: jobID).member)))
        return reply.string.map(InFlightLease.init(value:))
    }

    // MARK: Lease owner

    /// Writes (or refreshes) this process's heartbeat, `<p>:owner:<leaseOwner>`, living
    /// ``PipelineStoreConfiguration/ownerHeartbeat``. While it lives, this process's leases hold.
    public func beat(description: String = "") async throws {
        _ = try await command(
            RedisCommand(
                "SET", keys.owner(configuration.leaseOwner), description.isEmpty ? "alive" : description, "PX",
                String(max(1, configuration.ownerHeartbeat.milliseconds))))
    }

    /// Removes the heartbeat (graceful stop): whatever this process still leases is void at once.
    public func endHeartbeat() async throws {
        _ = try await command(RedisCommand("DEL", keys.owner(configuration.leaseOwner)))
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

    /// The buckets the gate probes, in the order it probes them: the current one first (where most
    /// duplicates are), then older ones, and the next one only within ``PipelineStoreConfiguration/clockSkewAllowance``
    /// of its start (a process whose clock runs that much ahead may already write there). Each probe is
    /// a call per job, so a probe that cannot hit is skipped.
    func dedupBucketsToProbe(now: Int64) -> [Int64] {
        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        let all = dedupBucketsToCheck(now: now)
        let next = all.last!
        var probes = Array(all.dropLast().reversed())
        if now + configuration.clockSkewAllowance.components.seconds >= next * width { probes.append(next) }
        return probes
    }

    // MARK: Settler

    /// The counter field of a broadcast's outcome (design §4.1): `broadcast:accepted`, `broadcast:deduped`, ….
    public static func broadcastField(_ kind: OutcomeKind) -> String {
        switch kind {
        case .accepted: "broadcast:accepted"
        case .rejected: "broadcast:rejected"
        case .suppressed: "broadcast:suppressed"
        case .deduped: "broadcast:deduped"
        case .deadLettered: "broadcast:dead_lettered"
        case .cancelled: "broadcast:cancelled"
        case .deferred: "broadcast:deferred"
        }
    }

    /// Records a batch of outcomes: dedup records for accepted jobs, suppression of the tokens an outcome
    /// asks to suppress, releases the in-flight leases, and increments totals, the minute bucket,
    /// campaigns, `rejected:<code>` and shard counters. One round trip on a single Redis; on a cluster one
    /// call per token slot (in parallel), then one for the counters.
    ///
    /// Exactly once: each part runs under a marker in its own slot. The counters' marker
    /// `{<p>}:batch:<id>`: applying counters whose marker exists changes nothing and returns `false`. A
    /// token tag's part marker `{…}:batch:<id>` holds the part's result (which accepted jobs were new), so
    /// a retry — after a lost reply, or a crash between the parts — replays the result instead of writing
    /// again, and the counters count each job once.
    @discardableResult
    public func settle(_ batch: SettleBatch) async throws -> Bool {
        try await settle(batch, partsOnly: false)
    }

    /// `partsOnly`: run the token tags' parts and stop, as a process that crashed between them and the
    /// counters would (for tests of the replay).
    func settle(_ batch: SettleBatch, partsOnly: Bool) async throws -> Bool {
        var counters = CounterWrites(marker: keys.batch(batch.id))
        let minuteKey = keys.stats(minuteOf: batch.settledAt)
        func count(_ field: String, _ delta: Int64, campaign: String? = nil) {
            guard delta != 0 else { return }
            counters.increment(keys.stats, field, delta)
            counters.increment(minuteKey, field, delta)
            if let campaign { counters.increment(keys.campaign(campaign), field, delta) }
        }

        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        let dedupBucket = Self.floorDivide(batch.settledAt, width)
        let dedupExpiry = (dedupBucket + 1) * width + configuration.dedupRetention.components.seconds
        let subs = configuration.dedupSubBucketsPerTag
        // Parts by token tag, in first-seen order. A batch touches a few dozen tags: a scan comparing the
        // bucket first is cheaper than hashing the app's name per job.
        var parts: [TagWrites] = []
        var partIDs: [TagID] = []
        func part(app: String, tokenHash: UInt32) -> Int {
            let bucket = keys.tokenBucket(hash: tokenHash)
            if let known = partIDs.firstIndex(where: { $0.bucket == bucket && $0.app == app }) { return known }
            let tag = keys.tokenTag(app: app, bucket: bucket)
            parts.append(
                TagWrites(
                    keys: keys, tag: tag, marker: batch.id, expireAt: dedupExpiry,
                    dedupSets: dedupSetNames.table(tag: tag, bucket: dedupBucket)))
            partIDs.append(TagID(app: app, bucket: bucket))
            return parts.count - 1
        }
        // The per-job counters are summed here and written once per field and campaign after the loop
        // (CounterWrites hashes each key and field it is given: three keys per outcome made that a few
        // percent of `run`, issue 14).
        var tally = OutcomeTally()
        struct CampaignJob: Hashable {
            var campaign: Int
            var member: Int64
        }
        var seenInBatch = Set<CampaignJob>(minimumCapacity: batch.outcomes.count)
        // Each outcome is read in place (borrowed from the batch's storage): `for outcome in` copied it
        // out, a retain and a release of each of its references per job (~1 % of `run`, issue 14).
        func include(_ outcome: borrowing Outcome) {
            let campaignIndex = tally.campaign(outcome.campaign)
            tally.count(outcome.kind.rawValue, campaign: campaignIndex)
            if let code = outcome.code { tally.count("rejected:\(code)", campaign: campaignIndex) }
            if outcome.isBroadcast { tally.count(Self.broadcastField(outcome.kind), campaign: campaignIndex) }
            if let shard = outcome.shard, outcome.kind == .accepted || outcome.kind == .rejected || outcome.kind == .deadLettered {
                tally.sent(app: outcome.app, shard: shard)
            }
            let fingerprint = outcome.fingerprint
            // Per-job progress: counted by the counters script if this is the job's first settlement.
            // Only a job's first outcome in this batch can be (a later one is a redelivered copy).
            var progress: (campaign: String, field: CampaignField)?
            if let campaign = outcome.campaign, let field = CampaignField.jobs(outcome.kind),
                seenInBatch.insert(CampaignJob(campaign: campaignIndex, member: fingerprint.member)).inserted
            {
                progress = (campaign, field)
            }
            // A deduped or suppressed job without a suppression to write writes nothing in its tag (it holds
            // no lease), nor does a job cancelled before its gate call.
            let holdsNoLease = outcome.kind == .deduped || outcome.kind == .suppressed || outcome.tookNoLease
            guard !holdsNoLease || outcome.suppressToken != nil else {
                if let progress {
                    counters.other(campaign: progress.campaign, keys: keys, field: progress.field.rawValue, member: fingerprint.member)
                }
                return
            }
            let p = part(app: outcome.app, tokenHash: outcome.tokenHash)
            if outcome.kind == .accepted {
                // The add releases the job's lease too.
                let add = parts[p].add(subBucket: fingerprint.subBucket(of: subs), member: fingerprint.member) {
                    !dedupExpiries.isGiven($0, now: batch.settledAt)
                }
                if let progress {
                    counters.accepted(campaign: progress.campaign, keys: keys, member: fingerprint.member, part: p, add: add)
                }
            } else {
                if let progress {
                    counters.other(campaign: progress.campaign, keys: keys, field: progress.field.rawValue, member: fingerprint.member)
                }
                // A deduped or suppressed job never took a lease (the gate takes none for them); its id's
                // lease, if any, belongs to another copy.
                if !holdsNoLease { parts[p].release(member: fingerprint.member) }
            }
            // The hex is there (Outcome's init requires it with a suppression).
            if let suppression = outcome.suppressToken, let tokenHex = outcome.tokenHex {
                let at = suppression.since ?? batch.settledAt
                parts[p].suppress(tokenHex: tokenHex, at: at, reason: suppression.reason)
            }
        }
        batch.outcomes.withUnsafeBufferPointer { outcomes in
            for index in outcomes.indices { include(outcomes[index]) }
        }
        for (field, n) in tally.fields.entries { count(field.name, n, campaign: tally.campaigns[field.campaign]) }
        for (sent, n) in tally.shards.entries { counters.increment(keys.shard(app: sent.app, shard: sent.shard), "sent", n) }
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
        count(CounterField.gaveUp.rawValue, Int64(events.gaveUp))
        for (reason, n) in events.retriedBy { count("retried:" + reason, Int64(n)) }
        for (campaign, e) in batch.campaignEvents {
            for (field, n) in [(CounterField.resentAfterCrash, e.resentAfterCrash), (.ambiguous, e.ambiguous)] where n != 0 {
                counters.increment(keys.campaign(campaign), field.rawValue, Int64(n))
            }
        }
        for shardEvent in batch.shardEvents where shardEvent.replayed != 0 {
            counters.increment(keys.shard(app: shardEvent.app, shard: shardEvent.shard), "replayed", Int64(shardEvent.replayed))
        }
        if counters.touches(minuteKey) {
            counters.expire(minuteKey, seconds: configuration.minuteBucketRetention.components.seconds)
        }
        counters.countedTTL = jobMarkRetention
        // Campaign hashes live jobMarkRetention after their last activity: given their expiry once per
        // process and minute (a minute longer), like the mark sets, not per batch (issue 28: they never
        // expired).
        var refreshed: [String] = []
        for campaign in Set(tally.campaigns.compactMap { $0 }).union(batch.campaignEvents.keys)
        where !markExpiries.isGiven(campaign: campaign, set: MarkExpiries.hashSet, now: batch.settledAt) {
            counters.expire(keys.campaign(campaign), seconds: jobMarkRetention + MarkExpiries.memory)
            refreshed.append(campaign)
        }
        func noteRefreshed(_ applied: Bool) {
            if applied { for campaign in refreshed { markExpiries.markGiven(campaign: campaign, sets: [MarkExpiries.hashSet]) } }
        }

        let groups = parts.map { $0.group(markerTTL: configuration.partMarkerRetention.components.seconds) }
        if !configuration.oneSlotPerCall && !partsOnly {
            // A single Redis: both parts in one script, one round trip; the same key lists as below.
            var header = RedisArguments()
            header.append(configuration.partMarkerRetention.components.seconds)
            header.append(groups.count)
            var keyList = RedisArguments()
            for group in groups {
                keyList.append(contentsOf: group.keys)
                header.append(contentsOf: group.arguments)
            }
            let countersCall = counters.call(markerTTL: configuration.batchMarkerRetention.components.seconds, resolved: nil)
            for key in countersCall.keys { keyList.append(key) }
            header.append(contentsOf: countersCall.arguments)
            let reply = try await eval(Scripts.settle, keys: keyList, arguments: header)
            guard let both = reply.array, both.count == 2, let tagReplies = both[0].array ?? (groups.isEmpty ? [] : nil),
                tagReplies.count == groups.count, let applied = both[1].integer
            else { throw RedisError.unexpectedReply("settle: \(reply)") }
            _ = try tagResults(tagReplies)
            markExpiries(parts)
            noteRefreshed(applied == 1)
            return noteApplied(applied == 1, operation: "settle")
        }
        // Redis Cluster: each token slot's part, then the counters with the parts' results.
        var header = RedisArguments()
        header.append(configuration.partMarkerRetention.components.seconds)
        let flags = try tagResults(try await run(Scripts.tagWrites, header: header, groups: groups))
        markExpiries(parts)
        if partsOnly { return false }
        let countersCall = counters.call(markerTTL: configuration.batchMarkerRetention.components.seconds, resolved: flags)
        let reply = try await eval(Scripts.counters, keys: countersCall.keys, arguments: countersCall.arguments)
        guard let applied = reply.integer else { throw RedisError.unexpectedReply("settle counters: \(reply)") }
        noteRefreshed(applied == 1)
        return noteApplied(applied == 1, operation: "settle")
    }

    /// Notes the dedup sets whose expiry the parts just set (a replayed part set none, but its sets got
    /// theirs when it first ran).
    private func markExpiries(_ parts: [TagWrites]) {
        dedupExpiries.markGiven(parts.flatMap(\.expiringSets))
    }

    /// The flags of the tag parts' replies (`{ flags, sampled set size }` each); warns once about dedup
    /// sets past the intset size.
    private func tagResults(_ replies: [RedisReply]) throws -> [[UInt8]] {
        var flags: [[UInt8]] = []
        flags.reserveCapacity(replies.count)
        for reply in replies {
            guard let pair = reply.array, pair.count == 2, let sample = pair[1].integer else {
                throw RedisError.unexpectedReply("settle part: \(reply)")
            }
            if case .bulk(let bytes) = pair[0] { flags.append(bytes) } else { flags.append([]) }
            if sample > configuration.dedupSetCapacity, overflowWarning.setOnce() {
                logger.warning(
                    "dedup sets exceed the intset size: raise dedupSubBuckets",
                    metadata: [
                        "redis.dedup_set_size": "\(sample)", "redis.dedup_sub_buckets": "\(configuration.dedupSubBuckets)",
                    ])
            }
        }
        return flags
    }

    private func noteApplied(_ applied: Bool, operation: String) -> Bool {
        if !applied {
            logger.debug("batch already applied; replay ignored", metadata: ["redis.operation": "\(operation)"])
        }
        return applied
    }

    // MARK: Registrations and suppressions

    /// Applies registration events: `registered` and the language are written only when the event is at
    /// least as new as the stored registration, so a registration lifts an older suppression and a stale
    /// one changes nothing. One round trip on a single Redis (one call per token slot on a cluster).
    public func applyRegistrations(_ registrations: [Registration]) async throws {
        if registrations.isEmpty { return }
        var parts = TagWritesSet(keys: keys)
        for registration in registrations {
            parts.update(app: registration.app, tokenHex: registration.tokenHex) {
                $0.register(tokenHex: registration.tokenHex, at: registration.registeredAt, language: registration.language ?? "")
            }
        }
        try await applyTagWrites(parts.parts)
    }

    /// Suppresses tokens (`{<p>:<app>:<n>}:suppressed` token → `<epoch>:<reason>`), keeping the newest
    /// time of each token. For the feedback poller: one round trip per batch of tuples (one call per
    /// token slot on a cluster).
    public func suppress(_ suppressions: [Suppression]) async throws {
        if suppressions.isEmpty { return }
        var parts = TagWritesSet(keys: keys)
        for suppression in suppressions {
            parts.update(app: suppression.app, tokenHex: suppression.tokenHex) {
                $0.suppress(tokenHex: suppression.tokenHex, at: suppression.at, reason: suppression.reason)
            }
        }
        try await applyTagWrites(parts.parts)
    }

    private func applyTagWrites(_ parts: [TagWrites]) async throws {
        var header = RedisArguments()
        header.append(configuration.partMarkerRetention.components.seconds)
        _ = try tagResults(try await run(Scripts.tagWrites, header: header, groups: parts.map { $0.group(markerTTL: 0) }))
    }

    // MARK: Counters

    /// Starts a publish of `campaign`: notes the time (`publish_started_ms`, so `campaign wait` is not done
    /// while it runs) and fixes, at its first publish, how many sets hold its job marks: about 400 marks
    /// per set (compact intsets) for `expectedJobs`. Returns that number, for ``recordPublished(campaign:jobIDs:messages:markSets:)``.
    public func beginPublish(
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
    public func finishPublish(campaign: String, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) async throws {
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
    /// batch of 1 000 touched ~430 of a 1M-job campaign's 2 500 sets: 0.43 `EXPIRE` per job, issue 14).
    @discardableResult
    public func recordPublished(
        campaign: String, jobIDs: [String], messages: Int? = nil, markSets: Int, now: Int64 = PipelineStore.epochNow()
    ) async throws -> Int {
        var keyList = [keys.batch(Self.newBatchID()), keys.campaign(campaign)]
        var setIndex: [Int: Int] = [:]
        var expiring: [(set: Int, index: Int)] = []
        var jobArguments = RedisArguments()
        for id in jobIDs {
            let fingerprint = JobFingerprint(jobID: id)
            let set = fingerprint.subBucket(of: max(1, markSets))
            let index: Int
            if let known = setIndex[set] {
                index = known
            } else {
                keyList.append(keys.publishedJobs(campaign: campaign, set: set))
                index = keyList.count - 2
                setIndex[set] = index
                if !markExpiries.isGiven(campaign: campaign, set: set, now: now) { expiring.append((set, index)) }
            }
            jobArguments.append(index)
            jobArguments.append(fingerprint.member)
        }
        var arguments = RedisArguments()
        arguments.append(configuration.batchMarkerRetention.components.seconds)
        arguments.append(messages ?? jobIDs.count)
        arguments.append(jobMarkRetention + MarkExpiries.memory)
        arguments.append(expiring.count)
        for set in expiring { arguments.append(set.index) }
        arguments.append(contentsOf: jobArguments)
        let reply = try await eval(Scripts.publish, keys: keyList, arguments: arguments)
        guard let new = reply.integer else { throw RedisError.unexpectedReply("publish: \(reply)") }
        // A replay (-1) wrote nothing, but its first run did, and set the same expiries.
        markExpiries.markGiven(campaign: campaign, sets: expiring.map(\.set))
        return max(0, Int(new))
    }

    /// Adds `count` to the campaign's `published` field, exactly once even if the call is retried. (Only
    /// messages: `jobs`, the base of per-job progress, comes from ``recordPublished(campaign:jobIDs:messages:markSets:)``.)
    public func incrementPublished(campaign: String, by count: Int) async throws {
        var counters = CounterWrites(marker: keys.batch(Self.newBatchID()))
        counters.increment(keys.campaign(campaign), "published", Int64(count))
        counters.expire(keys.campaign(campaign), seconds: jobMarkRetention + MarkExpiries.memory)
        try await applyCounters(counters, operation: "published")
    }

    /// Adds to counters of the totals and of the current minute (not exactly once: for events counted
    /// outside a settle batch, such as failed dead-letter writes).
    public func increment(_ field: CounterField, by delta: Int64, now: Int64 = PipelineStore.epochNow()) async throws {
        guard delta != 0 else { return }
        var counters = CounterWrites(marker: nil)
        let minuteKey = keys.stats(minuteOf: now)
        counters.increment(keys.stats, field.rawValue, delta)
        counters.increment(minuteKey, field.rawValue, delta)
        counters.expire(minuteKey, seconds: configuration.minuteBucketRetention.components.seconds)
        try await applyCounters(counters, operation: "increment")
    }

    /// Writes a shard's connection state (idempotent).
    public func updateShard(_ status: ShardStatus) async throws {
        var counters = CounterWrites(marker: nil)
        let key = keys.shard(app: status.app, shard: status.shard)
        counters.set(key, "state", status.state)
        if let gateway = status.gateway { counters.set(key, "gateway", gateway) }
        if let since = status.connectedSince { counters.set(key, "connected_since", String(since)) }
        if let error = status.lastError { counters.set(key, "last_error", error) }
        try await applyCounters(counters, operation: "shard")
    }

    private func applyCounters(_ counters: CounterWrites, operation: String) async throws {
        let call = counters.call(markerTTL: configuration.batchMarkerRetention.components.seconds, resolved: [])
        let reply = try await eval(Scripts.counters, keys: call.keys, arguments: call.arguments)
        guard let applied = reply.integer else { throw RedisError.unexpectedReply("\(operation): \(reply)") }
        _ = noteApplied(applied == 1, operation: operation)
    }

    /// Totals and the per-minute buckets of the last `lastMinutes` minutes (ending with the current
    /// one), in one round trip.
    public func readStats(lastMinutes: Int = 60, now: Int64 = PipelineStore.epochNow()) async throws -> PipelineStats {
        let currentMinute = Self.floorDivide(now, 60) * 60
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

    public func readCampaign(_ id: String) async throws -> CampaignProgress {
        let counters = try Self.counters(try await command(RedisCommand("HGETALL", keys.campaign(id))))
        return CampaignProgress(id: id, published: counters.fields["published"] ?? 0, counters: counters)
    }

    // MARK: Internals: every Redis call of the store goes through these four

    /// Runs `script` over `groups` (each the keys of one hash tag): one call with all groups on a single
    /// Redis; one call per slot (``RedisSlot``), in parallel, with ``PipelineStoreConfiguration/oneSlotPerCall``.
    /// ARGV of a call: `header`, the number of its groups, then their arguments; KEYS: their keys.
    /// Returns each group's element of the script's reply, in the order of `groups`.
    func run(_ script: RedisScript, header: RedisArguments, groups: [ScriptGroup]) async throws -> [RedisReply] {
        if groups.isEmpty { return [] }
        let calls = Self.calls(groups, oneSlotPerCall: configuration.oneSlotPerCall)
        func one(_ members: [Int]) async throws -> [RedisReply] {
            var arguments = header
            arguments.append(members.count)
            var keyList = RedisArguments()
            for member in members {
                keyList.append(contentsOf: groups[member].keys)
                arguments.append(contentsOf: groups[member].arguments)
            }
            let reply = try await eval(script, keys: keyList, arguments: arguments)
            guard let replies = reply.array, replies.count == members.count else {
                throw RedisError.unexpectedReply("expected \(members.count) group replies, got \(reply)")
            }
            return replies
        }
        var result = Array(repeating: RedisReply.null, count: groups.count)
        if calls.count == 1 {
            for (member, reply) in zip(calls[0], try await one(calls[0])) { result[member] = reply }
            return result
        }
        // A struct, not a tuple, as the child tasks' result: a release build once crashed copying a tuple
        // result out of a task group (in `ops/bench scale`; not reproduced since the struct).
        struct CallReplies: Sendable {
            var members: [Int]
            var replies: [RedisReply]
        }
        try await withThrowingTaskGroup(of: CallReplies.self) { tasks in
            for members in calls { tasks.addTask { CallReplies(members: members, replies: try await one(members)) } }
            for try await call in tasks {
                for (member, reply) in zip(call.members, call.replies) { result[member] = reply }
            }
        }
        return result
    }

    /// Which groups go in one call: all of them, or those of one slot per call (in first-seen order).
    static func calls(_ groups: [ScriptGroup], oneSlotPerCall: Bool) -> [[Int]] {
        guard oneSlotPerCall else { return [Array(groups.indices)] }
        var calls: [[Int]] = []
        var callOf: [RedisSlot: Int] = [:]
        for (index, group) in groups.enumerated() {
            if let known = callOf[group.slot] {
                calls[known].append(index)
            } else {
                callOf[group.slot] = calls.count
                calls.append([index])
            }
        }
        return calls
    }

    private func eval(_ script: RedisScript, keys: RedisArguments, arguments: RedisArguments) async throws -> RedisReply {
        try await client.eval(script, keys: keys, arguments: arguments)
    }

    private func eval(_ script: RedisScript, keys: [String], arguments: RedisArguments) async throws -> RedisReply {
        try await client.eval(script, keys: RedisArguments(keys), arguments: arguments)
    }

    func command(_ command: RedisCommand) async throws -> RedisReply {
        try await client.send(command)
    }

    /// Plain commands in one round trip; callers send only keys of one slot together.
    func commands(_ list: [RedisCommand]) async throws -> [RedisReply] {
        try await client.pipeline(list)
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

/// An in-flight lease (`docs/design.md §2.2`): the value `<owner>/<gate call>/<expiry ms>` of its job's field
/// in the token tag's `inflight` hash.
public struct InFlightLease: Sendable, Hashable {
    public let value: String
    /// The process holding it (its heartbeat is `<p>:owner:<owner>`).
    public var owner: String { PipelineStore.leaseOwner(of: value) }
    /// When it lapses, epoch ms of the Redis server's clock.
    public var expiresAtMs: Int64 { Int64(value.split(separator: "/").last ?? "") ?? 0 }

    public init(value: String) { self.value = value }
}

/// A token tag of an app: (app, token bucket).
struct TagID: Hashable {
    var app: String
    var bucket: Int
}

/// One group of a script call: keys of one hash tag (so of one slot) and the group's arguments.
struct ScriptGroup: Sendable {
    var slot: RedisSlot
    /// Every key is in `slot`: the group's tag is in each.
    var keys: RedisArguments
    var arguments: RedisArguments

    init(tag: String, keys: RedisArguments, arguments: RedisArguments) {
        self.slot = RedisSlot(key: tag)
        self.keys = keys
        self.arguments = arguments
    }
}

/// A settle batch's per-job counters, summed before they become `CounterWrites`: a batch has one or a
/// few campaigns, outcome kinds and shards, so each lookup is a short scan that mostly hits the entry
/// the previous job used.
struct OutcomeTally {
    struct Field: Equatable {
        var name: String
        var campaign: Int
    }
    struct Sent: Equatable {
        var app: String
        var shard: Int
    }
    /// Index 0 is "no campaign".
    private(set) var campaigns: [String?] = [nil]
    private(set) var fields = RunTally<Field>()
    private(set) var shards = RunTally<Sent>()
    private var lastCampaign = 0

    /// The index of `campaign` in `campaigns`.
    mutating func campaign(_ campaign: String?) -> Int {
        guard let campaign else { return 0 }
        if campaigns[lastCampaign] == campaign { return lastCampaign }
        if let i = campaigns.firstIndex(where: { $0 == campaign }) {
            lastCampaign = i
        } else {
            campaigns.append(campaign)
            lastCampaign = campaigns.count - 1
        }
        return lastCampaign
    }

    mutating func count(_ name: String, campaign: Int) { fields.add(Field(name: name, campaign: campaign)) }
    mutating func sent(app: String, shard: Int) { shards.add(Sent(app: app, shard: shard)) }
}

/// Counts per key, in first-seen order. Consecutive keys are mostly equal (one campaign, one kind), so
/// a count is usually one comparison with the previous key.
struct RunTally<Key: Equatable> {
    private(set) var entries: [(key: Key, count: Int64)] = []
    private var last = -1

    mutating func add(_ key: Key) {
        if last >= 0, entries[last].key == key {
            entries[last].count += 1
        } else if let i = entries.firstIndex(where: { $0.key == key }) {
            entries[i].count += 1
            last = i
        } else {
            entries.append((key, 1))
            last = entries.count - 1
        }
    }
}

/// The writes of one token tag for `Scripts.tagWrites`: dedup records, lease releases, suppressions and
/// registrations. Built per job without Strings where it can: integers and token hex go straight into
/// the argument bytes; a dedup key is made once per set and batch.
struct TagWrites {
    let keys: RedisKeys
    let tag: String
    let marker: String?
    let expireAt: Int64
    /// The tag's dedup set names of the settle's time bucket (nil: a part that adds no record).
    let dedupSets: DedupSetNames.Table?
    /// One dedup key per add, in add order.
    private var addKeys = RedisArguments()
    /// Sub-buckets added to in this call, a bit each: a set's expiry is considered once per call.
    private var touchedSubs: [UInt64] = []
    private(set) var adds = 0
    private var addArguments = RedisArguments()
    /// Add positions (1-based) whose set gets its expiry in this call.
    private var expireArguments = RedisArguments()
    /// The sets given their expiry by this call.
    private(set) var expiringSets: [DedupSetID] = []
    private var releases = 0
    private var releaseArguments = RedisArguments()
    private var suppressions = 0
    private var suppressArguments = RedisArguments()
    private var registrations = 0
    private var registerArguments = RedisArguments()

    init(keys: RedisKeys, tag: String, marker: String?, expireAt: Int64 = 0, dedupSets: DedupSetNames.Table? = nil) {
        self.keys = keys
        self.tag = tag
        self.marker = marker
        self.expireAt = expireAt
        self.dedupSets = dedupSets
    }

    /// Adds a dedup record (its job's lease is released with it); returns its position (1-based) among
    /// the adds: its flag in the reply. `expiring`: whether this call sets the set's expiry (``DedupExpiries``
    /// decides, given the key).
    mutating func add(subBucket: Int, member: Int64, expiring: (DedupSetID) -> Bool) -> Int {
        guard let dedupSets else { preconditionFailure("a settle part's TagWrites carries its dedup set names") }
        if touchedSubs.isEmpty { touchedSubs = Array(repeating: 0, count: (dedupSets.count + 63) / 64) }
        let word = subBucket / 64
        let bit = UInt64(1) << UInt64(subBucket % 64)
        if touchedSubs[word] & bit == 0 {
            touchedSubs[word] |= bit
            let id = DedupSetID(table: dedupSets.serial, subBucket: subBucket)
            if expiring(id) {
                expireArguments.append(adds + 1)
                expiringSets.append(id)
            }
        }
        dedupSets.appendName(subBucket, to: &addKeys)
        addArguments.append(member)
        adds += 1
        return adds
    }

    /// Releases the lease of a job that was not accepted (an accepted job's goes with its ``add``).
    mutating func release(member: Int64) {
        releaseArguments.append(member)
        releases += 1
    }

    mutating func suppress(tokenHex: String, at: Int64, reason: String) {
        suppressArguments.append(lowercasingASCII: tokenHex)
        suppressArguments.append(at)
        suppressArguments.append("\(at):\(reason)")
        suppressions += 1
    }

    mutating func register(tokenHex: String, at: Int64, language: String) {
        registerArguments.append(lowercasingASCII: tokenHex)
        registerArguments.append(at)
        registerArguments.append(language)
        registrations += 1
    }

    /// The group's keys and arguments. A settle part with nothing to replay-protect (no dedup record, no
    /// lease: only newest-wins suppressions) needs no marker.
    func group(markerTTL: Int64) -> ScriptGroup {
        let marked = marker != nil && (adds > 0 || releases > 0)
        var keyList = RedisArguments()
        keyList.reserveCapacity(adding: 5 + addKeys.count, bytes: 5 * (tag.utf8.count + 32) + addKeys.byteCount)
        if marked, let marker { keyList.append(keys.batch(tag: tag, marker)) }
        keyList.append(keys.suppressed(tag: tag))
        keyList.append(keys.registered(tag: tag))
        keyList.append(keys.language(tag: tag))
        keyList.append(keys.inFlight(tag: tag))
        keyList.append(contentsOf: addKeys)
        var a = RedisArguments()
        a.append(marked ? 1 : 0)
        a.append(adds)
        a.append(expiringSets.count)
        a.append(releases)
        a.append(suppressions)
        a.append(registrations)
        a.append(expireAt)
        a.append(contentsOf: addArguments)
        a.append(contentsOf: releaseArguments)
        a.append(contentsOf: expireArguments)
        a.append(contentsOf: suppressArguments)
        a.append(contentsOf: registerArguments)
        return ScriptGroup(tag: tag, keys: keyList, arguments: a)
    }
}

/// Which dedup sets this process gave their expiry recently. A set's expiry (end of its time bucket +
/// the retention) is the same for every write, so one `EXPIREAT` per set and minute is enough, not one
/// per set and settle batch (a batch of 500 touches ~470 of the 4096 sets: that was ~0.9 `EXPIREAT` per
/// job, issue 14). Forgotten every minute, so a set that lost its expiry (a server restarted without
/// its data, a key deleted by hand) gets it again with its next write after at most a minute. Marked
/// only once the call that set them succeeded.
final class DedupExpiries: Sendable {
    private struct State {
        /// By table serial (``DedupSetID/table``), a bit per sub-bucket: a look-up per accepted job is an
        /// index and a mask, where a `Set<DedupSetID>` hashed every key (~1 % of `run`, issue 14). Serials
        /// only grow, by one per tag and time bucket: tens of entries a day, emptied every minute.
        var given: [[UInt64]] = []
        var window = ExpiryWindow()
    }
    private let state = Mutex(State())

    /// Whether `key` was given its expiry within the last minute (as of `now`, epoch seconds).
    func isGiven(_ key: DedupSetID, now: Int64) -> Bool {
        state.withLock { state in
            if state.window.startsAnew(now: now) { state.given.removeAll() }
            let word = key.subBucket / 64
            guard key.table < state.given.count, word < state.given[key.table].count else { return false }
            return state.given[key.table][word] & (1 << UInt64(key.subBucket % 64)) != 0
        }
    }

    func markGiven(_ keys: [DedupSetID]) {
        if keys.isEmpty { return }
        state.withLock { state in
            // Serial 0: a table not kept (``DedupSetNames``), whose sets are given their expiry at every write.
            for key in keys where key.table != DedupSetNames.unkeptSerial {
                if key.table >= state.given.count {
                    state.given.append(contentsOf: repeatElement([], count: key.table + 1 - state.given.count))
                }
                let word = key.subBucket / 64
                if word >= state.given[key.table].count {
                    state.given[key.table].append(contentsOf: repeatElement(0, count: word + 1 - state.given[key.table].count))
                }
                state.given[key.table][word] |= 1 << UInt64(key.subBucket % 64)
            }
        }
    }
}

/// The minute an expiry memory (``DedupExpiries``, ``MarkExpiries``) remembers: what was given its
/// expiry is forgotten once `seconds` have passed since the window began (or the clock went back).
struct ExpiryWindow {
    static let seconds: Int64 = 60
    private var since: Int64?

    /// Whether `now` begins a new window, whose memory starts empty.
    mutating func startsAnew(now: Int64) -> Bool {
        if let since, now >= since, now - since < Self.seconds { return false }
        since = now
        return true
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

/// A dedup set of this process's ``DedupSetNames``: its table's serial number (never reused) and sub-bucket.
struct DedupSetID: Hashable {
    var table: Int
    var subBucket: Int
}

/// The names of the dedup sets, per token tag and time bucket, made once per process rather than per
/// job: the gate names `probes` sets per job and the settle one per accepted job, and formatting them
/// (`{<p>:<app>:<n>}:dedup:<bucket>:<sub>`) was ~5 % of `run`'s CPU (issue 14). Each table holds every
/// sub-bucket's name of one (tag, bucket): 256 names with the defaults, ~12 KB; tables of buckets older
/// than `liveBuckets` behind the newest are dropped. Only tables of the configured apps' tags are kept
/// (apps × token buckets × live buckets: bounded by the pipeline file); a table of any other tag is made
/// for its call and dropped (issue 28: tags built from app names a producer invents grew without bound).
final class DedupSetNames: Sendable {
    /// The key names of one tag's sets in one time bucket, one per sub-bucket.
    final class Table: Sendable {
        /// Unique per table in this process (``DedupSetID``).
        let serial: Int
        /// Every name's bytes, one after another: a call's keys are copied from here (the gate takes one
        /// per job and probe, the settle one per accepted job), not retained and released as Strings
        /// shared between the gate's and the settle's threads.
        private let bytes: [UInt8]
        /// Where name n ends in `bytes` (it starts where n − 1 ends).
        private let ends: [Int]

        init(serial: Int, names: [String]) {
            self.serial = serial
            var bytes: [UInt8] = []
            var ends: [Int] = []
            ends.reserveCapacity(names.count)
            for name in names {
                bytes.append(contentsOf: name.utf8)
                ends.append(bytes.count)
            }
            self.bytes = bytes
            self.ends = ends
        }

        var count: Int { ends.count }

        /// Where name `sub` is in `bytes`.
        private func range(_ sub: Int) -> Range<Int> { (sub == 0 ? 0 : ends[sub - 1])..<ends[sub] }

        /// Name `sub`, appended to `arguments` as one argument.
        func appendName(_ sub: Int, to arguments: inout RedisArguments) {
            bytes.withUnsafeBytes { arguments.append(bytes: UnsafeRawBufferPointer(rebasing: $0[range(sub)])) }
        }

        /// Name `sub` as a String (tests).
        func name(_ sub: Int) -> String { String(decoding: bytes[range(sub)], as: UTF8.self) }

        /// Every name (tests).
        var names: [String] { (0..<count).map(name) }
    }
    private struct TableKey: Hashable {
        var tag: String
        var bucket: Int64
    }
    private let keys: RedisKeys
    private let subBuckets: Int
    private let liveBuckets: Int
    /// The tags whose tables are kept; nil: any, up to ``maxTablesForAnyApp``.
    private let keptTags: Set<String>?
    private struct State {
        var tables: [TableKey: Table] = [:]
        var serial = 0
        var newest = Int64.min
    }
    private let state = Mutex(State())

    /// The serial of a table that is not kept (never that of a kept one, which start at 1).
    static let unkeptSerial = 0
    /// Tables kept when the store is not told its apps (tools): ~12 MB with the defaults.
    static let maxTablesForAnyApp = 1024

    init(keys: RedisKeys, subBuckets: Int, liveBuckets: Int, apps: Set<String>? = nil) {
        self.keys = keys
        self.subBuckets = max(1, subBuckets)
        self.liveBuckets = max(1, liveBuckets)
        self.keptTags = apps.map { apps in
            Set(apps.flatMap { app in (0..<keys.tokenBuckets).map { keys.tokenTag(app: app, bucket: $0) } })
        }
    }

    func table(tag: String, bucket: Int64) -> Table {
        let key = TableKey(tag: tag, bucket: bucket)
        if let known = state.withLock({ $0.tables[key] }) { return known }
        let names = (0..<subBuckets).map { keys.dedup(tag: tag, bucket: bucket, subBucket: $0) }
        if let keptTags, !keptTags.contains(tag) { return Table(serial: Self.unkeptSerial, names: names) }
        return state.withLock { state in
            if let raced = state.tables[key] { return raced }
            if keptTags == nil, state.tables.count >= Self.maxTablesForAnyApp, bucket <= state.newest {
                return Table(serial: Self.unkeptSerial, names: names)
            }
            state.serial += 1
            let table = Table(serial: state.serial, names: names)
            state.tables[key] = table
            if bucket > state.newest {
                state.newest = bucket
                let oldest = state.newest - Int64(liveBuckets)
                state.tables = state.tables.filter { $0.key.bucket >= oldest }
            }
            return table
        }
    }

    var count: Int { state.withLock { $0.tables.count } }
}

/// Tag writes by token tag, in first-seen order.
struct TagWritesSet {
    let keys: RedisKeys
    private(set) var parts: [TagWrites] = []
    private var index: [TagID: Int] = [:]

    init(keys: RedisKeys) { self.keys = keys }

    /// Applies `body` to the writes of the tag of `tokenHex` of `app`, created on first use.
    mutating func update(app: String, tokenHex: String, _ body: (inout TagWrites) -> Void) {
        body(&parts[position(app: app, tokenHex: tokenHex)])
    }

    private mutating func position(app: String, tokenHex: String) -> Int {
        let id = TagID(app: app, bucket: keys.tokenBucket(tokenHex))
        if let known = index[id] { return known }
        parts.append(TagWrites(keys: keys, tag: keys.tokenTag(app: app, bucket: id.bucket), marker: nil))
        index[id] = parts.count - 1
        return parts.count - 1
    }
}

/// The writes of `Scripts.counters`, all keys in the tag `{<p>}` (counters summed per key and field, so
/// a batch of 1000 accepted jobs is one HINCRBY per counter, not 1000).
struct CounterWrites {
    let marker: String?
    private var keyList: [String] = []
    private var keyIndex: [String: Int] = [:]
    private var increments: [Int: [String: Int64]] = [:]
    private var incrementOrder: [Int] = []
    private var expires: [Int: Int64] = [:]
    private var sets: [(Int, String, String)] = []
    private struct Progress {
        var hash: Int
        var counted: Int
        /// Accepted jobs: member, tag part (0-based) and add position (1-based) of its dedup record.
        var accepted: [(member: Int64, part: Int, add: Int)] = []
        var others: [(field: String, member: Int64)] = []
    }
    private var progress: [Progress] = []
    private var campaignIndex: [String: Int] = [:]
    private var lastCampaign: (id: String, index: Int)?
    var countedTTL: Int64 = 1

    init(marker: String?) { self.marker = marker }

    private mutating func index(_ key: String) -> Int {
        if let known = keyIndex[key] { return known }
        keyList.append(key)
        keyIndex[key] = keyList.count
        return keyList.count
    }

    mutating func increment(_ key: String, _ field: String, _ delta: Int64) {
        let k = index(key)
        if increments[k] == nil { incrementOrder.append(k) }
        increments[k, default: [:]][field, default: 0] += delta
    }
    mutating func expire(_ key: String, seconds: Int64) { expires[index(key)] = seconds }
    mutating func set(_ key: String, _ field: String, _ value: String) { sets.append((index(key), field, value)) }
    func touches(_ key: String) -> Bool { keyIndex[key].map { increments[$0] != nil } ?? false }

    private mutating func campaign(_ id: String, keys: RedisKeys) -> Int {
        // Called per job: consecutive jobs are mostly of one campaign.
        if let last = lastCampaign, last.id == id { return last.index }
        if let known = campaignIndex[id] {
            lastCampaign = (id, known)
            return known
        }
        progress.append(Progress(hash: index(keys.campaign(id)), counted: index(keys.countedJobs(campaign: id))))
        campaignIndex[id] = progress.count - 1
        lastCampaign = (id, progress.count - 1)
        return progress.count - 1
    }
    mutating func accepted(campaign id: String, keys: RedisKeys, member: Int64, part: Int, add: Int) {
        progress[campaign(id, keys: keys)].accepted.append((member, part, add))
    }
    mutating func other(campaign id: String, keys: RedisKeys, field: String, member: Int64) {
        progress[campaign(id, keys: keys)].others.append((field, member))
    }

    /// KEYS and ARGV of the counters. `resolved`: the tag parts' flags when they ran in earlier calls
    /// (only accepted jobs whose dedup SADD added are sent, as group 0); nil when the parts run in the
    /// same script (each accepted job refers to its part's flag: group = part + 1).
    func call(markerTTL: Int64, resolved: [[UInt8]]?) -> (keys: [String], arguments: RedisArguments) {
        var allKeys: [String] = []
        if let marker { allKeys.append(marker) }
        allKeys.append(contentsOf: keyList)
        var a = RedisArguments()
        a.append(marker == nil ? 0 : 1)
        a.append(markerTTL)
        a.append(increments.values.reduce(0) { $0 + $1.count })
        for k in incrementOrder {
            for (field, delta) in increments[k]! {
                a.append(k)
                a.append(field)
                a.append(delta)
            }
        }
        a.append(expires.count)
        for (k, seconds) in expires {
            a.append(k)
            a.append(seconds)
        }
        a.append(sets.count)
        for (k, field, value) in sets {
            a.append(k)
            a.append(field)
            a.append(value)
        }
        a.append(countedTTL)
        a.append(progress.count)
        for campaign in progress {
            a.append(campaign.hash)
            a.append(campaign.counted)
            if let resolved {
                // The parts ran in earlier calls: the members of the accepted jobs whose record was new.
                let added = campaign.accepted.filter { job in
                    let flags = resolved[job.part]
                    return job.add <= flags.count && flags[job.add - 1] == DedupAddFlag.added.digit
                }
                a.append(0)
                a.append(added.count)
                a.append(campaign.others.count)
                for job in added { a.append(job.member) }
            } else {
                // The parts run in the same script: runs of add positions (group = part + 1), no argument per job.
                var ranges: [(group: Int, from: Int, to: Int)] = []
                for job in campaign.accepted {
                    if let last = ranges.last, last.group == job.part + 1, last.to + 1 == job.add {
                        ranges[ranges.count - 1].to = job.add
                    } else {
                        ranges.append((job.part + 1, job.add, job.add))
                    }
                }
                a.append(ranges.count)
                a.append(0)
                a.append(campaign.others.count)
                for range in ranges {
                    a.append(range.group)
                    a.append(range.from)
                    a.append(range.to)
                }
            }
            for (field, member) in campaign.others {
                a.append(field)
                a.append(member)
            }
        }
        return (allKeys, a)
    }
}

/// A flag that is set once, from any thread (to log a configuration warning once, not per batch).
final class OnceFlag: Sendable {
    private let done = Mutex(false)

    /// True for the first caller only.
    func setOnce() -> Bool {
        done.withLock { done in
            if done { return false }
            done = true
            return true
        }
    }
}
