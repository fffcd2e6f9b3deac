import Foundation

/// What fixes the key of a job's dedup record (design §4.2): the time bucket's width, the sub-buckets
/// and the token buckets. A record written under one layout is not found under another, so a changed
/// setting would let every job accepted within the retention through again, silently. The first `run`
/// records its layout in `{<p>}:dedup:layout`; every later one checks its configuration against it
/// before its first gate (``PipelineStore/verifyDedupLayout(now:)``) and refuses to start on a mismatch.
public struct DedupLayout: Sendable, Hashable, CustomStringConvertible {
    public var bucketSeconds: Int64
    /// Per app, as configured (`redis.dedup_sub_buckets`); split over the token buckets.
    public var subBuckets: Int
    public var tokenBuckets: Int
    public var tokenTags: RedisKeys.TokenTags

    public init(bucketSeconds: Int64, subBuckets: Int, tokenBuckets: Int, tokenTags: RedisKeys.TokenTags = .plain) {
        self.bucketSeconds = max(1, bucketSeconds)
        self.subBuckets = max(1, subBuckets)
        self.tokenBuckets = max(1, tokenBuckets)
        self.tokenTags = tokenTags
    }

    public init(_ configuration: PipelineStoreConfiguration) {
        self.init(
            bucketSeconds: configuration.dedupBucketWidth.components.seconds, subBuckets: configuration.dedupSubBuckets,
            tokenBuckets: configuration.tokenBuckets, tokenTags: configuration.tokenTags)
    }

    /// The value of `{<p>}:dedup:layout`. Plain token tags are not named: a layout recorded before they
    /// could be spread has them.
    public var stored: String {
        let tags = tokenTags == .plain ? "" : " token_tags=\(tokenTags.rawValue)"
        return "bucket_s=\(bucketSeconds) sub_buckets=\(subBuckets) token_buckets=\(tokenBuckets)\(tags)"
    }

    /// Reads ``stored``; `nil` when a field is missing, a number not positive or the token tags unknown.
    public init?(stored: String) {
        var fields: [Substring: Int64] = [:]
        var tags = RedisKeys.TokenTags.plain
        for word in stored.split(separator: " ") {
            let parts = word.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            if parts[0] == "token_tags" {
                guard let named = RedisKeys.TokenTags(rawValue: String(parts[1])) else { return nil }
                tags = named
                continue
            }
            guard let value = Int64(parts[1]), value > 0 else { return nil }
            fields[parts[0]] = value
        }
        guard let bucket = fields["bucket_s"], let subs = fields["sub_buckets"], let tokens = fields["token_buckets"],
            subs <= Int64(Int32.max), tokens <= Int64(Int32.max)
        else { return nil }
        self.init(bucketSeconds: bucket, subBuckets: Int(subs), tokenBuckets: Int(tokens), tokenTags: tags)
    }

    var subBucketsPerTag: Int { max(1, subBuckets / tokenBuckets) }

    /// Whether a record written under `other` has the same key under this layout (`dedup_sub_buckets`
    /// 4096 and 4100 both give 256 sets per token tag of 16).
    public func findsRecords(of other: DedupLayout) -> Bool {
        bucketSeconds == other.bucketSeconds && tokenBuckets == other.tokenBuckets && subBucketsPerTag == other.subBucketsPerTag
            && tokenTags == other.tokenTags
    }

    /// As the pipeline file's keys.
    public var description: String {
        let width = bucketSeconds % 3600 == 0 ? "redis.dedup_bucket_hours: \(bucketSeconds / 3600)" : "a bucket width of \(bucketSeconds) s"
        return
            "\(width), redis.dedup_sub_buckets: \(subBuckets), redis.token_buckets: \(tokenBuckets), redis.token_tags: \(tokenTags.rawValue)"
    }
}

/// The configuration would not find the dedup records Redis holds, or that could not be checked
/// (``PipelineStore/verifyDedupLayout(now:)``): a configuration error, reported at start with what to set.
public struct DedupLayoutMismatch: Error, Sendable, CustomStringConvertible {
    public let description: String
}

