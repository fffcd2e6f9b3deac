import Synchronization

/// The Redis key layout: the contract ops dashboards read (`docs/design.md §4.1`). Every key name the pipeline
/// writes is spelled here, and only here.
///
/// Laid out for Redis Cluster: every key carries a hash tag, and a script only ever touches the
/// keys of one tag (so of one slot). Two kinds of tag:
/// - `{<p>}`: the counters and campaign state dashboards read, all in one slot, so one marker-guarded
///   script per batch updates them atomically (one call per batch, not per job: no hot spot).
/// - `{<p>:<app>:<n>}` (or `{<p>:<app>:<n>:<s>}`, ``TokenTags/spread``), n = ``tokenBucket(_:)`` of the
///   token (0 ..< `tokenBuckets`): everything one job needs, the dedup records, the lease and the token's
///   suppression, registration, language and recipient profile, so one app's traffic spreads over
///   `tokenBuckets` slots of the cluster.
///
/// | key | type | content |
/// |---|---|---|
/// | `{<p>}:stats` | HASH | totals: ``CounterField`` fields and `rejected:<status>` |
/// | `{<p>}:stats:<yyyyMMddHHmm>` | HASH | the same per UTC minute; expires after a day |
/// | `{<p>}:campaign:<id>` | HASH | `published` + the outcome fields (per message); `jobs`, `jobs_settled`, `jobs_<outcome>` (per job), `job_mark_sets`, `publish_started_ms`, `publish_finished_ms` |
/// | `{<p>}:jobs:published:<id>:<sub>` | SET (intset) | fingerprints of the campaign's published job ids (`jobs`) |
/// | `{<p>}:jobs:counted:<id>` | SET | fingerprints of the campaign's jobs counted with an outcome other than accepted |
/// | `{<p>}:shard:<app>:<n>` | HASH | `state gateway connected_since sent replayed last_error` |
/// | `{<p>}:batch:<id>` | STRING | marker of an applied settle batch's counters (EX 1 h): exactly-once counting |
/// | `{<p>}:dedup:layout` | STRING | the dedup layout the records were written with (``DedupLayout``), checked by `run` at start |
/// | `{<p>}:control` | HASH | campaign id → control state (``CampaignControlState``): cancelled, paused, … |
/// | `{<p>}:control:version` | STRING | counter, incremented with every change of `{<p>}:control` |
/// | `{<p>}:control:seen` | HASH | lease owner → the control version that `run` process applied |
/// | `{<p>}:deferred` | SET | campaigns with held jobs |
/// | `{<p>}:deferred:<id>` | ZSET | held jobs as older versions kept them: released, never written |
/// | `{<p>}:deferred-lock:<id>` | STRING | owner of the release of a campaign's due jobs (PX) |
/// | `{<p>}:pace:<id>` | STRING | a paced campaign's next free slot, epoch µs (PX 1 day) |
/// | `{<p>}:release-key` | STRING | the key released paced jobs are signed with (hex) |
/// | `{<p>:held:<n>}:jobs:<id>` | ZSET | a campaign's held job messages in shard n, scored by due time (epoch ms); PX the campaign retention |
/// | `{<p>:held:<n>}:bytes` | HASH | campaign → `<bytes held in shard n> <epoch ms of its last hold>` |
/// | `{<p>:<app>:<n>}:suppressed` | HASH | token hex → `<epoch>:<reason>` |
/// | `{<p>:<app>:<n>}:registered` | HASH | token hex → `<epoch>` |
/// | `{<p>:<app>:<n>}:lang` | HASH | token hex → language |
/// | `{<p>:<app>:<n>}:profile` | HASH | token hex → `<time zone>\n<user>` (either part may be empty) |
/// | `{<p>:<app>:<n>}:capped:<recipient>` | ZSET | the recipient's jobs a cap refused: job fingerprint → when (ms); trimmed and expiring with its caps |
/// | `{<p>:<app>:<n>}:cap:<recipient>[:c:<campaign>]` | ZSET | a recipient's capped sends: job fingerprint → send time (ms); expires after the longest window |
/// | `{<p>:<app>:<n>}:dedup:<bucket>:<sub>` | SET (intset) | 64-bit fingerprints of accepted job ids |
/// | `{<p>:<app>:<n>}:inflight` | HASH | leases of jobs between gate and settle: fingerprint → `<owner>/<gate call>/<expiry ms>` |
/// | `{<p>:<app>:<n>}:batch:<id>` | STRING | marker of a settle batch's part in this tag, holding its result (EX 10 min) |
/// | `<p>:owner:<owner>` | STRING | heartbeat of a live `run` process, `<host> pid <pid> epoch <n>` (PX TTL, refreshed while it lives; a new epoch when it lapsed) |
/// | `{<p>:owner:<owner>}:written:<call>` | STRING | a gate call's batch may be written: set only while the heartbeat holds the value the call was gated under (PX a lease) |
///
/// Token hex is stored lower-case.
public struct RedisKeys: Sendable, Hashable {
    /// How a token bucket's hash tag is spelled (`redis.token_tags`), so where its slot falls. In the key
    /// names, so fixed for the data's life: recorded with the dedup layout (``DedupLayout``).
    public enum TokenTags: String, Sendable, Hashable, CaseIterable {
        /// `{<p>:<app>:<n>}`: the slot is wherever CRC16 puts it. An app's 16 tags fall unevenly over a
        /// few primaries (10 / 3 / 3 of 3 primaries for `com.example.shop`): one primary does the work of two.
        case plain
        /// `{<p>:<app>:<n>:<s>}`, s the least number that puts the tag's slot in the n-th of
        /// ``spreadSlices`` equal slices of the slot space (n mod the slices): an app's tags sit evenly
        /// over the slots, so primaries holding equal slot ranges (what `redis-cli --cluster create` and
        /// `rebalance` make) take equal shares of its jobs.
        case spread

