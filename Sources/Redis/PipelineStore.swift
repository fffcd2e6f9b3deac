import Foundation
import Logging

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
///
/// A facade over the store's roles, each in its own file and type, sharing one ``StoreRunner`` (through
/// which every Redis call goes) and the process's memories of key names and expiries: ``GateStore`` (the
/// gate, leases, take-overs, written marks, the heartbeat), ``SettleStore`` (settle batches, counters,
/// dedup expiries), ``CampaignStore`` (publish marks, campaign progress, stats reads) and
/// ``RegistrationStore`` (registrations and suppressions). Campaign controls, job status and the dedup
/// layout are extensions of this type (`CampaignControl.swift`, `JobStatus.swift`, `DedupLayout.swift`).
public struct PipelineStore: Sendable {
    let runner: StoreRunner
    public var client: any RedisConnection { runner.client }
    public var configuration: PipelineStoreConfiguration { runner.configuration }
    public var keys: RedisKeys { runner.keys }
    var logger: Logger { runner.logger }
    private let overflowWarning = OnceFlag()
    private let dedupExpiries = DedupExpiries()
    private let markExpiries = MarkExpiries()
    private let dedupSetNames: DedupSetNames

    public init(
        client: any RedisConnection, configuration: PipelineStoreConfiguration = PipelineStoreConfiguration(),
        logger: Logger = Logger(label: "apns.redis.store")
    ) {
        var configuration = configuration
        // A cluster refuses a call spanning slots: whoever made the store, it sends one slot per call there.
        if client is RedisCluster { configuration.oneSlotPerCall = true }
        let keys = RedisKeys(prefix: configuration.keyPrefix, tokenBuckets: configuration.tokenBuckets, tokenTags: configuration.tokenTags)
        self.runner = StoreRunner(client: client, configuration: configuration, keys: keys, logger: logger)
        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        // The buckets a gate probes or a settle writes (retention ÷ width + 2), and one to spare.
        self.dedupSetNames = DedupSetNames(
            keys: keys, subBuckets: configuration.dedupSubBucketsPerTag,
            liveBuckets: Int(configuration.dedupRetention.components.seconds / width) + 3, apps: configuration.apps)
    }

    // MARK: Roles (views over the shared state: made per call, a few references each)

    var gateStore: GateStore { GateStore(runner: runner, dedupSetNames: dedupSetNames) }
    var settleStore: SettleStore {
        SettleStore(
            runner: runner, dedupSetNames: dedupSetNames, dedupExpiries: dedupExpiries, markExpiries: markExpiries,
            overflowWarning: overflowWarning)
    }
    var campaignStore: CampaignStore { CampaignStore(runner: runner, markExpiries: markExpiries) }
    var registrationStore: RegistrationStore { RegistrationStore(settle: settleStore) }

    public static func epochNow() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// How long a campaign's keys live after its last activity, in seconds (``PipelineStoreConfiguration/campaignRetention``):
    /// its hash, and its job marks (`…:jobs:published:*`, `…:jobs:counted:*`) after their last write. At
    /// least as long as the longest-lived dedup record, the mark of its accepted jobs. A campaign
    /// published again after that is a new run: its jobs are sent again (dedup expired) and count again,
    /// in `jobs` as in `jobs_settled`. Each is given its expiry once per process and minute (a minute
    /// longer), not per batch.
    public var jobMarkRetention: Int64 { runner.jobMarkRetention }

    public static func newBatchID() -> String { UUID().uuidString.lowercased() }

    // MARK: Gate (GateStore)

    /// Decides, for each job of a batch, whether to send it: already settled as accepted → ``GateDecision/deduped``;
    /// another copy in flight → ``GateDecision/inFlight``; token suppressed and not registered since →
    /// ``GateDecision/suppressed``; else ``GateDecision/admitted(language:)`` with an in-flight lease
    /// taken. One round trip on a single Redis (one call per slot on a cluster), plus one when a lease of
    /// another process is met (its heartbeat is read, and a dead owner's lease taken over). Decisions come
    /// back in the order of `requests`.
    public func gate(
        _ requests: [GateRequest], call: String = PipelineStore.newBatchID(), now: Int64 = PipelineStore.epochNow()
    ) async throws -> [GateDecision] {
        try await gateStore.gate(requests, call: call, now: now)
    }

    /// ``gate(_:call:now:)``, and each admitted job's registered profile when its request
    /// ``GateRequest/needsProfile`` (by request index; absent when the token's registrations named none),
    /// read in the same call.
    public func gateReadingProfiles(
        _ requests: [GateRequest], call: String = PipelineStore.newBatchID(), now: Int64 = PipelineStore.epochNow()
    ) async throws -> (decisions: [GateDecision], profiles: [Int: RecipientProfile]) {
        try await gateStore.gateReadingProfiles(requests, call: call, now: now)
    }

