/// What Redis knows of one job (`apns-pipeline job status`), read from the keys of the
/// job's token tag only: one round trip, no scan, plus one `EXISTS` of the lease holder's heartbeat when
/// a lease is held.
///
/// Redis keeps no record per job for what did not end accepted: a job rejected by Apple leaves its token
/// suppressed, a dead-lettered one is in the dead-letter topic, and either reads here as the token's
/// state or as ``State/notSeen``.
public struct JobStatus: Sendable, Equatable {
    public enum State: String, Sendable {
        /// A dedup record holds the id: Apple accepted it, settled within ``acceptedFrom``…``acceptedUntil``.
        case accepted
        /// A live lease of a live process holds it: between the gate and the settle now.
        case inFlight = "in-flight"
        /// Its token is suppressed (410 Unregistered, BadDeviceToken, the feedback service) and has not
        /// registered since: the gate will not send it.
        case suppressed
        /// None of the above, and its campaign is cancelled (`campaign cancel`, design §2.10): it is (or
        /// will be) settled `cancelled`, never sent.
        case cancelled
        /// None of the above, and its campaign is paused, scheduled for later or paced (design §2.11–§2.13):
        /// held in Redis until ``deferredUntil`` (nil: until `campaign resume`), or still in Kafka.
        case deferred
        /// None of the above, and a frequency cap of its recipient refused it (design §2.15): settled
        /// `capped` at ``cappedAtMs``, never sent (kept as long as the sends that capped it count).
        case capped
        /// None of the above, and its app's quiet hours dropped it (`action: drop`, design §2.16): settled
        /// `quiet` at ``quietAtMs``, never sent (kept for the dedup retention).
        case quiet
        /// None of the above, and its recipient is in its campaign's holdout group (`campaign publish
        /// --holdout`, design §2.18): it is (or will be) settled `held_out`, never sent.
        case heldOut = "held-out"
        /// None of the above: never gated, still in Kafka, dead-lettered, or its record expired.
        case notSeen = "not-seen"
    }

    public var state: State
    /// The dedup bucket holding its record (epoch seconds): its settle time lies in `[from, until)`.
    public var acceptedFrom: Int64?
    public var acceptedUntil: Int64?
    /// The in-flight lease on its id, live or lapsed, and whether its holder's heartbeat lives.
    public var lease: InFlightLease?
    public var leaseHolderAlive: Bool?
    /// The token's suppression (epoch seconds, reason) and newest registration, when Redis has them.
    public var suppressedAt: Int64?
    public var suppressedReason: String?
    public var registeredAt: Int64?
    /// Its campaign's control state, when the campaign was known (design §2.10).
    public var campaignControl: CampaignControlState?
    /// ``State/deferred`` by a scheduled start: not before this time (epoch ms).
    public var deferredUntilMs: Int64?
    /// Its token's registered profile (user, time zone), when a registration named one.
    public var profile: RecipientProfile?
    /// Sends to its recipient (its registered user, else its token) the frequency caps count now: the
    /// app's caps' and, with a campaign, that campaign's own (design §2.15). Nil when none.
    public var capCounted: Int64?
    public var campaignCapCounted: Int64?
    /// ``State/capped``: when (epoch ms).
    public var cappedAtMs: Int64?
    /// ``State/quiet``: when (epoch ms).
    public var quietAtMs: Int64?
    /// The token, lower-case hex (nil for a broadcast).
    var tokenHex: String?
}

extension PipelineStore {
    /// The state of job `jobID` for `app` and the token `tokenHex` (any case) at `now` (epoch seconds).
    /// `user`: the job's own `user`, when it named one (its caps counted under it).
    public func jobStatus(
        jobID: String, app: String, tokenHex: String, campaign: String? = nil, user: String? = nil, now: Int64 = PipelineStore.epochNow()
    ) async throws -> JobStatus {
        var status = try await jobStatus(jobID: jobID, app: app, recipient: tokenHex, isChannel: false, now: now)
        if let user { status.profile = RecipientProfile(timeZone: status.profile?.timeZone, user: user) }
        status = try await withCaps(status, jobID: jobID, app: app, campaign: campaign)
        return try await withCampaign(status, campaign, now: now)
    }

    /// A job neither accepted, in flight nor suppressed whose campaign has control state: cancelled, or
    /// deferred (one `HGET` of `{<p>}:control`, a key of another slot).
    private func withCampaign(_ status: JobStatus, _ campaign: String?, now: Int64) async throws -> JobStatus {
        guard let campaign, status.state == .notSeen else { return status }
        guard let stored = try await command(RedisCommand("HGET", keys.control, campaign)).string else { return status }
        var status = status
        let control = CampaignControlState(stored: stored)
        status.campaignControl = control
        // As the gate judges: a cancel first, then the holdout group (a rule on what the gate admitted).
        if control.cancelled {
            status.state = .cancelled
        } else if let share = control.holdoutBasisPoints, let hex = status.tokenHex,
            CampaignControlState.isHeldOut(
                campaign: campaign, recipient: Self.capRecipient(user: status.profile?.user, tokenHex: hex), basisPoints: share)
        {
            status.state = .heldOut
        } else if control.paused || control.rate != nil {
            status.state = .deferred
        } else if let at = control.startAtMs, at > now * 1000 {
            status.state = .deferred
            status.deferredUntilMs = at
        }
        return status
    }

