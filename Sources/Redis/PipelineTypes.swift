/// A job asking the gate whether it may be sent.
public struct GateRequest: Sendable, Hashable {
    public let jobID: String
    /// Bundle id (= certificate topic).
    public let app: String
    /// Device token, hex; case-insensitive. For a broadcast (``isChannel``) the channel id: the key its
    /// records are bucketed by, never looked up as a token.
    public let tokenHex: String
    /// A broadcast to a channel: deduped and leased like every job, but a channel is no device, so the
    /// gate neither reads a suppression, a registration or a language for it.
    public let isChannel: Bool
    /// ``JobFingerprint(jobID:)`` of ``jobID`` and ``RedisKeys/tokenHash(hex:)`` of ``tokenHex``: made
    /// once, here, for the gate's keys and arguments; the pipeline carries them on to the job's settle
    /// (so they are computed once per job, not once per stage).
    public let fingerprint: JobFingerprint
    public let tokenHash: UInt32
    /// Whether the token's registered language matters (the job has localized alerts): the gate reads
    /// languages only for a group with such a job (a read of a 64-character field per job otherwise).
    public var needsLanguage = true
    /// Whether the audience rules need the token's registered profile (who and where its user is): the gate
    /// reads profiles only for a group with such a job.
    public var needsProfile = false

    public init(jobID: String, app: String, tokenHex: String) {
        self.jobID = jobID
        self.app = app
        self.tokenHex = tokenHex
        self.isChannel = false
        fingerprint = JobFingerprint(jobID: jobID)
        tokenHash = RedisKeys.tokenHash(hex: tokenHex)
    }

    /// A broadcast job's request: its dedup record and lease are in the tag of `channelID`'s bucket
    /// (``RedisKeys/tokenBucket(_:)`` of the id, as the settle's ``SettledOutcome/init(jobID:app:tokenHex:campaign:kind:code:suppressToken:shard:)``
    /// computes it from the same string).
    public init(jobID: String, app: String, channelID: String) {
        self.jobID = jobID
        self.app = app
        self.tokenHex = channelID
        self.isChannel = true
        fingerprint = JobFingerprint(jobID: jobID)
        tokenHash = RedisKeys.tokenHash(hex: channelID)
    }
}

/// Who a token's device belongs to, as its newest registration said (``RedisKeys/profile(tag:)``): the
/// producer's user id and the device's IANA time zone, each nil when the registration did not say.
public struct RecipientProfile: Sendable, Hashable {
    public var timeZone: String?
    public var user: String?

    public init(timeZone: String? = nil, user: String? = nil) {
        self.timeZone = timeZone
        self.user = user
    }

    /// Parses `<time_zone>\n<user>` (either part may be empty).
    public init(stored: String) {
        let parts = stored.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        timeZone = parts.first.flatMap { $0.isEmpty ? nil : String($0) }
        user = parts.count > 1 && !parts[1].isEmpty ? String(parts[1]) : nil
    }

    /// The stored form.
    public var stored: String { (timeZone ?? "") + "\n" + (user ?? "") }
}

