import APNsProtocol
import NIOCore

/// Where a notification came from: its job's Kafka partition and offset. The sender never reads it; it
/// travels with the notification so the settler can commit the offset once the outcome is recorded.
/// (The sender does not depend on the Kafka module; the pipeline maps this to its `MessageRef`.)
///
/// It also names the job's lane (`docs/design.md §1.4`): which topic it came from (the jobs topic or
/// `kafka.priority_topic`), and so which queue a transport puts it in. The lane sits in the padding
/// between the two numbers: a position is no larger for it.
public struct SourcePosition: Sendable, Hashable, CustomStringConvertible {
    public var partition: Int32
    public var lane: Lane
    public var offset: Int64

    public init(partition: Int32, offset: Int64, lane: Lane = .bulk) {
        self.partition = partition
        self.lane = lane
        self.offset = offset
    }

    public var description: String { lane == .bulk ? "\(partition)@\(offset)" : "priority:\(partition)@\(offset)" }
}

/// The two lanes a job travels in (`docs/design.md §1.4`). Every transport keeps a queue per lane and
/// always writes from the priority queue first; within a lane the order is kept (one token's jobs stay
/// in order). The priority lane does not make its caller wait for room: its own in-flight budget
/// (`pipeline.priority_max_in_flight`) bounds it.
public enum Lane: UInt8, Sendable, Hashable {
    /// The jobs topic: campaigns and everything else.
    case bulk
    /// `kafka.priority_topic`: single urgent jobs, written ahead of every bulk job.
    case priority
}

/// One notification to send: what a transport needs and nothing else. The payload is already encoded
/// and checked against the limit.
///
/// A value type over one shared, immutable storage object: a notification is copied into queues,
/// replay buffers and outcomes, and each copy is one reference count rather than one per string and
/// buffer. It keeps no more than it needs: a binary shard holds every notification it wrote
/// for the grace window after it settled (tens of thousands at full rate), so e.g. the token's hex
/// (96 bytes on the heap) is made when needed rather than kept. So is a campaign job's id,
/// `<campaign>:<token hex>` (``PushNotification/campaignJobID(campaign:token:)``): ~100 bytes on the heap
/// per notification in flight (up to `pipeline.max_in_flight` of them), kept as its campaign and token.
public struct PushNotification: Sendable {
    // `@usableFromInline`: the getters the pipeline and the transports read per notification on the hot
    // path (`app`, `lane`, `channel`, `position`, `campaign`, `token`) are inlined into their callers, in
    // other modules, rather than called (`perf`: a call and a retain each, per read). The
    // storage holds them in a `let`, so such a read needs no dynamic exclusivity check (a `var` of a class
    // read from another module does, per read: `perf`). A setter, which nothing on the hot
    // path calls (the pipeline passes everything to `init`), makes a new storage object.
    @usableFromInline struct Fields: Sendable {
        /// nil: the id is `<campaign>:<token hex>` (`campaign` is set), made when asked.
        var jobID: String?
        @usableFromInline var app: String
        @usableFromInline var token: DeviceToken
        /// The token's hex when the maker had it already (a decoded job's); nil: made from `token` when asked.
        var tokenHex: String?
        var payload: [UInt8]
        var expiry: UInt32
        var priority: Priority
        /// In the padding after `priority`.
        var isTransactional: Bool
        @usableFromInline var campaign: String?
        var collapseID: String?
        var pushType: APNsPushType?
        @usableFromInline var position: SourcePosition?
        /// A broadcast's channel (then `token` is a placeholder nothing sends); nil for a device.
        @usableFromInline var channel: BroadcastChannelID?
        /// The gate's hashes (set by the pipeline's send stage); dropped by a change of the id or the recipient.
        var recordHashes: RecordHashes?
        /// The job's recipient (`user`, `time_zone`): nothing sends them; kept for the job written again.
        /// One reference, nil for nearly every job: two optional strings were 32 bytes more in every
        /// notification a binary shard keeps for its grace window (+5 MiB peak RSS, benchmarks §7.16).
        var recipientNames: RecipientNames?
    }

    /// A job's `user` and `time_zone`, made only when it has either.
    @usableFromInline final class RecipientNames: Sendable {
        let user: String?
        let timeZone: String?

        init(user: String?, timeZone: String?) {
            self.user = user
            self.timeZone = timeZone
        }