        /// What a store uses when nothing says: spread on a cluster (where slots are placed), plain on
        /// one server (the keys' names as versions before spread tags wrote them).
        public static func defaultFor(cluster: Bool) -> TokenTags { cluster ? .spread : .plain }
    }

    /// A device token as it is stored in Redis (hash fields, script arguments): lower-case hex. The one
    /// place token hex is normalised on its way into Redis, whatever case a producer or Apple used.
    public static func tokenField(_ hex: String) -> String { hex.lowercased() }

    public let prefix: String
    /// How many token buckets (hash tags, so slots) one app's per-token keys spread over.
    public let tokenBuckets: Int
    public let tokenTags: TokenTags
    /// The spread tags found so far, per app (nil for plain tags).
    private let spreadTagTable: SpreadTagTable?

    /// The prefix when none is configured (`redis.prefix`): its one home; commands and the pipeline
    /// file read it from here.
    public static let defaultPrefix = "apns"
    /// Token buckets per app when none is configured (`redis.token_buckets`).
    public static let defaultTokenBuckets = 16

    public init(prefix: String = RedisKeys.defaultPrefix, tokenBuckets: Int = RedisKeys.defaultTokenBuckets, tokenTags: TokenTags = .plain)
    {
        self.prefix = prefix
        self.tokenBuckets = max(1, tokenBuckets)
        self.tokenTags = tokenTags
        spreadTagTable = tokenTags == .spread ? SpreadTagTable() : nil
    }

    public static func == (lhs: RedisKeys, rhs: RedisKeys) -> Bool {
        lhs.prefix == rhs.prefix && lhs.tokenBuckets == rhs.tokenBuckets && lhs.tokenTags == rhs.tokenTags
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(prefix)
        hasher.combine(tokenBuckets)
        hasher.combine(tokenTags)
    }

    // MARK: Counters and campaigns: tag `{<p>}`