/// What the gate decided for one job.
public enum GateDecision: Sendable, Hashable {
    /// Send it; the token's registered language (for `alerts[language]`), if any. The job now holds an
    /// in-flight lease until it is settled (or the lease expires).
    case admitted(language: String?)
    /// Send it: the lease was held by a process whose heartbeat lapsed (it crashed between gate and
    /// settle), and is now this one's. If that process had handed the job's batch to its transports
    /// (`written`: its gate call's mark, ``PipelineStore/markWritten(call:)``) it may have reached a
    /// device already: a possible duplicate, counted `ambiguous`. Every take-over counts `resent_after_crash`. The job holds the lease as for ``admitted(language:)``.
    case takenOver(language: String?, written: Bool = true)
    /// Settled as accepted before: do not send; settle it as ``SettledOutcomeKind/deduped``.
    case deduped
    /// Another copy of this job id is between gate and settle right now: do not send it (the other copy
    /// settles the id); not a settled state.
    case inFlight
    /// Another live process (`owner`, its heartbeat present) holds this job id's lease: do not send it;
    /// gate it again later (deduped once that copy is accepted, taken over if that process dies).
    case inFlightElsewhere(owner: String)
    /// The token is suppressed (feedback or invalid token) and has not registered since: settle it as
    /// ``SettledOutcomeKind/suppressed``.
    case suppressed
    /// Its campaign is cancelled (`campaign cancel`) and the gate script admitted it (its id was not
    /// accepted before): not sent, settled as ``SettledOutcomeKind/cancelled``, which frees its lease. Never an
    /// answer of the gate script: `run` puts it in place of ``admitted(language:)`` or
    /// ``takenOver(language:written:)`` for the jobs its control snapshot says are cancelled (design §2.10).
    case cancelled
    /// Its campaign is paused, scheduled for later or paced (`campaign pause`, …): held in Redis (the held
    /// slots, `{<p>:held:<n>}:jobs:<campaign>`) and released to the jobs topic again when due; this message
    /// settles as ``SettledOutcomeKind/deferred``. Decided by `run` before the gate call, like ``cancelled``
    /// (design §2.11).
    case deferred
    /// It would be held, but its held slot is at a byte cap (``HeldCaps``): neither held nor sent, not
    /// settled. `run` keeps it, holds its Kafka partition, and gates it again once there is room (design
    /// §2.11). Decided before the gate call.
    case heldFull
    /// An audience rule (design §2.14) refused the job the gate script admitted: not sent, settled with
    /// this outcome (`capped`, `quiet`, `held_out`), which frees its lease. Never an answer of the gate
    /// script: `run` puts it in place of an admission.
    case ruledOut(SettledOutcomeKind)
    /// An audience rule (quiet hours, local time) held the job the gate script admitted: it is in Redis
    /// until due, and its message settles as ``SettledOutcomeKind/deferred``, freeing its lease (unlike
    /// ``deferred``, decided before any lease was taken).
    case heldByRule
}

/// How a job ended. Raw values are the counter field names (`docs/design.md §2.8`, §4.1).
public enum SettledOutcomeKind: String, Sendable, Hashable, CaseIterable {
    case accepted
    /// Refused by the gateway because the token is invalid (the token is suppressed).
    case rejected
    case suppressed
    case deduped
    case deadLettered = "dead_lettered"
    /// Its campaign was cancelled (`campaign cancel`) before the job was written to a connection: never
    /// sent (design §2.10).
    case cancelled
    /// Its campaign was paused: the job is held in Redis and comes back to the jobs topic on resume. The
    /// message is done with (its offset may commit); the job is not: not counted in `jobs_settled`.
    case deferred
    /// Over a frequency cap of its recipient (`apps[].frequency_caps`, `campaign publish --cap`): never
    /// sent (design §2.15).
    case capped
    /// Its recipient was inside the app's quiet hours and the app drops such jobs (`action: drop`):
    /// never sent (design §2.16).
    case quiet
    /// Its recipient is in its campaign's holdout group (`campaign publish --holdout`): never sent, so
    /// that the campaign's lift can be measured against them (design §2.18).
    case heldOut = "held_out"
}

/// One settled job.
public struct SettledOutcome: Sendable, Hashable {
    /// The job id's fingerprint: all the settle needs of the id (its dedup record, its lease, its
    /// per-job progress). Kept rather than the id, so an outcome never makes or holds the id's String
    /// (a campaign job's id is made from its campaign and token only when asked).
    public var fingerprint: JobFingerprint
    public var app: String
    /// ``RedisKeys/tokenHash(hex:)`` of the job's token: which token tag the outcome writes to.
    public var tokenHash: UInt32
    /// The token's hex, which only a suppression writes: the pipeline's outcomes carry it only with
    /// ``suppressToken`` (an outcome over the binary interface has no hex to hand).
    public var tokenHex: String?
    public var campaign: String?
    public var kind: SettledOutcomeKind
    /// The gateway's code for a refusal, when there was one: the binary error-response status ("8") or
    /// the HTTP/2 reason ("Unregistered"). Counted as `rejected:<code>`, whether the job ended rejected or
    /// dead-lettered; never acted on.
    public var code: String?
    /// Suppress the job's token (an invalid-token answer): the settler writes it to
    /// `…:suppressed:<app>`, so the gate skips the token until it registers again. Needs ``tokenHex``.
    public var suppressToken: TokenSuppression?
    /// The shard that wrote it to a gateway; counts `sent` on `…:shard:<app>:<n>` for accepted,
    /// rejected and dead-lettered jobs.
    public var shard: Int?
    /// A broadcast (a job for a channel): counted in `broadcast:<outcome>` besides its outcome, so the
    /// totals and the dashboard show broadcasts apart (one broadcast reaches many devices). Never
    /// suppresses (a channel is no token).
    public var isBroadcast = false
    /// The gate took no lease for it (a job of a cancelled campaign settled before its gate call): its
    /// settle frees none, since the id's lease, if any, belongs to another copy. Deduped and suppressed
    /// outcomes never hold one either, whatever this says.
    public var tookNoLease = false