        static func make(user: String?, timeZone: String?) -> RecipientNames? {
            user == nil && timeZone == nil ? nil : RecipientNames(user: user, timeZone: timeZone)
        }
    }

    @usableFromInline final class Storage: Sendable {
        @usableFromInline let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    @usableFromInline var storage: Storage

    private mutating func update(_ change: (inout Fields) -> Void) {
        var f = storage.fields
        change(&f)
        storage = Storage(f)
    }

    public var jobID: String {
        get {
            if let id = storage.fields.jobID { return id }
            // A nil id always has its campaign: `init` and the setters keep it so.
            return Self.campaignJobID(campaign: storage.fields.campaign!, token: storage.fields.token)
        }
        set {
            update {
                $0.jobID = newValue
                $0.recordHashes = nil
            }
        }
    }
    /// The job id as kept: nil when it is its campaign's `<campaign>:<token hex>`, made when asked
    /// (the grace window keeps a settled notification's id the same way).
    var keptJobID: String? { storage.fields.jobID }

    /// Calls `body` with the job id's UTF-8 bytes, without making a String for a campaign's job (the
    /// HTTP/2 sender hashes every request's id into its `apns-id`; the settle fingerprints every
    /// outcome's id).
    public func withJobIDBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if var id = storage.fields.jobID {
            return try id.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
        }
        var campaign = storage.fields.campaign!
        let token = storage.fields.token
        return try campaign.withUTF8 { name in
            try withUnsafeTemporaryAllocation(byteCount: name.count + 1 + token.hexCount, alignment: 1) { out in
                Self.writeCampaignJobID(campaign: UnsafeRawBufferPointer(name), token: token, into: out)
                return try body(UnsafeRawBufferPointer(out))
            }
        }
    }

    /// A campaign's job id, `<campaign>:<token's lower-case hex>` (the pipeline's `Campaign.jobID`).
    public static func campaignJobID(campaign: String, token: DeviceToken) -> String {
        var campaign = campaign
        return campaign.withUTF8 { name in
            String(unsafeUninitializedCapacity: name.count + 1 + token.hexCount) { out in
                writeCampaignJobID(campaign: UnsafeRawBufferPointer(name), token: token, into: UnsafeMutableRawBufferPointer(out))
                return out.count
            }
        }
    }

    private static func writeCampaignJobID(campaign: UnsafeRawBufferPointer, token: DeviceToken, into out: UnsafeMutableRawBufferPointer) {
        out.copyMemory(from: campaign)
        out[campaign.count] = UInt8(ascii: ":")
        token.writeHex(into: UnsafeMutableRawBufferPointer(rebasing: out[(campaign.count + 1)...]))
    }

    /// Whether `id` is `<campaign>:<token's lower-case hex>`, compared in place.
    static func isCampaignJobID(_ id: String, campaign: String, token: DeviceToken) -> Bool {
        let prefix = campaign.utf8.count
        guard id.utf8.count == prefix + 1 + token.hexCount else { return false }
        var id = id
        var campaign = campaign
        return id.withUTF8 { idBytes in
            campaign.withUTF8 { campaignBytes in
                let idBytes = UnsafeRawBufferPointer(idBytes)
                return idBytes[prefix] == UInt8(ascii: ":")
                    && UnsafeRawBufferPointer(rebasing: idBytes[..<prefix]).elementsEqual(UnsafeRawBufferPointer(campaignBytes))
                    && token.isHex(UnsafeRawBufferPointer(rebasing: idBytes[(prefix + 1)...]))
            }
        }
    }

