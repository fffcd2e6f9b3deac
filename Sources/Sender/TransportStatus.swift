/// What every transport reports about itself, in terms neither protocol owns: how a drain ended, what a
/// connection has seen, and why a transport refuses notifications. The binary and HTTP/2 transports
/// both fill these in; the pipeline, `send` and the metrics read them without knowing which is behind.

/// How a transport's drain ended, per connection (``NotificationTransport/drainAndClose(before:)``).
public enum DrainOutcome: Sendable, Equatable {
    /// Binary: the gateway answered the drain probe: everything sent was processed.
    case provedByProbe
    /// Binary: the probe went unanswered; everything was settled by `settleAfter`.
    case settledByTime
    /// Nothing was written that was still unsettled.
    case nothingToDrain
    /// HTTP/2: every request had its answer (no probe or timer needed).
    case allAnswered
    /// HTTP/2: the stop's deadline passed with this many requests written and still unanswered; they
    /// stay unsettled (Kafka redelivers them) and may have reached a device (`ambiguous`).
    case timedOut(unanswered: Int)
}

/// Why a transport refused notifications handed to it.
public enum SenderError: Error, CustomStringConvertible {
    case closed(app: String)
    case draining(app: String)

    public var description: String {
        switch self {
        case .closed(let app): "sender for \(app) is closed"
        case .draining(let app): "sender for \(app) is draining; no new notifications are taken"
        }
    }
}

/// What one connection of a transport (a binary shard, an HTTP/2 connection) has seen, for tests,
/// benchmarks, `apns_connections` and the shard hash in Redis (``NotificationTransport/statistics()``).
/// Fields a protocol has no use for stay at their zero.
public struct ConnectionStatistics: Sendable {
    public var app = ""
    public var index = 0
    /// idle, connecting, connected, closing, stopped.
    public var state = "idle"
    /// The gateway of the current (or last) connection.
    public var gateway: String?
    /// When the current connection was established (epoch seconds).
    public var connectedSince: Int64?
    public var lastError: String?
    public var connections = 0
    public var maxQueueDepth = 0
    public var maxReplayBytes = 0
    public var maxReplayCount = 0
    /// The most bytes written (or batched) and not settled at once: never above the window plus one frame.
    public var maxUnsettledBytes = 0
    public var callerWaits = 0
    public var drainsProvedByProbe = 0
    public var queueDepth = 0
    public var replayCount = 0
    public var replayBytes = 0
    /// HTTP/2: streams the connection may have open now (its window under the server's and the
    /// configured limit; 1 while unproved or probing). 0 for the binary interface.
    public var streamsAllowed = 0
    /// HTTP/2 token authentication: the age in seconds of the provider token this connection last sent
    /// (APNs refuses tokens over an hour old; the cache renews them at ~50 minutes). Nil otherwise.
    public var providerTokenAge: Int64?
}