    /// `tokenHex` may be nil only without `suppressToken`.
    public init(
        fingerprint: JobFingerprint, app: String, tokenHash: UInt32, tokenHex: String?, campaign: String? = nil, kind: SettledOutcomeKind,
        code: String? = nil, suppressToken: TokenSuppression? = nil, shard: Int? = nil
    ) {
        precondition(suppressToken == nil || tokenHex != nil, "an outcome that suppresses its token carries the token's hex")
        self.fingerprint = fingerprint
        self.app = app
        self.tokenHash = tokenHash
        self.tokenHex = tokenHex
        self.campaign = campaign
        self.kind = kind
        self.code = code
        self.suppressToken = suppressToken
        self.shard = shard
    }

    /// The outcome of the job with id `jobID` for the token `tokenHex` (for a broadcast, `isBroadcast`,
    /// its channel id: the key its records are bucketed by; a broadcast never suppresses).
    public init(
        jobID: String, app: String, tokenHex: String, campaign: String? = nil, kind: SettledOutcomeKind, code: String? = nil,
        suppressToken: TokenSuppression? = nil, shard: Int? = nil, isBroadcast: Bool = false
    ) {
        precondition(!isBroadcast || suppressToken == nil, "a broadcast never suppresses: a channel is no token")
        self.init(
            fingerprint: JobFingerprint(jobID: jobID), app: app, tokenHash: RedisKeys.tokenHash(hex: tokenHex), tokenHex: tokenHex,
            campaign: campaign, kind: kind, code: code, suppressToken: suppressToken, shard: shard)
        self.isBroadcast = isBroadcast
    }
}

/// A token to suppress because of a settled outcome.
public struct TokenSuppression: Sendable, Hashable {
    /// Epoch seconds from which the token is invalid (HTTP/2's 410 `timestamp`); nil = the batch's
    /// settle time. A registration newer than this lifts the suppression.
    public var since: Int64?
    /// Stored with the time (`<epoch>:<reason>`), e.g. `invalid-token`, `unregistered`.
    public var reason: String

    public init(since: Int64? = nil, reason: String) {
        self.since = since
        self.reason = reason
    }
}

/// Pipeline events since the last settle batch that are not outcomes of single jobs.
public struct PipelineEvents: Sendable, Hashable {
    /// Jobs consumed from Kafka.
    public var received: Int
    /// Notifications sent again on a new connection after an error response.
    public var replayed: Int
    /// Notifications replayed because a connection dropped without an error response.
    public var ambiguous: Int
    /// Notifications retried after status 1 or 255.
    public var retried: Int
    /// Gateway reconnects.
    public var reconnects: Int
    /// Jobs admitted by taking over the lease of a process that died (``GateDecision/takenOver(language:)``).
    public var resentAfterCrash: Int
    /// Jobs that had to wait because another live process held their lease (counted once per job).
    public var inFlightWaits: Int
    /// Binary: notifications an error response proved discarded after they had settled and left the
    /// grace window (reported accepted, never delivered; their job ids are in the error log). Must be 0.
    public var lostAfterSettle: Int
    /// Binary: notifications settled by time that the gateway then refused (outcome stays accepted).
    public var refusedAfterSettle: Int
    /// Resends by reason (`retried:<reason>` fields: 5xx, 429, reset, connection-lost, …).
    public var retriedBy: [String: Int] = [:]
    /// Jobs dead-lettered because their retry budget or their expiration ran out (`gave_up`).
    public var gaveUp = 0