    /// A change of the campaign or the token: an id made from them is kept as it is.
    private mutating func updateKeepingJobID(_ change: (inout Fields) -> Void) {
        let id = jobID
        update {
            if $0.jobID == nil { $0.jobID = id }
            change(&$0)
        }
    }
    public var app: String {
        @inlinable get { storage.fields.app }
        set { update { $0.app = newValue } }
    }
    public var token: DeviceToken {
        @inlinable get { storage.fields.token }
        set {
            updateKeepingJobID {
                $0.token = newValue
                $0.tokenHex = nil
                $0.recordHashes = nil  // the recipient's hash was the old token's
                $0.channel = nil  // a token makes it a device's notification
            }
        }
    }
    /// Whom it is for: the device of `token`, or every device subscribed to a broadcast channel.
    public var recipient: Recipient {
        if let channel = storage.fields.channel { return .channel(channel) }
        return .device(storage.fields.token)
    }
    /// The broadcast channel, nil for a device's notification.
    @inlinable public var channel: BroadcastChannelID? { storage.fields.channel }
    /// What its Redis records are keyed by: the token's hex, or a broadcast's channel id (design §4.1).
    public var recipientKey: String { storage.fields.channel?.value ?? tokenHex }
    /// The token's lower-case hex (Redis keys, dead letters, logs): the decoded job's own string when the
    /// pipeline gave it (the settle of every job needs it; making it again was an allocation per job).
    public var tokenHex: String { storage.fields.tokenHex ?? storage.fields.token.hex }
    public var payload: [UInt8] {
        get { storage.fields.payload }
        set { update { $0.payload = newValue } }
    }
    public var expiry: UInt32 {
        get { storage.fields.expiry }
        set { update { $0.expiry = newValue } }
    }
    public var priority: Priority {
        get { storage.fields.priority }
        set { update { $0.priority = newValue } }
    }
    public var campaign: String? {
        @inlinable get { storage.fields.campaign }
        set { updateKeepingJobID { $0.campaign = newValue } }
    }
    /// HTTP/2 `apns-collapse-id` (≤ 64 bytes); the binary interface has no such field and ignores it.
    public var collapseID: String? {
        get { storage.fields.collapseID }
        set { update { $0.collapseID = newValue } }
    }
    /// HTTP/2 `apns-push-type`, typed from the job to the request's header (the codec writes the header
    /// from the enum; nothing parses it back); nil lets the transport infer it from the payload.
    public var pushType: APNsPushType? {
        get { storage.fields.pushType }
        set { update { $0.pushType = newValue } }
    }
    /// The job's `user`, `time_zone` and `transactional` (the audience rules'): no transport reads them;
    /// they travel with the notification so that the job written again (a dead letter as sent, a held
    /// job) still names its recipient and stays exempt.
    public var user: String? {
        get { storage.fields.recipientNames?.user }
        set { update { $0.recipientNames = RecipientNames.make(user: newValue, timeZone: $0.recipientNames?.timeZone) } }
    }
    public var timeZone: String? {
        get { storage.fields.recipientNames?.timeZone }
        set { update { $0.recipientNames = RecipientNames.make(user: $0.recipientNames?.user, timeZone: newValue) } }
    }
    public var isTransactional: Bool {
        get { storage.fields.isTransactional }
        set { update { $0.isTransactional = newValue } }
    }
    /// The job's Kafka position, when it came from Kafka (`send` reads files and has none).
    public var position: SourcePosition? {
        @inlinable get { storage.fields.position }
        set { update { $0.position = newValue } }
    }
    /// Its lane (from its position; `send`'s notifications, which have none, are bulk).
    @inlinable public var lane: Lane { storage.fields.position?.lane ?? .bulk }
    /// What the pipeline's records key it by, as its gate computed them (nil: compute them from the id
    /// and the recipient). Dropped when the id or the recipient changes.
    public var recordHashes: RecordHashes? {
        get { storage.fields.recordHashes }
        set { update { $0.recordHashes = newValue } }
    }

    /// `tokenHex`, when given, is `token`'s lower-case hex (``DeviceToken/hex``), kept rather than made again.
    public init(
        jobID: String, app: String, token: DeviceToken, tokenHex: String? = nil, payload: [UInt8], expiry: UInt32, priority: Priority,
        campaign: String? = nil, collapseID: String? = nil, pushType: APNsPushType? = nil, position: SourcePosition? = nil,
        recordHashes: RecordHashes? = nil, user: String? = nil, timeZone: String? = nil, isTransactional: Bool = false
    ) {
        assert(tokenHex == nil || tokenHex == token.hex, "tokenHex must be the token's lower-case hex")
        let idIsMadeFromParts = campaign.map { Self.isCampaignJobID(jobID, campaign: $0, token: token) } ?? false
        storage = Storage(
            Fields(
                jobID: idIsMadeFromParts ? nil : jobID, app: app, token: token, tokenHex: tokenHex, payload: payload, expiry: expiry,
                priority: priority, isTransactional: isTransactional, campaign: campaign, collapseID: collapseID, pushType: pushType,
                position: position, channel: nil, recordHashes: recordHashes,
                recipientNames: RecipientNames.make(user: user, timeZone: timeZone)))
    }

