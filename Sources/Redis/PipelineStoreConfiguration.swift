import Foundation

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
    /// job in `ops/bench e2e`) and keeps a record 24–48 h (12 h: 24–36). Part of the
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
    /// How the token buckets' hash tags are spelled (`redis.token_tags`, ``RedisKeys/TokenTags``): fixed
    /// for the life of the data too.
    public var tokenTags: RedisKeys.TokenTags = .plain
    /// How far another process's clock may run ahead of this one's: within this much of the next dedup
    /// time bucket's start, the gate probes that bucket too (a record settled by a process whose clock
    /// already passed the boundary lands there).
    public var clockSkewAllowance: Duration
    /// Send each script call with the keys of one Redis Cluster slot only (``RedisSlot``). Off for a
    /// single Redis, which then gets all groups of a batch in one call (one round trip); the groups and
    /// their keys are the same either way.
    public var oneSlotPerCall: Bool
    /// The apps whose per-tag key names this process keeps (``DedupSetNames``): the pipeline file's, so
    /// the cache is bounded by configuration whatever app names reach the store. nil: any
    /// app, up to ``DedupSetNames/maxTablesForAnyApp`` tables; names of other apps are made per call.
    public var apps: Set<String>? = nil
    /// How long a campaign's keys (`{<p>}:campaign:<id>`, its `jobs:published` and `jobs:counted` sets)
    /// live after the campaign's last activity (a publish, a settled job): `redis.campaign_ttl_hours`.
    /// nil: ``dedupRetention`` + one ``dedupBucketWidth``, the longest a dedup record lives (a job's
    /// mark must outlive its dedup record); a shorter value is taken as that.
    public var campaignRetention: Duration? = nil
    /// The byte caps on held jobs (`redis.held_max_bytes`, `redis.held_campaign_max_bytes`; design §2.11).
    public var heldCaps = HeldCaps()
    /// `redis.held_replica_acks`: how many replicas of each node must acknowledge a call's held jobs
    /// before the call returns (`WAIT`). A held job's message settles `deferred`, so Redis holds its only
    /// copy: a fail-over to a replica that never got it would lose it. 0 (the default): no wait, for a
    /// Redis without replicas.
    public var heldReplicaAcks = 0
    /// How long a call waits for those acknowledgements before it fails as Redis unavailable would.
    public var heldReplicaWait: Duration = .seconds(60)
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