    /// Frees the in-flight leases of jobs the gate admitted that will be neither sent nor settled now (an
    /// audience rule would hold them, and the held slots are full): one `HDEL` per token tag. Rare.
    public func releaseLeases(_ requests: [GateRequest]) async throws {
        var members: [String: [String]] = [:]
        for request in requests {
            let key = keys.inFlight(tag: keys.tokenTag(app: request.app, bucket: keys.tokenBucket(hash: request.tokenHash)))
            members[key, default: []].append(String(request.fingerprint.member))
        }
        for (key, fields) in members.sorted(by: { $0.key < $1.key }) {
            _ = try await command(RedisCommand("HDEL", arguments: RedisArguments([key] + fields)))
        }
    }

    /// Runs a script over groups of keys, one group per hash tag (``ScriptGroup``): one call per slot on a
    /// cluster, one call in all on a single Redis (``PipelineStoreConfiguration/oneSlotPerCall``). Replies
    /// come back in the order of `groups`. For the audience rules, which keep their scripts with them.
    public func runGrouped(_ script: RedisScript, header: RedisArguments, groups: [ScriptGroup]) async throws -> [RedisReply] {
        try await runner.run(script, header: header, groups: groups)
    }

    /// Marks gate call `call`'s batch as handed to the transports, before any of it is written: if this
    /// process dies, a take-over of its leases counts `ambiguous` only for marked batches (design
    /// §2.4). Lives as long as a lease. One write per batch. `heartbeat`: the heartbeat's value the call
    /// was gated under; `false` (nothing set) when it holds another now, `nil` sets it anyway
    /// (``GateStore/markWritten(call:heartbeat:)``).
    @discardableResult
    public func markWritten(call: String, heartbeat: String?) async throws -> Bool {
        try await gateStore.markWritten(call: call, heartbeat: heartbeat)
    }

    /// The lease on a job id as stored (`nil`: none; a lease past ``InFlightLease/expiresAtMs`` is free for
    /// the gate): for operators and tests.
    public func lease(jobID: String, app: String, tokenHex: String) async throws -> InFlightLease? {
        try await gateStore.lease(jobID: jobID, app: app, tokenHex: tokenHex)
    }

    /// Writes this process's heartbeat, `<p>:owner:<leaseOwner>`, holding `value` and living
    /// ``PipelineStoreConfiguration/ownerHeartbeat``. While it lives, this process's leases hold.
    /// `refresh`: only if it still lives; `false` when it had lapsed (nothing written).
    @discardableResult
    public func beat(value: String = "alive", refresh: Bool = false) async throws -> Bool {
        try await gateStore.beat(value: value, refresh: refresh)
    }

    /// Removes the heartbeat (graceful stop): whatever this process still leases is void at once.
    public func endHeartbeat() async throws {
        try await gateStore.endHeartbeat()
    }

    /// `<owner>` of a lease value `<owner>/<call>/<expiry ms>`.
    static func leaseOwner(of value: String) -> String { GateStore.leaseOwner(of: value) }

    func dedupBucketsToCheck(now: Int64) -> [Int64] { gateStore.dedupBucketsToCheck(now: now) }

    func dedupBucketsToProbe(now: Int64) -> [Int64] { gateStore.dedupBucketsToProbe(now: now) }

    // MARK: Settle and counters (SettleStore)

    /// The counter field of a broadcast's outcome (design §4.1): `broadcast:accepted`, `broadcast:deduped`, ….
    public static func broadcastField(_ kind: SettledOutcomeKind) -> String { SettleStore.broadcastField(kind) }

    /// Records a batch of outcomes: dedup records for accepted jobs, suppression of the tokens an outcome
    /// asks to suppress, releases the in-flight leases, and increments totals, the minute bucket,
    /// campaigns, `rejected:<code>` and shard counters. One round trip on a single Redis; on a cluster one
    /// call per token slot (in parallel), then one for the counters. Exactly once (``SettleStore/settle(_:)``):
    /// returns `false` for a replay of a batch already applied.
    @discardableResult
    public func settle(_ batch: SettleBatch) async throws -> Bool {
        try await settleStore.settle(batch, partsOnly: false)
    }

    /// `partsOnly`: run the token tags' parts and stop, as a process that crashed between them and the
    /// counters would (for tests of the replay).
    func settle(_ batch: SettleBatch, partsOnly: Bool) async throws -> Bool {
        try await settleStore.settle(batch, partsOnly: partsOnly)
    }

    /// Adds to counters of the totals and of the current minute (not exactly once: for events counted
    /// outside a settle batch, such as failed dead-letter writes).
    public func increment(_ field: CounterField, by delta: Int64, now: Int64 = PipelineStore.epochNow()) async throws {
        try await settleStore.increment(field, by: delta, now: now)
    }