    /// A notification for `recipient`: a device as `init(jobID:app:token:…)`, or a broadcast to a
    /// channel (sent as `POST /4/broadcasts/apps/<bundle id>`; HTTP/2 with token authentication only).
    public init(
        jobID: String, app: String, recipient: Recipient, tokenHex: String? = nil, payload: [UInt8], expiry: UInt32, priority: Priority,
        campaign: String? = nil, collapseID: String? = nil, pushType: APNsPushType? = nil, position: SourcePosition? = nil,
        recordHashes: RecordHashes? = nil, user: String? = nil, timeZone: String? = nil, isTransactional: Bool = false
    ) {
        switch recipient {
        case .device(let token):
            self.init(
                jobID: jobID, app: app, token: token, tokenHex: tokenHex, payload: payload, expiry: expiry, priority: priority,
                campaign: campaign, collapseID: collapseID, pushType: pushType, position: position,
                recordHashes: recordHashes, user: user, timeZone: timeZone, isTransactional: isTransactional)
        case .channel(let channel):
            // The id is kept as given: a campaign id is made from a token, which a broadcast has not.
            self.init(
                storage: Storage(
                    Fields(
                        jobID: jobID, app: app, token: Self.channelPlaceholderToken, tokenHex: "", payload: payload, expiry: expiry,
                        priority: priority, isTransactional: isTransactional, campaign: campaign, collapseID: collapseID,
                        pushType: pushType, position: position, channel: channel, recordHashes: recordHashes,
                        recipientNames: RecipientNames.make(user: user, timeZone: timeZone))))
        }
    }

    private init(storage: Storage) { self.storage = storage }

    /// The `token` of a broadcast, which has none (``APNsBroadcast/placeholderToken``).
    static var channelPlaceholderToken: DeviceToken { APNsBroadcast.placeholderToken }
}

/// Hashes a pipeline made of a notification's job id and recipient for its own records (its gate's, in
/// Redis), carried to the notification's outcome: the settle of each outcome runs on a transport's
/// event loop, and computing them again there meant writing the token's hex and the job id once more
/// and hashing both, per outcome. The transports only carry them.
public struct RecordHashes: Sendable, Hashable {
    /// The job id's two 64-bit hashes (the pipeline's `JobFingerprint`).
    public var idMember: Int64
    public var idSpread: UInt64
    /// The recipient's hash (the token's hex, or a broadcast's channel id: `RedisKeys.tokenHash`).
    public var recipient: UInt32

    public init(idMember: Int64, idSpread: UInt64, recipient: UInt32) {
        self.idMember = idMember
        self.idSpread = idSpread
        self.recipient = recipient
    }
}

/// Why a gateway refused a notification, as a meaning the settler can act on. Each transport maps its
/// own answers onto these (binary: error-response statuses; HTTP/2: status and `reason`), so nothing
/// after the transport ever looks at a protocol's status number.
public enum Rejection: Sendable, Hashable {
    /// The device token is not (or no longer) valid for this app: the job is rejected and the token
    /// suppressed. `since`: epoch seconds from which the token is invalid (HTTP/2's 410 `timestamp`), so a
    /// registration newer than that lifts the suppression; nil means "from when it is settled".
    case invalidToken(since: Int64?, reason: String)
    /// The request itself was refused (malformed, too large, bad topic…): validation should have caught
    /// it. Dead-lettered with the reason, and counted.
    case badRequest(reason: String)
    /// Failed for a passing cause (processing error, overload) as many times as allowed: dead-lettered
    /// with the reason.
    case transient(reason: String)

    public var reason: String {
        switch self {
        case .invalidToken(_, let reason), .badRequest(let reason), .transient(let reason): reason
        }
    }
}

/// How a transport's attempt to deliver a notification ended.
public enum Delivery: Sendable, Hashable {
    /// The gateway took it (binary: proved by a later error, a status 10, a drain probe or `settleAfter`;
    /// HTTP/2: answered 200).
    case accepted
    case rejected(Rejection)
    /// Never written: its campaign was cancelled (``CampaignCancellations``) before it was.
    case cancelled
    /// Not written: its campaign was paused before it was. The pipeline holds the job in Redis and
    /// publishes it again when the campaign resumes.
    case held
}

