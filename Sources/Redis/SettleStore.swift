import Synchronization

/// The settle's role of the store (``PipelineStore/settle(_:)``): a batch's outcomes become dedup records,
/// lease releases, suppressions (the token tags' parts, ``TagWrites``) and counters (``CounterWrites``);
/// also the counters written outside a batch and the tag writes of registrations and suppressions
/// (``RegistrationStore``). Gives dedup sets their expiry once per process and minute (``DedupExpiries``).
struct SettleStore: StoreRole {
    let runner: StoreRunner
    let dedupSetNames: DedupSetNames
    let dedupExpiries: DedupExpiries
    let markExpiries: MarkExpiries
    let overflowWarning: OnceFlag

    /// The counter field of a broadcast's outcome (design §4.1): `broadcast:accepted`, `broadcast:deduped`, ….
    static func broadcastField(_ kind: SettledOutcomeKind) -> String {
        switch kind {
        case .accepted: "broadcast:accepted"
        case .rejected: "broadcast:rejected"
        case .suppressed: "broadcast:suppressed"
        case .deduped: "broadcast:deduped"
        case .deadLettered: "broadcast:dead_lettered"
        case .cancelled: "broadcast:cancelled"
        case .deferred: "broadcast:deferred"
        case .capped: "broadcast:capped"
        case .quiet: "broadcast:quiet"
        case .heldOut: "broadcast:held_out"
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
    func settle(_ batch: SettleBatch) async throws -> Bool {
        try await settle(batch, partsOnly: false)
    }

    /// `partsOnly`: run the token tags' parts and stop, as a process that crashed between them and the
    /// counters would (for tests of the replay).
    func settle(_ batch: SettleBatch, partsOnly: Bool) async throws -> Bool {
        var plan = SettlePlan(self, batch: batch)
        // Each outcome is read in place (borrowed from the batch's storage): `for outcome in` copied it
        // out, a retain and a release of each of its references per job (~1 % of `run`).
        batch.outcomes.withUnsafeBufferPointer { outcomes in
            for index in outcomes.indices { plan.include(outcomes[index]) }
        }
        plan.countTotals(of: batch)
        if plan.counters.touches(plan.minuteKey) {
            plan.counters.expire(plan.minuteKey, seconds: configuration.minuteBucketRetention.components.seconds)
        }
        plan.counters.countedTTL = jobMarkRetention
        let refreshed = refreshCampaignExpiries(&plan.counters, campaigns: plan.campaigns(of: batch), now: batch.settledAt)
        let applied: Bool
        if !configuration.oneSlotPerCall && !partsOnly {
            applied = try await writeInOneCall(plan)
        } else {
            guard let countersApplied = try await writeByParts(plan, partsOnly: partsOnly) else { return false }
            applied = countersApplied
        }
        if applied { for campaign in refreshed { markExpiries.markGiven(campaign: campaign, sets: [MarkExpiries.hashSet]) } }
        return noteApplied(applied, operation: "settle")
    }

    /// Campaign hashes live jobMarkRetention after their last activity: given their expiry once per
    /// process and minute (a minute longer), like the mark sets, not per batch (they never expired).
    /// Returns the campaigns given it, to note once the counters are applied.
    private func refreshCampaignExpiries(_ counters: inout CounterWrites, campaigns: Set<String>, now: Int64) -> [String] {
        var refreshed: [String] = []
        for campaign in campaigns where !markExpiries.isGiven(campaign: campaign, set: MarkExpiries.hashSet, now: now) {
            counters.expire(keys.campaign(campaign), seconds: jobMarkRetention + MarkExpiries.memory)
            refreshed.append(campaign)
        }
        return refreshed
    }

    /// A single Redis: the tags' parts and the counters in one script, one round trip; the same key
    /// lists as ``writeByParts(_:partsOnly:)``, after the counters' marker. Returns whether the counters
    /// were applied (not a replay).
    ///
    /// The script is atomic, so the batch's one marker (the counters') says whether it ran: a replay finds
    /// it first and writes nothing, and the tag parts need no markers of their own (two commands and a
    /// key to expire per token tag and batch: ~0.1 `redis.call` per job).
    private func writeInOneCall(_ plan: SettlePlan) async throws -> Bool {
        let countersCall = plan.counters.call(markerTTL: configuration.batchMarkerRetention.components.seconds, resolved: nil)
        guard let marker = plan.counters.marker else { throw RedisError.unexpectedReply("settle: a batch without a marker") }
        let groups = plan.parts.map { $0.group(markerTTL: configuration.partMarkerRetention.components.seconds, partMarker: false) }
        var header = RedisArguments()
        header.append(configuration.partMarkerRetention.components.seconds)
        header.append(groups.count)
        var keyList = RedisArguments([marker])
        for group in groups {
            keyList.append(contentsOf: group.keys)
            header.append(contentsOf: group.arguments)
        }
        for key in countersCall.keys { keyList.append(key) }
        header.append(contentsOf: countersCall.arguments)
        let reply = try await eval(Scripts.settle, keys: keyList, arguments: header)
        guard let both = reply.array, both.count == 2, let applied = both[1].integer else {
            throw RedisError.unexpectedReply("settle: \(reply)")
        }
        if applied == 0 { return false }
        guard let tagReplies = both[0].array ?? (groups.isEmpty ? [] : nil), tagReplies.count == groups.count else {
            throw RedisError.unexpectedReply("settle: \(reply)")
        }
        _ = try tagResults(tagReplies)
        markExpiries(plan.parts)
        return true
    }

    /// Redis Cluster: each token slot's part, then the counters with the parts' results. nil when
    /// `partsOnly` stopped before the counters.
    private func writeByParts(_ plan: SettlePlan, partsOnly: Bool) async throws -> Bool? {
        let groups = plan.parts.map { $0.group(markerTTL: configuration.partMarkerRetention.components.seconds) }
        var header = RedisArguments()
        header.append(configuration.partMarkerRetention.components.seconds)
        let flags = try tagResults(try await run(Scripts.tagWrites, header: header, groups: groups))
        markExpiries(plan.parts)
        if partsOnly { return nil }
        let countersCall = plan.counters.call(markerTTL: configuration.batchMarkerRetention.components.seconds, resolved: flags)
        let reply = try await eval(Scripts.counters, keys: countersCall.keys, arguments: countersCall.arguments)
        guard let applied = reply.integer else { throw RedisError.unexpectedReply("settle counters: \(reply)") }
        return applied == 1
    }

    /// Notes the dedup sets whose expiry the parts just set (a replayed part set none, but its sets got
    /// theirs when it first ran).
    func markExpiries(_ parts: [TagWrites]) {
        dedupExpiries.markGiven(parts.flatMap(\.expiringSets))
    }

    /// The flags of the tag parts' replies (`{ flags, sampled set size }` each); warns once about dedup
    /// sets past the intset size.
    func tagResults(_ replies: [RedisReply]) throws -> [[UInt8]] {
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

    func applyTagWrites(_ parts: [TagWrites]) async throws {
        var header = RedisArguments()
        header.append(configuration.partMarkerRetention.components.seconds)
        _ = try tagResults(try await run(Scripts.tagWrites, header: header, groups: parts.map { $0.group(markerTTL: 0) }))
    }

    // MARK: Counters outside a batch

    /// Adds to counters of the totals and of the current minute (not exactly once: for events counted
    /// outside a settle batch, such as failed dead-letter writes).
    func increment(_ field: CounterField, by delta: Int64, now: Int64 = PipelineStore.epochNow()) async throws {
        guard delta != 0 else { return }
        var counters = CounterWrites(marker: nil)
        let minuteKey = keys.stats(minuteOf: now)
        counters.increment(keys.stats, field.rawValue, delta)
        counters.increment(minuteKey, field.rawValue, delta)
        counters.expire(minuteKey, seconds: configuration.minuteBucketRetention.components.seconds)
        try await applyCounters(counters, operation: "increment")
    }

    /// Writes a shard's connection state (idempotent).
    func updateShard(_ status: ShardStatus) async throws {
        var counters = CounterWrites(marker: nil)
        let key = keys.shard(app: status.app, shard: status.shard)
        counters.set(key, "state", status.state)
        if let gateway = status.gateway { counters.set(key, "gateway", gateway) }
        if let since = status.connectedSince { counters.set(key, "connected_since", String(since)) }
        if let error = status.lastError { counters.set(key, "last_error", error) }
        try await applyCounters(counters, operation: "shard")
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

/// A settle batch's writes, gathered from its outcomes: the token tags' parts (dedup records, lease
/// releases, suppressions) and the counters. Pure: no I/O.
struct SettlePlan {
    let keys: RedisKeys
    let minuteKey: String
    var counters: CounterWrites
    /// Parts by token tag, in first-seen order.
    private(set) var parts: [TagWrites] = []
    private var partIDs: [TagID] = []
    /// The per-job counters are summed here and written once per field and campaign (CounterWrites hashes
    /// each key and field it is given: three keys per outcome made that a few percent of `run`).
    private var tally = OutcomeTally()
    private var seenInBatch: Set<CampaignJob>
    private let settledAt: Int64
    private let batchID: String
    private let dedupBucket: Int64
    private let dedupExpiry: Int64
    private let subBuckets: Int
    private let dedupSetNames: DedupSetNames
    private let dedupExpiries: DedupExpiries
    /// The adds a tag is expected to get (the batch spread over the tags, with room to spare): its
    /// arguments are reserved once, not grown job by job.
    private let addsPerTag: Int

    private struct CampaignJob: Hashable {
        var campaign: Int
        var member: Int64
    }

    init(_ store: SettleStore, batch: SettleBatch) {
        // Read once per call from the shared runner, not through the role's accessor per job.
        keys = store.runner.keys
        counters = CounterWrites(marker: keys.batch(batch.id))
        minuteKey = keys.stats(minuteOf: batch.settledAt)
        settledAt = batch.settledAt
        batchID = batch.id
        let width = max(1, store.configuration.dedupBucketWidth.components.seconds)
        dedupBucket = StoreRunner.floorDivide(batch.settledAt, width)
        dedupExpiry = (dedupBucket + 1) * width + store.configuration.dedupRetention.components.seconds
        subBuckets = store.configuration.dedupSubBucketsPerTag
        dedupSetNames = store.dedupSetNames
        dedupExpiries = store.dedupExpiries
        seenInBatch = Set(minimumCapacity: batch.outcomes.count)
        addsPerTag = batch.outcomes.count * 5 / (4 * max(1, keys.tokenBuckets)) + 4
    }

    /// Adds `field` to the totals, the minute's bucket and the campaign's hash.
    mutating func count(_ field: String, _ delta: Int64, campaign: String? = nil) {
        guard delta != 0 else { return }
        counters.increment(keys.stats, field, delta)
        counters.increment(minuteKey, field, delta)
        if let campaign { counters.increment(keys.campaign(campaign), field, delta) }
    }

    /// The part of the token tag of (`app`, `tokenHash`). A batch touches a few dozen tags: a scan
    /// comparing the bucket first is cheaper than hashing the app's name per job.
    private mutating func part(app: String, tokenHash: UInt32) -> Int {
        let bucket = keys.tokenBucket(hash: tokenHash)
        if let known = partIDs.firstIndex(where: { $0.bucket == bucket && $0.app == app }) { return known }
        let tag = keys.tokenTag(app: app, bucket: bucket)
        parts.append(
            TagWrites(
                keys: keys, tag: tag, marker: batchID, expireAt: dedupExpiry, dedupSets: dedupSetNames.table(tag: tag, bucket: dedupBucket),
                expectedAdds: addsPerTag))
        partIDs.append(TagID(app: app, bucket: bucket))
        return parts.count - 1
    }

    /// One outcome's counts and writes.
    mutating func include(_ outcome: borrowing SettledOutcome) {
        let campaignIndex = tally.campaign(outcome.campaign)
        tally.count(outcome.kind.rawValue, campaign: campaignIndex)
        if let code = outcome.code { tally.count("rejected:\(code)", campaign: campaignIndex) }
        if outcome.isBroadcast { tally.count(SettleStore.broadcastField(outcome.kind), campaign: campaignIndex) }
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
            let add = parts[p].add(subBucket: fingerprint.subBucket(of: subBuckets), member: fingerprint.member) {
                [dedupExpiries, settledAt] in
                !dedupExpiries.isGiven($0, now: settledAt)
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
        // The hex is there (SettledOutcome's init requires it with a suppression).
        if let suppression = outcome.suppressToken, let tokenHex = outcome.tokenHex {
            parts[p].suppress(tokenHex: tokenHex, at: suppression.since ?? settledAt, reason: suppression.reason)
        }
    }

    /// The tallied outcomes and the batch's events, counted.
    mutating func countTotals(of batch: SettleBatch) {
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
    }

    /// The campaigns whose hashes this batch writes.
    func campaigns(of batch: SettleBatch) -> Set<String> {
        Set(tally.campaigns.compactMap { $0 }).union(batch.campaignEvents.keys)
    }
}