    /// Writes a shard's connection state (idempotent).
    public func updateShard(_ status: ShardStatus) async throws {
        try await settleStore.updateShard(status)
    }

    // MARK: Registrations and suppressions (RegistrationStore)

    /// Applies registration events: `registered` and the language are written only when the event is at
    /// least as new as the stored registration, so a registration lifts an older suppression and a stale
    /// one changes nothing. One round trip on a single Redis (one call per token slot on a cluster).
    public func applyRegistrations(_ registrations: [Registration]) async throws {
        try await registrationStore.applyRegistrations(registrations)
    }

    /// The recipient profile stored for a token by its registrations (`{<p>:<app>:<n>}:profile`): its time
    /// zone and user, nil where the newest registration naming either left it empty (both nil: none named
    /// one). For tests and operators; one `HGET`.
    public func profile(app: String, tokenHex: String) async throws -> (timeZone: String?, user: String?) {
        try await registrationStore.profile(app: app, tokenHex: tokenHex)
    }

    /// Suppresses tokens (`{<p>:<app>:<n>}:suppressed` token → `<epoch>:<reason>`), keeping the newest
    /// time of each token. For the feedback poller: one round trip per batch of tuples (one call per
    /// token slot on a cluster).
    public func suppress(_ suppressions: [Suppression]) async throws {
        try await registrationStore.suppress(suppressions)
    }

    // MARK: Campaigns and stats (CampaignStore)

    /// Starts a publish of `campaign`: notes the time (`publish_started_ms`, so `campaign wait` is not done
    /// while it runs) and fixes, at its first publish, how many sets hold its job marks: about 400 marks
    /// per set (compact intsets) for `expectedJobs`. Returns that number, for ``recordPublished(campaign:jobIDs:messages:markSets:now:)``.
    public func beginPublish(
        campaign: String, expectedJobs: Int, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
    ) async throws -> Int {
        try await campaignStore.beginPublish(campaign: campaign, expectedJobs: expectedJobs, nowMs: nowMs)
    }

    /// Ends a publish of `campaign` (`publish_finished_ms`).
    public func finishPublish(campaign: String, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) async throws {
        try await campaignStore.finishPublish(campaign: campaign, nowMs: nowMs)
    }

    /// Records a batch of published jobs: `messages` (default: one per id) to `published`, and the ids
    /// never published before in this campaign to `jobs` (marked in `{<p>}:jobs:published:<id>:<set>`,
    /// `markSets` from ``beginPublish(campaign:expectedJobs:nowMs:)``). Exactly once even if retried. One
    /// round trip. Returns how many ids were new.
    @discardableResult
    public func recordPublished(
        campaign: String, jobIDs: [String], messages: Int? = nil, markSets: Int, now: Int64 = PipelineStore.epochNow()
    ) async throws -> Int {
        try await campaignStore.recordPublished(campaign: campaign, jobIDs: jobIDs, messages: messages, markSets: markSets, now: now)
    }

    /// Adds `count` to the campaign's `published` field, exactly once even if the call is retried. (Only
    /// messages: `jobs`, the base of per-job progress, comes from ``recordPublished(campaign:jobIDs:messages:markSets:now:)``.)
    public func incrementPublished(campaign: String, by count: Int) async throws {
        try await campaignStore.incrementPublished(campaign: campaign, by: count)
    }

    /// Totals and the per-minute buckets of the last `lastMinutes` minutes (ending with the current
    /// one), in one round trip.
    public func readStats(lastMinutes: Int = 60, now: Int64 = PipelineStore.epochNow()) async throws -> PipelineStats {
        try await campaignStore.readStats(lastMinutes: lastMinutes, now: now)
    }

    public func readCampaign(_ id: String) async throws -> CampaignProgress {
        try await campaignStore.readCampaign(id)
    }

    // MARK: The shared runner (StoreRunner), for the extensions of this type and tests

    func run(_ script: RedisScript, header: RedisArguments, groups: [ScriptGroup]) async throws -> [RedisReply] {
        try await runner.run(script, header: header, groups: groups)
    }

    static func calls(_ groups: [ScriptGroup], oneSlotPerCall: Bool) -> [[Int]] {
        StoreRunner.calls(groups, oneSlotPerCall: oneSlotPerCall)
    }

    func command(_ command: RedisCommand) async throws -> RedisReply {
        try await runner.command(command)
    }

    /// Plain commands in one round trip; callers send only keys of one slot together.
    func commands(_ list: [RedisCommand]) async throws -> [RedisReply] {
        try await runner.commands(list)
    }

    static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 { StoreRunner.floorDivide(a, b) }
}