/// What became of a notification, in the pipeline's counting terms (the raw values are the counter
/// field names of the Redis contract).
public enum OutcomeKind: String, Sendable, Hashable {
    case accepted
    /// The token is invalid: the job is rejected and the token suppressed.
    case rejected
    /// Given up: a bad request, or a transient failure after the allowed attempts.
    case deadLettered = "dead_lettered"
    /// Its campaign was cancelled before it was written: never sent.
    case cancelled
    /// Its campaign was paused before it was written: held, to be sent after the resume.
    case deferred
}

public struct Outcome: Sendable {
    public var notification: PushNotification
    public var delivery: Delivery
    /// The protocol's own code for a rejection, as a counter label only (`rejected:<code>`): the binary
    /// error-response status ("8"), or the HTTP/2 reason ("Unregistered"). Never acted on.
    public var code: String?
    /// How many times it was written to a gateway (replays included).
    public var attempts: Int
    /// The shard (binary) or connection (HTTP/2) that wrote it last.
    public var connection: Int
    /// Times it was resent after a write whose fate is unknown (HTTP/2: unanswered when its connection
    /// died, or reset with a code other than REFUSED_STREAM; binary: written, unsettled, when the
    /// connection was lost): each one is a possible duplicate on the device. The transports count the
    /// same resends in `SenderEvents.ambiguous` (process-wide); this lets the pipeline count them per
    /// campaign when the outcome settles. Saturates at 255.
    public var ambiguousResends: UInt8
    /// HTTP/2, sandbox only: the answer's `apns-unique-id`, the key of this push in Apple's Push
    /// Notifications Console delivery log. Nil in production and on the binary interface.
    public var uniqueID: String?

    public init(
        notification: PushNotification, delivery: Delivery, code: String? = nil, attempts: Int, connection: Int,
        ambiguousResends: UInt8 = 0, uniqueID: String? = nil
    ) {
        self.notification = notification
        // A broadcast has no token to suppress: an answer that would say the token is invalid (none of
        // broadcast's documented answers does) dead-letters it instead, with the gateway's reason, so
        // the job is kept to publish again. The delivery is looked at first: an outcome is made on the
        // connection's event loop, where the notification's storage (written by the decoding thread) is
        // not in cache, and reading its channel for every outcome was a cache miss per job (~0.17 µs of
        // HTTP/2's `send`).
        if case .rejected(.invalidToken(_, let reason)) = delivery, notification.channel != nil {
            self.delivery = .rejected(.badRequest(reason: code ?? reason))
        } else {
            self.delivery = delivery
        }
        self.code = code
        self.attempts = attempts
        self.connection = connection
        self.ambiguousResends = ambiguousResends
        self.uniqueID = uniqueID
    }

    public var kind: OutcomeKind {
        switch delivery {
        case .accepted: .accepted
        case .rejected(.invalidToken): .rejected
        case .rejected(.badRequest), .rejected(.transient): .deadLettered
        case .cancelled: .cancelled
        case .held: .deferred
        }
    }

    public var rejection: Rejection? {
        if case .rejected(let r) = delivery { return r }
        return nil
    }

    public var jobID: String { notification.jobID }
    public var app: String { notification.app }
    public var token: DeviceToken { notification.token }
}

/// Gateway answer latencies in fixed buckets: a count and a sum of nanoseconds per bucket, in inline
/// storage, so recording one answer is a comparison or two and two additions (no allocation on the
/// per-request path), and batches add up with `+=` like the other `SenderEvents` fields. The metrics
/// replay each bucket into a Prometheus histogram with the same bounds (`upperBounds`).
public struct GatewayAnswerLatency: Sendable, Equatable {
    /// Upper bounds of the buckets (inclusive, as Prometheus' `le`); one more bucket takes the rest.
    public static let upperBounds: [Duration] = [
        .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
    ]
    public static let bucketCount = 14
    private static let boundsNanoseconds: [Int64] = upperBounds.map { TimeAmount($0).nanoseconds }

    /// Answers per bucket (bucket i: up to `upperBounds[i]`; the last: above every bound).
    public private(set) var counts = InlineArray<14, Int>(repeating: 0)
    /// The sum of the latencies of each bucket, in nanoseconds.
    public private(set) var nanoseconds = InlineArray<14, Int64>(repeating: 0)

    public init() {}

