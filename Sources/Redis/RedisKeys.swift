/// The Redis key layout: the contract ops dashboards read (`docs/design.md §4.1`). Every key name the pipeline
/// writes is spelled here, and only here.
///
/// | key | type | content |
/// |---|---|---|
/// | `<p>:stats` | HASH | totals: ``CounterField`` fields and `rejected:<status>` |
/// | `<p>:stats:<yyyyMMddHHmm>` | HASH | the same per UTC minute; expires after a day |
/// | `<p>:campaign:<id>` | HASH | `published` + the outcome fields (per message); `jobs`, `jobs_settled`, `jobs_<outcome>` (per job), `job_mark_sets`, `publish_started_ms`, `publish_finished_ms` |
/// | `<p>:jobs:published:<id>:<sub>` | SET (intset) | fingerprints of the campaign's published job ids (`jobs`) |
/// | `<p>:jobs:counted:<id>` | SET | fingerprints of the campaign's jobs counted with an outcome other than accepted |
/// | `<p>:shard:<app>:<n>` | HASH | `state gateway connected_since sent replayed last_error` |
/// | `<p>:suppressed:<app>` | HASH | token hex → `<epoch>:<reason>` |
/// | `<p>:registered:<app>` | HASH | token hex → `<epoch>` |
/// | `<p>:lang:<app>` | HASH | token hex → language |
/// | `<p>:dedup:<bucket>:<sub>` | SET (intset) | 64-bit fingerprints of accepted job ids |
/// | `<p>:inflight:<job id>` | STRING | lease of a job between gate and settle (PX TTL): `<owner>/<gate call>` |
/// | `<p>:owner:<owner>` | STRING | heartbeat of a live `run` process (PX TTL, refreshed) |
/// | `<p>:batch:<id>` | STRING | marker of an applied settle batch (EX 1 h): exactly-once counting |
///
/// Token hex is stored lower-case.
public struct RedisKeys: Sendable, Hashable {
    /// A device token as it is stored in Redis (hash fields, script arguments): lower-case hex. The one
    /// place token hex is normalised on its way into Redis, whatever case a producer or Apple used.
    public static func tokenField(_ hex: String) -> String { hex.lowercased() }

    public let prefix: String

    /// The prefix when none is configured (`redis.prefix`): its one home; commands and the pipeline
    /// file read it from here.
    public static let defaultPrefix = "apns"

    public init(prefix: String = RedisKeys.defaultPrefix) {
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

/// The dedup fingerprint of a job id: a 64-bit hash stored as a set member, plus independent bits that
/// pick the sub-bucket, so a false "already sent" needs ~64 + log2(sub-buckets) bits to collide.
///
/// FNV-1a 64 with a murmur3 finaliser (for avalanche): tiny, dependency-free and stable across processes,
/// platforms and releases. It must never change: a different hash would make every stored record
/// unfindable and let redelivered jobs through for one TTL.
public struct JobFingerprint: Sendable, Hashable {
    /// Stored as the decimal text of this Int64, which Redis keeps as 8 raw bytes in an intset.
    public let member: Int64
    let spread: UInt64

    public init(jobID: String) {
        var a: UInt64 = 0xcbf2_9ce4_8422_2325
        var b: UInt64 = 0xcbf2_9ce4_8422_2325 ^ 0x9e37_79b9_7f4a_7c15
        for byte in jobID.utf8 {
            a = (a ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            b = (b ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        member = Int64(bitPattern: Self.mix(a))
        spread = Self.mix(b)
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