    /// `{<p>}`: the hash tag of the counters, campaigns and shard hashes.
    public var countersTag: String { "{\(prefix)}" }
    public var stats: String { "{\(prefix)}:stats" }
    public func stats(minute: String) -> String { "{\(prefix)}:stats:\(minute)" }
    public func stats(minuteOf epochSeconds: Int64) -> String { stats(minute: Self.minuteStamp(epochSeconds)) }
    /// `{<p>}:campaign:`; the campaign id follows (dashboards scan for it).
    public var campaignPrefix: String { "{\(prefix)}:campaign:" }
    public func campaign(_ id: String) -> String { campaignPrefix + id }
    /// Marks of a campaign's published job ids, one of `sets` sets (``CampaignField/jobMarkSets``).
    public func publishedJobs(campaign: String, set: Int) -> String { "{\(prefix)}:jobs:published:\(campaign):\(set)" }
    /// Marks of a campaign's jobs counted in `jobs_*` with an outcome other than accepted (accepted ones
    /// are marked by their dedup record).
    public func countedJobs(campaign: String) -> String { "{\(prefix)}:jobs:counted:\(campaign)" }
    /// `{<p>}:shard:`; `<app>:<n>` follows (dashboards scan for it).
    public var shardPrefix: String { "{\(prefix)}:shard:" }
    public func shard(app: String, shard: Int) -> String { "\(shardPrefix)\(app):\(shard)" }
    /// Marker of a batch's counters update (and of a publish batch).
    public func batch(_ id: String) -> String { "{\(prefix)}:batch:\(id)" }
    /// The dedup layout the records were written with (``DedupLayout/stored``), checked at start.
    public var dedupLayout: String { "{\(prefix)}:dedup:layout" }
    /// Campaign control (design §2.10): campaign id → its state (``CampaignControlState/stored``).
    public var control: String { "{\(prefix)}:control" }
    /// The control state's version: incremented by every change of ``control``.
    public var controlVersion: String { "{\(prefix)}:control:version" }
    /// Which control version each `run` process has applied: lease owner → version.
    public var controlSeen: String { "{\(prefix)}:control:seen" }
    /// The campaigns with held jobs (a set), so the release loop finds them without a scan.
    public var deferredCampaigns: String { "{\(prefix)}:deferred" }
    /// A campaign's held jobs as versions before the held slots kept them, in one sorted set of this slot:
    /// still released (and emptied), never written.
    public func legacyDeferred(campaign: String) -> String { "{\(prefix)}:deferred:\(campaign)" }
    /// A paced campaign's next free slot (epoch µs): its shared virtual clock (design §2.13).
    public func pace(campaign: String) -> String { "{\(prefix)}:pace:\(campaign)" }
    /// The lock of the one process moving a campaign's due jobs back to the jobs topic.
    public func deferredLock(campaign: String) -> String { "{\(prefix)}:deferred-lock:\(campaign)" }
    /// The key `run` signs the jobs it releases at their pacing slot with (hex), made by the first `run`.
    public var releaseKey: String { "{\(prefix)}:release-key" }

    // MARK: Held jobs: tags `{<p>:held:<n>}`

    /// How many hash tags (so Redis Cluster slots) held jobs spread over. Fixed: it is in the key names.
    public static let heldShards = 16

    /// `{<p>:held:<n>}`: the hash tag of the held jobs of shard n (of every campaign).
    public func heldTag(shard: Int) -> String { "{\(prefix):held:\(shard)}" }
    /// A campaign's held jobs in shard n (a sorted set): the messages, scored by when they are due (epoch ms).
    public func held(shard: Int, name: String) -> String { heldTag(shard: shard) + ":jobs:" + name }
    /// The bytes each campaign holds in shard n (a hash): campaign → `<bytes> <epoch ms of its last hold>`.
    public func heldBytes(shard: Int) -> String { heldTag(shard: shard) + ":bytes" }

    /// The shard of a held message (`<Kafka key> NUL <value>`, ``DeferredMessage/member(key:value:)``):
    /// FNV-1a 32 of its key (of the whole message when it has none) mod ``heldShards``, so one token's
    /// jobs stay in one shard, in order. Persisted through the key names: it must never change.
    public static func heldShard(message: [UInt8]) -> Int {
        let end = message.firstIndex(of: 0) ?? message.count
        return end == 0 ? heldShard(fnv(message[...])) : heldShard(fnv(message[..<end]))
    }