    public var count: Int {
        var n = 0
        for i in counts.indices { n += counts[i] }
        return n
    }

    public var isEmpty: Bool { count == 0 }

    /// One answer, `latency` after its request was written (negative values count as 0).
    public mutating func record(_ latency: TimeAmount) {
        let ns = max(0, latency.nanoseconds)
        let bounds = Self.boundsNanoseconds
        var i = 0
        while i < bounds.count && ns > bounds[i] { i += 1 }
        counts[i] += 1
        nanoseconds[i] += ns
    }

    public static func += (a: inout GatewayAnswerLatency, b: GatewayAnswerLatency) {
        for i in a.counts.indices {
            a.counts[i] += b.counts[i]
            a.nanoseconds[i] += b.nanoseconds[i]
        }
    }

    public static func == (a: GatewayAnswerLatency, b: GatewayAnswerLatency) -> Bool {
        for i in a.counts.indices where a.counts[i] != b.counts[i] || a.nanoseconds[i] != b.nanoseconds[i] { return false }
        return true
    }
}

/// Counts of what happened besides outcomes, delivered with each batch (add them up).
public struct SenderEvents: Sendable, Equatable {
    /// Notifications resent because the gateway discarded them unprocessed (binary: after an error or a
    /// status 10; HTTP/2: streams above a GOAWAY's last-stream-id, refused streams).
    public var replayed = 0
    /// Notifications resent because their connection dropped with no answer for them: they may have
    /// been processed, so they may arrive twice.
    public var ambiguous = 0
    /// Retries after a transient failure (binary status 1 / 255; HTTP/2 429, 500, 503).
    public var retried = 0
    public var reconnects = 0
    /// Every resend, by its reason (HTTP/2: each reason of `RetryReason`; binary: status 1 / 255).
    public var retriedBy = RetryCounts()
    /// Jobs whose retry budget ran out (`gateway-gave-up`) or whose `apns-expiration` passed while
    /// they waited for a retry (`expired`): dead-lettered with that reason.
    public var gaveUp = 0
    /// Binary only: error responses naming an identifier no longer in the replay buffer.
    public var sequenceUnknown = 0
    /// Binary only: notifications settled by time (reported accepted) that an error response then
    /// proved discarded, resent from the grace window (not reported again).
    public var resentAfterSettle = 0
    /// Binary only: notifications an error response proved discarded after they had been settled and
    /// had left the grace window: nothing could resend them. Each is logged by job id. Must be 0.
    public var lostAfterSettle = 0
    /// Binary only: notifications settled by time that the gateway then refused (e.g. status 8): their
    /// outcome stays accepted (it was reported); logged by job id.
    public var refusedAfterSettle = 0
    public var writes = 0
    public var framesWritten = 0
    public var bytesWritten = 0
    /// HTTP/2 only: the time from writing each request to its answer (any status), in fixed buckets.
    public var answerLatency = GatewayAnswerLatency()

    public init() {}

    public static func += (a: inout SenderEvents, b: SenderEvents) {
        a.replayed += b.replayed
        a.ambiguous += b.ambiguous
        a.retried += b.retried
        a.reconnects += b.reconnects
        a.retriedBy += b.retriedBy
        a.gaveUp += b.gaveUp
        a.sequenceUnknown += b.sequenceUnknown
        a.resentAfterSettle += b.resentAfterSettle
        a.lostAfterSettle += b.lostAfterSettle
        a.refusedAfterSettle += b.refusedAfterSettle
        a.writes += b.writes
        a.framesWritten += b.framesWritten
        a.bytesWritten += b.bytesWritten
        a.answerLatency += b.answerLatency
    }

    public var isEmpty: Bool { self == SenderEvents() }
}

/// A batch of outcomes from one connection (a binary shard, an HTTP/2 connection), with the events
/// since its last batch.
public struct OutcomeBatch: Sendable {
    public var app: String
    /// The shard or connection index within the app's transport.
    public var connection: Int
    public var outcomes: [Outcome]
    public var events: SenderEvents

    public init(app: String, connection: Int, outcomes: [Outcome], events: SenderEvents) {
        self.app = app
        self.connection = connection
        self.outcomes = outcomes
        self.events = events
    }
}

/// Where outcome batches go. Called on a connection's event loop: return quickly (hand the batch over).
public typealias OutcomeHandler = @Sendable (OutcomeBatch) -> Void