/// How ``PipelineStore/verifyDedupLayout(now:)`` found Redis.
public enum DedupLayoutCheck: Sendable, Equatable {
    /// The recorded layout is this configuration's.
    case matched
    /// None was recorded: this configuration's is now. `existingRecords`: dedup keys written before the
    /// record existed were found, and their names fit it.
    case recorded(existingRecords: Bool)
}

extension PipelineStore {
    /// Checks, before the first gate, that this configuration finds the dedup records Redis holds: the
    /// layout recorded in `{<p>}:dedup:layout` must be this one; with none recorded, the names of a sample
    /// of existing dedup keys (a version before the record, or a cleared key) must fit it, and this layout
    /// is recorded (`SET NX`: of two processes starting at once, one records and the other compares).
    /// Throws ``DedupLayoutMismatch`` saying which keys to set. The sample catches a changed bucket width
    /// or token-bucket count, and a sub-bucket count that shrank; one that grew cannot be told from names.
    @discardableResult
    public func verifyDedupLayout(now: Int64 = PipelineStore.epochNow()) async throws -> DedupLayoutCheck {
        let mine = DedupLayout(configuration)
        let key = keys.dedupLayout
        let overrideHint =
            "To start a new layout instead, stop every `run` and, between campaigns, set it: "
            + "redis-cli SET '\(key)' '\(mine.stored)' (a job re-published within redis.dedup_ttl_hours of the change may then be sent twice)."
        if let stored = try await command(RedisCommand("GET", key)).string {
            guard let theirs = DedupLayout(stored: stored) else {
                throw DedupLayoutMismatch(
                    description:
                        "Redis (\(client.redactedDescription)): \(key) holds '\(stored)', not a dedup layout (expected '\(mine.stored)'). \(overrideHint)"
                )
            }
            if mine.findsRecords(of: theirs) { return .matched }
            throw DedupLayoutMismatch(
                description: "Redis (\(client.redactedDescription)) holds dedup records written with \(theirs) (recorded in \(key)); "
                    + "this configuration has \(mine), under which they would not be found. Set those keys in the pipeline file to the recorded values. "
                    + overrideHint)
        }
        let sample: [String]
        do {
            sample = try await dedupKeySample(limit: 200)
        } catch RedisError.server(let message) {
            // An ACL without SCAN (`NOPERM`): say what to allow, or how to vouch for the records by hand.
            throw DedupLayoutMismatch(
                description: "Redis (\(client.redactedDescription)) refused SCAN (\(message)), which `run` uses once, before "
                    + "recording the dedup layout in \(key), to check that existing dedup records fit this configuration "
                    + "(\(mine)). Allow SCAN for this user (the dashboard needs it too), or record the layout by hand if the "
                    + "records were written with these values: redis-cli SET '\(key)' '\(mine.stored)'.")
        }
        for name in sample {
            if let misfit = misfit(dedupKey: name, layout: mine, now: now) {
                throw DedupLayoutMismatch(
                    description: "Redis (\(client.redactedDescription)) holds dedup records written before their layout was recorded, "
                        + "and their names do not fit this configuration (\(mine)): \(name) \(misfit). Versions before this "
                        + "record defaulted to redis.dedup_bucket_hours: 12 and redis.dedup_sub_buckets: 4096: set the values the records "
                        + "were written with. \(overrideHint)")
            }
        }
        let set = try await command(RedisCommand("SET", key, mine.stored, "NX"))
        if set.isNull { return try await verifyDedupLayout(now: now) }
        logger.info(
            "recorded the dedup layout", metadata: ["redis.dedup_layout": "\(mine.stored)", "redis.dedup_keys_sampled": "\(sample.count)"])
        return .recorded(existingRecords: !sample.isEmpty)
    }