    /// ``heldShard(message:)`` of the message a Kafka key and value are held as.
    public static func heldShard(key: [UInt8]?, value: [UInt8]) -> Int {
        if let key, !key.isEmpty { return heldShard(fnv(key[...])) }
        return heldShard(fnv(value[...], from: fnv([UInt8(0)][...])))
    }

    private static func heldShard(_ hash: UInt32) -> Int { Int(hash % UInt32(heldShards)) }

    private static func fnv(_ bytes: ArraySlice<UInt8>, from start: UInt32 = 0x811c_9dc5) -> UInt32 {
        var hash = start
        for byte in bytes { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        return hash
    }

    // MARK: Per token: tag `{<p>:<app>:<n>}`

    /// The token bucket of a token (hex, any case): FNV-1a 32 of its lower-case hex (``tokenHash(hex:)``)
    /// mod ``tokenBuckets``. Persisted through the key names: it must never change (a different one would
    /// hide every stored suppression, registration and dedup record).
    public func tokenBucket(_ hex: String) -> Int { tokenBucket(hash: Self.tokenHash(hex: hex)) }

    /// The token bucket of a token whose ``tokenHash(hex:)`` is `hash`.
    public func tokenBucket(hash: UInt32) -> Int { Int(hash % UInt32(tokenBuckets)) }

    /// FNV-1a 32 of a token's lower-case hex (`hex` in any case): the token's bucket before the modulo,
    /// independent of ``tokenBuckets``, so it can be computed where the token is (an outcome) and
    /// reduced where the keys are.
    public static func tokenHash(hex: String) -> UInt32 {
        // Over the UTF-8 in place (a native string's own): iterating `utf8` by index cost as much as
        // the hash.
        var hex = hex
        return hex.withUTF8 { tokenHash(hexBytes: UnsafeRawBufferPointer($0)) }
    }

    /// ``tokenHash(hex:)`` of hex given as bytes (any case): for hex written into a buffer from a
    /// token's bytes (`DeviceToken.writeHex`), with no String made for it.
    public static func tokenHash(hexBytes: UnsafeRawBufferPointer) -> UInt32 {
        var hash: UInt32 = 0x811c_9dc5
        for byte in hexBytes {
            let lower = byte &- UInt8(ascii: "A") < 26 ? byte | 0x20 : byte
            hash = (hash ^ UInt32(lower)) &* 0x0100_0193
        }
        return hash
    }

    /// The hash tag of the keys of tokens of bucket n of `app`: `{<p>:<app>:<n>}`, or with spread tags
    /// `{<p>:<app>:<n>:<s>}` (``TokenTags``).
    public func tokenTag(app: String, bucket: Int) -> String {
        guard let spreadTagTable else { return "{\(prefix):\(app):\(bucket)}" }
        return spreadTagTable.tag(prefix: prefix, app: app, bucket: bucket, buckets: tokenBuckets)
    }

    /// Equal slices of the slot space spread tags are put in: one per bucket up to 128 (at most ~128
    /// tries to find a tag's number, once per app and bucket).
    public static func spreadSlices(buckets: Int) -> Int { min(max(1, buckets), 128) }

    /// The spread tag of bucket n of `app` (``TokenTags/spread``).
    static func spreadTag(prefix: String, app: String, bucket: Int, buckets: Int) -> String {
        let slices = spreadSlices(buckets: buckets)
        let slice = bucket % slices
        let slots = (RedisSlot.count * slice / slices)..<(RedisSlot.count * (slice + 1) / slices)
        // A slice is ≥ 128 slots of 16 384, so ~128 tries find one; the bound only makes the loop finite
        // (a name that never lands keeps number 0: still a valid, fixed tag).
        for number in 0..<1_000_000 {
            let content = "\(prefix):\(app):\(bucket):\(number)"
            if slots.contains(Int(RedisSlot.crc16(content) & 0x3FFF)) { return "{\(content)}" }
        }
        return "{\(prefix):\(app):\(bucket):0}"
    }
    public func tokenTag(app: String, tokenHex: String) -> String { tokenTag(app: app, bucket: tokenBucket(tokenHex)) }
    /// Every token tag of `app`, one per token bucket: to read all of an app's suppressions, say.
    public func tokenTags(app: String) -> [String] { (0..<tokenBuckets).map { tokenTag(app: app, bucket: $0) } }

    public func suppressed(tag: String) -> String { tag + ":suppressed" }
    public func registered(tag: String) -> String { tag + ":registered" }
    public func language(tag: String) -> String { tag + ":lang" }
    /// The recipient profiles of the tag's tokens (the audience rules', design §2.14): a hash, token hex →
    /// `<time zone>\n<user>` (either part may be empty), from the newest registration that named one.
    /// The gate reads it in its call when a rule needs who or where a recipient is.
    public func profile(tag: String) -> String { tag + ":profile" }
    /// A recipient's sends counted by the frequency caps (design §2.15): a sorted set, job fingerprint →
    /// epoch ms of its send. `recipient` is `u:<user>` or `t:<token hex>`; a campaign's own cap counts in
    /// `…:cap:<recipient>:c:<campaign>`. The tag is ``tokenTag(app:tokenHex:)`` of the recipient string,
    /// so recipients spread over the token slots like tokens.
    public func frequencyCap(tag: String, recipient: String, campaign: String? = nil) -> String {
        let base = tag + ":cap:" + recipient
        return campaign.map { base + ":c:" + $0 } ?? base
    }
    /// The recipient's jobs a cap refused (`capped`), job fingerprint → when: what `job status` reads. A
    /// sorted set trimmed and expiring like the recipient's counted sends.
    public func frequencyCapRefused(tag: String, recipient: String) -> String { tag + ":capped:" + recipient }
    /// The tag's jobs quiet hours dropped (`quiet`, design §2.16), job fingerprint → when: what `job status`
    /// reads. A sorted set trimmed to the dedup retention at each write and expiring after it.
    public func quietDropped(tag: String) -> String { tag + ":quiet" }
    /// The leases of the tag's jobs in flight: a hash, job fingerprint (``JobFingerprint/member``) →
    /// `<owner>/<gate call>/<expiry, epoch ms of the server's clock>`.
    public func inFlight(tag: String) -> String { tag + ":inflight" }
    public func dedup(tag: String, bucket: Int64, subBucket: Int) -> String { "\(tag):dedup:\(bucket):\(subBucket)" }
    /// A `SCAN MATCH` pattern for every dedup set (of every app, token bucket and time bucket); not
    /// ``dedupLayout``, whose tag has no `:`.
    public var dedupKeyPattern: String {
        let glob = Set("*?[]\\")
        let escaped = prefix.map { glob.contains($0) ? "\\\($0)" : String($0) }.joined()
        return "{\(escaped):*}:dedup:*"
    }
    public func batch(tag: String, _ id: String) -> String { tag + ":batch:" + id }

    /// The suppressions of the token `tokenHex` of `app` (and those of the other tokens of its bucket).
    public func suppressed(app: String, tokenHex: String) -> String { suppressed(tag: tokenTag(app: app, tokenHex: tokenHex)) }
    public func registered(app: String, tokenHex: String) -> String { registered(tag: tokenTag(app: app, tokenHex: tokenHex)) }
    public func language(app: String, tokenHex: String) -> String { language(tag: tokenTag(app: app, tokenHex: tokenHex)) }
    public func profile(app: String, tokenHex: String) -> String { profile(tag: tokenTag(app: app, tokenHex: tokenHex)) }
    /// The lease hash holding the lease of a job of this token (a job id always comes with its token: the
    /// lease lives in the token's tag, field ``JobFingerprint/member`` of the job id).
    public func inFlight(app: String, tokenHex: String) -> String { inFlight(tag: tokenTag(app: app, tokenHex: tokenHex)) }

    // MARK: Heartbeats (no tag) and the written marks tagged with them

    /// `<p>:owner:`; the owner id follows.
    public var ownerPrefix: String { "\(prefix):owner:" }
    public func owner(_ id: String) -> String { ownerPrefix + id }
    /// The mark that gate call `call` of `owner` was handed to the transports (design §2.4): only such a
    /// batch's jobs may have reached a device when its process died. Tagged with the owner's heartbeat
    /// key, so both are in one slot: the mark is set only while the heartbeat the call was gated under
    /// still lives (``Scripts/markWritten``), and the marks spread over the slots with their owners.
    public func written(owner: String, call: String) -> String { "{" + self.owner(owner) + "}:written:" + call }
    /// Where versions before the heartbeat fence kept the mark of `<owner>/<call>` (one slot for all):
    /// read by a take-over when the new key is missing, so a rolling upgrade still counts what an older
    /// process wrote.
    public func legacyWritten(_ holder: String) -> String { "{\(prefix)}:written:" + holder }

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

/// The dedup fingerprint of a job id: a 64-bit hash stored as a set member, plus independent bits that
/// pick the sub-bucket, so a false "already sent" needs ~64 + log2(sub-buckets) bits to collide.
///
/// FNV-1a 64 with a murmur3 finaliser (for avalanche): tiny, dependency-free and stable across processes,
/// platforms and releases. It must never change: a different hash would make every stored record
/// unfindable and let redelivered jobs through for one TTL.
public struct JobFingerprint: Sendable, Hashable {
    /// Stored as the decimal text of this Int64, which Redis keeps as 8 raw bytes in an intset.
    public let member: Int64
    /// The sub-bucket's bits (``subBucket(of:)``).
    public let spread: UInt64

    public init(jobID: String) {
        // Over the UTF-8 in place; the values are pinned by `ClientTests.fingerprintsAndTokenBucketsNeverChange`.
        var id = jobID
        self = id.withUTF8 { Self(jobIDBytes: UnsafeRawBufferPointer($0)) }
    }

    /// The fingerprint of the job id whose UTF-8 is `jobIDBytes`: the same as ``init(jobID:)`` of that
    /// text. For ids lent as bytes (a campaign job's `<campaign>:<token hex>` is made in a buffer for the
    /// call, never as a String).
    public init(jobIDBytes: UnsafeRawBufferPointer) {
        // FNV-1a 64 twice, from two offset bases: the member's bits and the sub-bucket's.
        var a: UInt64 = 0xcbf2_9ce4_8422_2325
        var b: UInt64 = 0xcbf2_9ce4_8422_2325 ^ 0x9e37_79b9_7f4a_7c15
        for byte in jobIDBytes {
            a = (a ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            b = (b ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        member = Int64(bitPattern: Self.mix(a))
        spread = Self.mix(b)
    }

    /// A fingerprint computed before (``member`` and ``spread`` of one), carried with its job.
    public init(member: Int64, spread: UInt64) {
        self.member = member
        self.spread = spread
    }

    public func subBucket(of count: Int) -> Int { Int(spread % UInt64(max(1, count))) }

    private static func mix(_ value: UInt64) -> UInt64 {
        var k = value
        k ^= k >> 33
        k &*= 0xff51_afd7_ed55_8ccd
        k ^= k >> 33
        k &*= 0xc4ce_b9fe_1a85_ec53
        k ^= k >> 33
        return k
    }
}

/// Each app's spread tags (``RedisKeys/TokenTags/spread``), found once: a tag is looked up per group of a
/// batch, and finding it takes up to ~128 CRC16s.
final class SpreadTagTable: Sendable {
    private let tags = Mutex<[String: [String]]>([:])

    func tag(prefix: String, app: String, bucket: Int, buckets: Int) -> String {
        if let known = tags.withLock({ $0[app] }) { return known[bucket] }
        let made = (0..<buckets).map { RedisKeys.spreadTag(prefix: prefix, app: app, bucket: $0, buckets: buckets) }
        // Bounded: the apps are the configured ones, but a caller could name any.
        tags.withLock { if $0.count < 4096 { $0[app] = made } }
        return made[bucket]
    }
}