    public init(
        received: Int = 0, replayed: Int = 0, ambiguous: Int = 0, retried: Int = 0, reconnects: Int = 0,
        resentAfterCrash: Int = 0, inFlightWaits: Int = 0, lostAfterSettle: Int = 0, refusedAfterSettle: Int = 0
    ) {
        self.received = received
        self.replayed = replayed
        self.ambiguous = ambiguous
        self.retried = retried
        self.reconnects = reconnects
        self.resentAfterCrash = resentAfterCrash
        self.inFlightWaits = inFlightWaits
        self.lostAfterSettle = lostAfterSettle
        self.refusedAfterSettle = refusedAfterSettle
    }

    public static let none = PipelineEvents()
}

/// Per-shard counts of a settle batch that are not tied to outcomes (added to `…:shard:<app>:<n>`).
public struct ShardEvents: Sendable, Hashable {
    public var app: String
    public var shard: Int
    public var replayed: Int

    public init(app: String, shard: Int, replayed: Int) {
        self.app = app
        self.shard = shard
        self.replayed = replayed
    }
}

/// Everything one settle call records. Build it once and pass the same value again when retrying
/// yourself: its ``id`` is what makes a repeated batch a no-op, and ``settledAt`` fixes the minute
/// bucket and the suppression time.
public struct SettleBatch: Sendable, Hashable {
    /// Unique per batch. Redis keeps `…:batch:<id>` for an hour; a batch with a known id is not applied again.
    public var id: String
    public var outcomes: [SettledOutcome]
    public var events: PipelineEvents
    public var shardEvents: [ShardEvents]
    /// Per campaign: `resentAfterCrash` and `ambiguous` added to `…:campaign:<id>` (the totals come from ``events``).
    public var campaignEvents: [String: PipelineEvents] = [:]
    /// Epoch seconds: the minute bucket, the dedup bucket and the invalid-token suppression time.
    public var settledAt: Int64

    public init(
        id: String = PipelineStore.newBatchID(),
        outcomes: [SettledOutcome],
        events: PipelineEvents = .none,
        shardEvents: [ShardEvents] = [],
        settledAt: Int64 = PipelineStore.epochNow()
    ) {
        self.id = id
        self.outcomes = outcomes
        self.events = events
        self.shardEvents = shardEvents
        self.settledAt = settledAt
    }
}

/// A device (re-)registering: lifts any older suppression of its token and sets its language and its
/// recipient profile (user and time zone).
public struct Registration: Sendable, Hashable {
    public var app: String
    public var tokenHex: String
    /// Epoch seconds.
    public var registeredAt: Int64
    public var language: String?
    /// The producer's id of the device's user (for frequency caps).
    public var user: String?
    /// The device's IANA time zone name (for quiet hours).
    public var timeZone: String?

    public init(
        app: String, tokenHex: String, registeredAt: Int64, language: String? = nil, user: String? = nil, timeZone: String? = nil
    ) {
        self.app = app
        self.tokenHex = tokenHex
        self.registeredAt = registeredAt
        self.language = language
        self.user = user
        self.timeZone = timeZone
    }

    /// The value of the token's field in the profile hash (``RedisKeys/profile(tag:)``):
    /// `<time zone>\n<user>`, either part empty when not given; '' (keep the stored profile) when
    /// neither is. A time zone has no newline, so the first one ends it and the user may hold any.
    var profile: String {
        if user == nil && timeZone == nil { return "" }
        return (timeZone ?? "") + "\n" + (user ?? "")
    }
}

/// A token not to send to (from the feedback service, or an invalid-token error).
public struct Suppression: Sendable, Hashable {
    public var app: String
    public var tokenHex: String
    /// Epoch seconds; the newest suppression of a token wins.
    public var at: Int64
    /// e.g. `feedback`, `invalid-token`.
    public var reason: String

    public init(app: String, tokenHex: String, at: Int64, reason: String) {
        self.app = app
        self.tokenHex = tokenHex
        self.at = at
        self.reason = reason
    }
}

