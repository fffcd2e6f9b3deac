/// The arguments of the settle's scripts, built per job without Strings where they can.

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
/// registrations (with their languages and recipient profiles). Built per job without Strings where it
/// can: integers and token hex go straight into the argument bytes; a dedup key is made once per set and
/// batch.
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

    /// `expectedAdds`: room reserved for that many ``add(subBucket:member:expiring:)``s.
    init(
        keys: RedisKeys, tag: String, marker: String?, expireAt: Int64 = 0, dedupSets: DedupSetNames.Table? = nil, expectedAdds: Int = 0
    ) {
        self.keys = keys
        self.tag = tag
        self.marker = marker
        self.expireAt = expireAt
        self.dedupSets = dedupSets
        if let dedupSets, expectedAdds > 0 {
            addKeys.reserveCapacity(adding: expectedAdds, bytes: expectedAdds * dedupSets.nameBytes)
            addArguments.reserveCapacity(adding: expectedAdds, bytes: expectedAdds * 20)
        }
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

    /// `language` '' and `profile` '' keep the stored ones (``Registration/profile``: `<time zone>\n<user>`).
    mutating func register(tokenHex: String, at: Int64, language: String, profile: String) {
        registerArguments.append(lowercasingASCII: tokenHex)
        registerArguments.append(at)
        registerArguments.append(language)
        registerArguments.append(profile)
        registrations += 1
    }

    /// The group's keys and arguments. A settle part with nothing to replay-protect (no dedup record, no
    /// lease: only newest-wins suppressions) needs no marker.
    /// `partMarker`: under the part's own marker (a cluster's parts run in calls of their own; a single
    /// Redis runs the whole batch in one script, under the counters' marker alone).
    func group(markerTTL: Int64, partMarker: Bool = true) -> ScriptGroup {
        let marked = partMarker && marker != nil && (adds > 0 || releases > 0)
        var keyList = RedisArguments()
        keyList.reserveCapacity(adding: 6 + addKeys.count, bytes: 6 * (tag.utf8.count + 32) + addKeys.byteCount)
        if marked, let marker { keyList.append(keys.batch(tag: tag, marker)) }
        keyList.append(keys.suppressed(tag: tag))
        keyList.append(keys.registered(tag: tag))
        keyList.append(keys.language(tag: tag))
        keyList.append(keys.inFlight(tag: tag))
        if registrations > 0 { keyList.append(keys.profile(tag: tag)) }
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
                // One argument, `m1,m2,…`: the script reads them only when the campaign's counted set
                // exists (a job of it settled otherwise before); an argument per job cost the counters'
                // primary a Lua string per job on every batch.
                if !added.isEmpty { a.append(added.lazy.map { String($0.member) }.joined(separator: ",")) }
            } else {
                // The parts run in the same script: runs of add positions (group = part + 1), no argument per job.
                // Consecutive jobs are mostly of different parts (token tags), so a run grows per part: a
                // batch of one campaign is one run per part, where runs in job order were one per job (and
                // a Lua string.sub and gsub each: ~8 % of redis-server's CPU in ops/bench e2e).
                var ranges: [(group: Int, from: Int, to: Int)] = []
                var lastRange: [Int] = []  // part → its latest run in `ranges` (-1: none yet)
                for job in campaign.accepted {
                    if job.part >= lastRange.count { lastRange += repeatElement(-1, count: job.part + 1 - lastRange.count) }
                    let r = lastRange[job.part]
                    if r >= 0, ranges[r].to + 1 == job.add {
                        ranges[r].to = job.add
                    } else {
                        lastRange[job.part] = ranges.count
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