    /// The state of broadcast job `jobID` for `app` on the channel `channelID` (as the job gave it): its
    /// record and lease are in the channel's bucket (``GateRequest/init(jobID:app:channelID:)``), and no
    /// suppression applies to a channel.
    public func jobStatus(jobID: String, app: String, channelID: String, now: Int64 = PipelineStore.epochNow()) async throws -> JobStatus {
        try await jobStatus(jobID: jobID, app: app, recipient: channelID, isChannel: true, now: now)
    }

    private func jobStatus(jobID: String, app: String, recipient: String, isChannel: Bool, now: Int64) async throws -> JobStatus {
        let hex = isChannel ? recipient : RedisKeys.tokenField(recipient)
        let tag = keys.tokenTag(app: app, tokenHex: hex)
        let fingerprint = JobFingerprint(jobID: jobID)
        let sub = fingerprint.subBucket(of: configuration.dedupSubBucketsPerTag)
        // Newest bucket first: a record settled twice (a job re-published after its record's bucket
        // ended) reads as the latest.
        let buckets = Array(dedupBucketsToCheck(now: now).reversed())
        var list = buckets.map { RedisCommand("SISMEMBER", keys.dedup(tag: tag, bucket: $0, subBucket: sub), String(fingerprint.member)) }
        list.append(RedisCommand("HGET", keys.inFlight(tag: tag), String(fingerprint.member)))
        if !isChannel {
            list.append(RedisCommand("HGET", keys.suppressed(tag: tag), hex))
            list.append(RedisCommand("HGET", keys.registered(tag: tag), hex))
            list.append(RedisCommand("HGET", keys.profile(tag: tag), hex))
            list.append(RedisCommand("ZSCORE", keys.quietDropped(tag: tag), String(fingerprint.member)))
        }
        let replies = try await commands(list)  // one slot: every key carries the tag
        guard replies.count == list.count else { throw RedisError.unexpectedReply("job status: \(replies.count) replies") }

        var status = JobStatus(state: .notSeen)
        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        if let hit = buckets.indices.first(where: { replies[$0].integer == 1 }) {
            status.acceptedFrom = buckets[hit] * width
            status.acceptedUntil = (buckets[hit] + 1) * width
        }
        let tail = replies[buckets.count...]
        status.lease = tail[tail.startIndex].string.map(InFlightLease.init(value:))
        if !isChannel {
            if let suppression = tail[tail.startIndex + 1].string {
                // `<epoch>:<reason>` (§4.1).
                let parts = suppression.split(separator: ":", maxSplits: 1)
                status.suppressedAt = parts.first.flatMap { Int64($0) }
                status.suppressedReason = parts.count > 1 ? String(parts[1]) : nil
            }
            status.registeredAt = tail[tail.startIndex + 2].string.flatMap { Int64($0) }
            status.profile = tail[tail.startIndex + 3].string.map(RecipientProfile.init(stored:))
            status.quietAtMs = tail[tail.startIndex + 4].string.flatMap(Double.init).map { Int64($0) }
            status.tokenHex = hex
        }
        if let lease = status.lease {
            status.leaseHolderAlive = try await command(RedisCommand("EXISTS", keys.owner(lease.owner))).integer == 1
        }

        // As the gate would judge it: an accepted record first, then a lease that holds, then the token.
        let leaseHolds = status.lease.map { $0.expiresAtMs > now * 1000 } == true && status.leaseHolderAlive == true
        if status.acceptedFrom != nil {
            status.state = .accepted
        } else if leaseHolds {
            status.state = .inFlight
        } else if let at = status.suppressedAt, !(status.registeredAt.map { $0 > at } ?? false) {
            status.state = .suppressed
        } else if status.quietAtMs != nil {
            status.state = .quiet
        }
        return status
    }
}

extension PipelineStore {
    /// What a frequency cap counts a job's sends under: the user, else the token (design §2.15).
    static func capRecipient(user: String?, tokenHex: String) -> String { user.map { "u:" + $0 } ?? "t:" + tokenHex }

    /// ``JobStatus/capCounted`` and ``JobStatus/campaignCapCounted``: the recipient's counted sends
    /// (keys of the recipient's own slot: commands of their own).
    func withCaps(_ status: JobStatus, jobID: String, app: String, campaign: String?) async throws -> JobStatus {
        guard let hex = status.tokenHex else { return status }
        var status = status
        let recipient = Self.capRecipient(user: status.profile?.user, tokenHex: hex)
        let tag = keys.tokenTag(app: app, tokenHex: recipient)
        let nowMs = Self.epochNow() * 1000
        if status.state == .notSeen {
            let member = String(JobFingerprint(jobID: jobID).member)
            let reply = try await command(RedisCommand("ZSCORE", keys.frequencyCapRefused(tag: tag, recipient: recipient), member))
            if let at = reply.string.flatMap(Double.init) {
                status.state = .capped
                status.cappedAtMs = Int64(at)
            }
        }
        func counted(_ key: String) async throws -> Int64? {
            // Entries past every window are trimmed only when the rule next writes: count the last 31 days.
            let n = try await command(RedisCommand("ZCOUNT", key, String(nowMs - FrequencyCap.longestWindowMs), "+inf")).integer ?? 0
            return n > 0 ? n : nil
        }
        status.capCounted = try await counted(keys.frequencyCap(tag: tag, recipient: recipient))
        if let campaign {
            status.campaignCapCounted = try await counted(keys.frequencyCap(tag: tag, recipient: recipient, campaign: campaign))
        }
        return status
    }
}