/// A shard's connection state, written to `…:shard:<app>:<n>` for dashboards.
public struct ShardStatus: Sendable, Hashable {
    public var app: String
    public var shard: Int
    /// `idle`, `backing-off` (waiting to reconnect after a failure), `connecting`, `connected`,
    /// `draining`, `closing`, `stopped` (binary shards; HTTP/2 connections report their own).
    public var state: String
    public var gateway: String?
    /// Epoch seconds.
    public var connectedSince: Int64?
    public var lastError: String?

    public init(app: String, shard: Int, state: String, gateway: String? = nil, connectedSince: Int64? = nil, lastError: String? = nil) {
        self.app = app
        self.shard = shard
        self.state = state
        self.gateway = gateway
        self.connectedSince = connectedSince
        self.lastError = lastError
    }
}

/// The counter fields of `…:stats`, `…:stats:<minute>` and `…:campaign:<id>` (`docs/design.md §4.1`).
public enum CounterField: String, Sendable, Hashable, CaseIterable {
    case received, accepted, rejected, suppressed, deduped
    case deadLettered = "dead_lettered"
    case replayed, ambiguous, retried, reconnects
    /// Dead-letter writes that failed (per message and attempt); the source message stays unsettled
    /// and the write is retried with back-off.
    case deadLetterFailures = "dead_letter_failures"
    /// Jobs admitted after taking over a dead process's lease: the crash duplicate window (also in `ambiguous`).
    case resentAfterCrash = "resent_after_crash"
    /// Jobs that waited on another live process's lease (once per job).
    case inFlightWaits = "in_flight_waits"
    /// Binary: notifications proved discarded after they had settled and left the grace window. Must be 0.
    case lostAfterSettle = "lost_after_settle"
    /// Binary: notifications settled by time that the gateway then refused (their outcome stays accepted).
    case refusedAfterSettle = "refused_after_settle"
    /// Jobs whose retries ran out of time (`gateway-gave-up`) or past their expiration (`expired`).
    /// Each resend is also counted by its reason in `retried:<reason>` fields.
    case gaveUp = "gave_up"
    /// Jobs of a cancelled campaign settled without being sent (an outcome, ``SettledOutcomeKind/cancelled``).
    case cancelled
    /// Messages of a paused campaign held in Redis, to be published again on resume (``SettledOutcomeKind/deferred``).
    case deferred
    /// Jobs over a frequency cap (``SettledOutcomeKind/capped``), quiet hours dropping them
    /// (``SettledOutcomeKind/quiet``), a campaign's holdout group (``SettledOutcomeKind/heldOut``).
    case capped
    case quiet
    case heldOut = "held_out"
}

/// The fields of one counters hash, as read.
public struct Counters: Sendable, Hashable {
    /// Every field of the hash, including `rejected:<status>` and (for campaigns) `published`.
    public var fields: [String: Int64]

    public init(fields: [String: Int64] = [:]) {
        self.fields = fields
    }

    public subscript(field: CounterField) -> Int64 { fields[field.rawValue] ?? 0 }

    /// `rejected:<code>`: a binary status number ("8") or an HTTP/2 reason ("Unregistered").
    public func rejected(code: String) -> Int64 { fields["rejected:\(code)"] ?? 0 }

    /// `broadcast:<outcome>`: the broadcasts (channel jobs) among the jobs counted in `outcome`.
    public func broadcasts(_ outcome: SettledOutcomeKind) -> Int64 { fields[PipelineStore.broadcastField(outcome)] ?? 0 }
}

/// Totals and recent per-minute counters.
public struct PipelineStats: Sendable, Hashable {
    public struct Minute: Sendable, Hashable {
        /// `yyyyMMddHHmm`, UTC.
        public var minute: String
        /// Epoch seconds of the minute's start.
        public var start: Int64
        public var counters: Counters
    }

    public var totals: Counters
    /// Oldest first, ending with the current minute; minutes without activity have empty counters.
    public var minutes: [Minute]
}