    /// Why the dedup key `name` cannot have been written under `layout` (nil: it may have been).
    func misfit(dedupKey name: String, layout: DedupLayout, now: Int64) -> String? {
        // `{<p>:<app>:<n>}:dedup:<bucket>:<sub>`
        guard let close = name.range(of: "}:dedup:", options: .backwards) else { return nil }
        let tag = name[name.startIndex..<close.lowerBound]
        let rest = name[close.upperBound...].split(separator: ":")
        guard rest.count == 2, let bucket = Int64(rest[0]), let sub = Int(rest[1]) else { return nil }
        let spreadBucket = self.spreadBucket(ofTag: tag, layout: layout)
        let tokenBucket: Int
        switch layout.tokenTags {
        case .plain:
            if spreadBucket != nil { return "has a token tag of redis.token_tags: spread, not plain" }
            // `{<p>:<app>:<n>`: the last part is the bucket.
            guard let last = tag.split(separator: ":").last, let bucket = Int(last), bucket >= 0 else { return nil }
            tokenBucket = bucket
        case .spread:
            guard let bucket = spreadBucket else {
                return "has a token tag that redis.token_tags: spread with redis.token_buckets: \(layout.tokenBuckets) does not make "
                    + "(written with plain token tags, or another bucket count)"
            }
            tokenBucket = bucket
        }
        if tokenBucket >= layout.tokenBuckets {
            return "is in token bucket \(tokenBucket), so redis.token_buckets was more than \(layout.tokenBuckets)"
        }
        if sub >= layout.subBucketsPerTag {
            return "is sub-bucket \(sub) of its token bucket, so redis.dedup_sub_buckets was more than \(layout.subBuckets)"
        }
        // A live set's bucket B has B·width <= now (+ clock skew) and (B + 1)·width + retention >= now; the
        // lower bound is lenient (a retention shortened since), as a width changed by 2× is far outside.
        let width = layout.bucketSeconds
        let newest = Self.floorDivide(now + configuration.clockSkewAllowance.components.seconds, width)
        let oldest = Self.floorDivide(now - 2 * configuration.dedupRetention.components.seconds - 30 * 86_400, width)
        if bucket > newest || bucket < oldest {
            guard bucket > 0 else { return "has time bucket \(bucket), from another bucket width" }
            let hours = (Double(now) / (Double(bucket) + 0.5) / 3600).rounded()
            return "has time bucket \(bucket), which fits redis.dedup_bucket_hours: \(Int(hours)) rather than this width"
        }
        return nil
    }

    /// The bucket of a dedup key's tag (without its `}`) if it is a spread tag of `layout`'s bucket count
    /// (``RedisKeys/TokenTags/spread``: `{<p>:<app>:<n>:<s>`, s exactly the number that bucket's tag has).
    private func spreadBucket(ofTag tag: Substring, layout: DedupLayout) -> Int? {
        let parts = tag.dropFirst().split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count >= 4, let bucket = Int(parts[parts.count - 2]), (0..<layout.tokenBuckets).contains(bucket) else { return nil }
        // The store's own keys when they spell this layout (the usual case: their table of spread tags is
        // filled once); else keys for it, made per sampled name (at most 200, once, at start).
        let spread =
            keys.tokenTags == .spread && keys.tokenBuckets == layout.tokenBuckets
            ? keys : RedisKeys(prefix: keys.prefix, tokenBuckets: layout.tokenBuckets, tokenTags: .spread)
        return spread.tokenTag(app: String(parts[parts.count - 3]), bucket: bucket) == tag + "}" ? bucket : nil
    }

    /// Up to `limit` names of dedup keys (`SCAN`, never `KEYS`), from every primary of a cluster.
    func dedupKeySample(limit: Int) async throws -> [String] {
        let pattern = keys.dedupKeyPattern
        var names: [String] = []
        func scan(_ send: (RedisCommand) async throws -> RedisReply) async throws {
            var cursor = "0"
            repeat {
                let reply = try await send(RedisCommand("SCAN", cursor, "MATCH", pattern, "COUNT", "1000"))
                guard let parts = reply.array, parts.count == 2, let next = parts[0].string, let found = parts[1].array else {
                    throw RedisError.unexpectedReply("SCAN: \(reply)")
                }
                names += found.compactMap(\.string)
                cursor = next
            } while cursor != "0" && names.count < limit
        }
        if let cluster = client as? RedisCluster {
            for node in try await cluster.primaryNodes() where names.count < limit {
                try await scan { try await cluster.send($0, to: node) }
            }
        } else {
            try await scan { try await client.send($0) }
        }
        return Array(names.prefix(limit))
    }
}
