import APNsProtocol

/// One notification to send: what the sender needs and nothing else. The payload is already encoded
/// and checked against the limit; `tag` is the caller's (the pipeline keeps its Kafka position there).
public struct PushNotification: Sendable {
    public var jobID: String
    public var app: String
    public var token: DeviceToken
    public var payload: [UInt8]
    public var expiry: UInt32
    public var priority: Priority
    public var campaign: String?
    public var tag: UInt64

    public init(
        jobID: String, app: String, token: DeviceToken, payload: [UInt8], expiry: UInt32, priority: Priority,
        campaign: String? = nil, tag: UInt64 = 0
    ) {
        self.jobID = jobID
        self.app = app
        self.token = token
        self.payload = payload
        self.expiry = expiry
        self.priority = priority
        self.campaign = campaign
        self.tag = tag
    }
}

/// What became of a notification.
public enum OutcomeKind: String, Sendable, Hashable {
    /// Processed by the gateway (proved by a later error, a status 10, a drain probe, or `settle_after`).
    case accepted
    /// Status 8: the token is invalid; it should be suppressed.
    case rejected
    /// Given up: status 2–7 (validation should have caught it), or 1/255 after the allowed attempts.
    case deadLettered = "dead_lettered"
}

public struct Outcome: Sendable {
    public var notification: PushNotification
    public var kind: OutcomeKind
    /// The gateway's status when the outcome came from an error response.
    public var status: ErrorStatus?
    /// How many times it was written to a gateway (replays included).
    public var attempts: Int
    public var shard: Int

    public var jobID: String { notification.jobID }
    public var app: String { notification.app }
    public var token: DeviceToken { notification.token }
}

/// Counts of what happened besides outcomes, delivered with each batch (add them up).
public struct SenderEvents: Sendable, Equatable {
    /// Notifications resent because the gateway discarded them after an error (or a status 10).
    public var replayed = 0
    /// Notifications resent because their connection dropped with no error response: they may have
    /// been processed, so they may arrive twice.
    public var ambiguous = 0
    /// Status 1 / 255 retries.
    public var retried = 0
    public var reconnects = 0
    /// Error responses naming an identifier no longer in the replay buffer.
    public var sequenceUnknown = 0
    public var writes = 0
    public var framesWritten = 0
    public var bytesWritten = 0

    public init() {}

    public static func += (a: inout SenderEvents, b: SenderEvents) {
        a.replayed += b.replayed
        a.ambiguous += b.ambiguous
        a.retried += b.retried
        a.reconnects += b.reconnects
        a.sequenceUnknown += b.sequenceUnknown
        a.writes += b.writes
        a.framesWritten += b.framesWritten
        a.bytesWritten += b.bytesWritten
    }

    public var isEmpty: Bool { self == SenderEvents() }
}

/// A batch of outcomes from one shard, with the events since its last batch.
public struct OutcomeBatch: Sendable {
    public var app: String
    public var shard: Int
    public var outcomes: [Outcome]
    public var events: SenderEvents
}

/// Where outcome batches go. Called on the shard's event loop: return quickly (hand the batch over).
public typealias OutcomeHandler = @Sendable (OutcomeBatch) -> Void