/// The fields of `…:campaign:<id>` besides the per-message ``CounterField``s (`docs/design.md §4.1`).
///
/// Two views of one campaign live in that hash. The ``CounterField`` fields count **messages**, like
/// `…:stats`: a message redelivered after a rebalance or a crash settles again (as `deduped`, or
/// `suppressed` after a rejection) and counts again. The `jobs*` fields count **jobs** (distinct job
/// ids): each job of the campaign is counted once, by the outcome it first settled with, whatever the
/// redeliveries and however many `run` processes settle it. Progress is `jobs_settled` of `jobs`.
public enum CampaignField: String, Sendable, Hashable, CaseIterable {
    /// Messages `campaign publish` produced (a job published twice counts twice).
    case published
    /// Distinct job ids `campaign publish` produced (a job published twice counts once). Absent on
    /// campaigns published before per-job progress existed: their progress is the message figures.
    case jobs
    /// Jobs settled at least once: the sum of the `jobs_<outcome>` fields below.
    case jobsSettled = "jobs_settled"
    case jobsAccepted = "jobs_accepted"
    case jobsRejected = "jobs_rejected"
    case jobsSuppressed = "jobs_suppressed"
    case jobsDeadLettered = "jobs_dead_lettered"
    /// Jobs whose first settlement was `cancelled` (`campaign cancel`): part of `jobs_settled`.
    case jobsCancelled = "jobs_cancelled"
    /// Jobs whose first settlement was one of the audience rules' (a cap, quiet hours, the holdout
    /// group): part of `jobs_settled`.
    case jobsCapped = "jobs_capped"
    case jobsQuiet = "jobs_quiet"
    case jobsHeldOut = "jobs_held_out"
    /// How many sets hold the campaign's published-job marks (fixed by its first publish).
    case jobMarkSets = "job_mark_sets"
    /// Epoch milliseconds at which the last `campaign publish` of it started, and at which one finished:
    /// while started > finished a publish is under way (or died), and `campaign wait` is not done.
    case publishStartedMs = "publish_started_ms"
    case publishFinishedMs = "publish_finished_ms"

    /// The per-job field of an outcome; nil for `deduped`: a deduped job was accepted before, and its
    /// acceptance counted it (a deduped message is never a job's first settlement in its campaign).
    public static func jobs(_ kind: SettledOutcomeKind) -> CampaignField? {
        switch kind {
        case .accepted: .jobsAccepted
        case .rejected: .jobsRejected
        case .suppressed: .jobsSuppressed
        case .deadLettered: .jobsDeadLettered
        case .cancelled: .jobsCancelled
        case .capped: .jobsCapped
        case .quiet: .jobsQuiet
        case .heldOut: .jobsHeldOut
        case .deduped, .deferred: nil
        }
    }
}

/// A campaign's progress: published jobs and their outcomes so far.
public struct CampaignProgress: Sendable, Hashable {
    public var id: String
    /// Messages published (``CampaignField/published``).
    public var published: Int64
    /// Every field of the hash.
    public var counters: Counters

    public init(id: String, published: Int64, counters: Counters) {
        self.id = id
        self.published = published
        self.counters = counters
    }

    public subscript(field: CampaignField) -> Int64 { counters.fields[field.rawValue] ?? 0 }

    /// Distinct jobs published, or nil when the campaign was published before per-job progress existed
    /// (no `jobs` field): then only the message figures are there.
    public var jobs: Int64? { counters.fields[CampaignField.jobs.rawValue] }

    /// Jobs settled at least once (``CampaignField/jobsSettled``).
    public var jobsSettled: Int64 { self[.jobsSettled] }

    /// Messages settled: the per-message outcome fields added up (a redelivered message counts again).
    public var messagesSettled: Int64 {
        [CounterField.accepted, .rejected, .suppressed, .deduped, .deadLettered, .cancelled, .capped, .quiet, .heldOut].reduce(0) {
            $0 + counters[$1]
        }
    }

    /// A `campaign publish` of it started and has not finished (or died before it finished).
    public var isPublishing: Bool {
        let started = counters.fields[CampaignField.publishStartedMs.rawValue] ?? 0
        return started > 0 && started > (counters.fields[CampaignField.publishFinishedMs.rawValue] ?? 0)
    }
}
