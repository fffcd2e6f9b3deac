import APNsProtocol
import APNsTransport
import Logging
import NIOCore
import TimeUnits

/// One app's binary transport: N shards, each its own TLS connection to one of the gateways.
public struct BinaryTransportConfiguration: Sendable {
    /// Shards per app when nothing else is said (the pipeline file's `gateway.shards`, `send --shards`).
    public static let defaultShards = 4

    public var credentials: ProviderCredentials
    public var gateways: [GatewayAddress]
    public var shards: Int
    public var shard: ShardConfiguration
    /// Name checked against the gateway's certificate; nil uses each gateway's host.
    public var serverHostname: String?

    public init(
        credentials: ProviderCredentials, gateways: [GatewayAddress], shards: Int = BinaryTransportConfiguration.defaultShards,
        shard: ShardConfiguration = ShardConfiguration(), serverHostname: String? = nil
    ) {
        precondition(!gateways.isEmpty && shards > 0)
        self.credentials = credentials
        self.gateways = gateways
        self.shards = shards
        self.shard = shard
        self.serverHostname = serverHostname
    }

    public var app: String { credentials.app }
}

/// How one shard batches, settles and reconnects.
public struct ShardConfiguration: Sendable {
    /// Flush when the unflushed frames reach this many bytes…
    public var batchBytes = 64 * 1024
    /// …or when the oldest unflushed frame has waited this long (Nagle, but explicit).
    public var linger = Duration.milliseconds(2)
    /// Notifications waiting to be written; a full queue makes callers wait.
    public var queueCapacity = 8192
    /// Written but unsettled notifications kept for replay; when full, writing pauses until some settle.
    public var replayMaxCount = 65_536
    public var replayMaxBytes = 16 * 1024 * 1024
    /// No error response this long after a write completed: its notifications are accepted. Size the
    /// replay buffer from `settleAfter` × rate.
    public var settleAfter = Duration.seconds(1)
    /// At most this many bytes written (or batched) and not yet settled per connection; at the cap the
    /// shard stops writing until some settle. nil: `settleAfter` × `defaultUnsettledRate` (16 MiB/s),
    /// within 32 KiB…`replayMaxBytes`. Why: the settle clock starts when a write reaches the kernel, and the
    /// client cannot see when the gateway reads it (kernel buffers on both sides, the gateway's own);
    /// what is unsettled bounds what can sit unread, so as long as the gateway reads this much per
    /// `settleAfter`, nothing settles before it was read. It also bounds what an error response
    /// discards behind the bad frame (the replay cost), and caps a connection at this ÷ `settleAfter`
    /// bytes per second. docs/design.md §2.5.
    public var maxUnsettledBytes: Int?
    /// The window adapts below that cap: each error response that discarded frames halves it, down to
    /// this; what settles cleanly grows it back (docs/design.md §2.5). Equal to the cap: no adaptation.
    public var minUnsettledBytes = 16 * 1024
    /// Settled notifications stay resendable this long after settling (kept, marked settled, outcome
    /// already reported): an error that names one of them — a gateway that read later than
    /// `settleAfter` — still replays exactly what followed it. Bounded by `replayMaxBytes` too.
    public var settleGrace = Duration.seconds(2)
    /// Status 1 / 255: how many times a notification is written before it is dead-lettered, when
    /// `giveUpAfter` is nil.
    public var maxAttempts = 3
    /// Status 1 / 255: retried until this long after the notification's first such answer, then
    /// dead-lettered `gateway-gave-up` (the pipeline sets `gateway.give_up_after_s`, default 3600; nil
    /// keeps the count of `maxAttempts`).
    public var giveUpAfter: Duration?
    /// How long a drain waits for the probe's answer before falling back to `settleAfter`.
    public var drainTimeout = Duration.seconds(5)
    public var connectTimeout = Duration.seconds(10)
    public var reconnect = ReconnectPolicy()
    /// Cancelled campaigns (`campaign cancel`, design §2.10): a queued notification of one is settled
    /// ``Delivery/cancelled`` instead of being written. nil: nothing is cancelled.
    public var cancellations: CampaignCancellations?

    public init() {}

    /// The rate `maxUnsettledBytes` is sized for when not set: 16 MiB/s per connection (~80 000
    /// notifications of 200 bytes a second: above what one connection to Apple's gateways carried, and
    /// twice the pipeline's end-to-end rate per shard (`ops/bench e2e`), so it does not cost throughput
    /// there; a loopback benchmark that wants more sets `maxUnsettledBytes`). A gateway that reads slower than
    /// `maxUnsettledBytes` per `settleAfter` can still read a frame after it settled: the grace window
    /// covers that, `resent_after_settle` / `refused_after_settle` show it, `lost_after_settle` counts
    /// what even the grace window missed.
    public static let defaultUnsettledRate = 16 << 20

    /// The unsettled window in force.
    public var unsettledByteLimit: Int {
        if let m = maxUnsettledBytes { return m }
        let sized = Int(settleAfter.seconds * Double(Self.defaultUnsettledRate))
        return max(32 * 1024, min(sized, replayMaxBytes))
    }
}

extension BinaryTransportConfiguration: TransportConfiguration {
    public var attemptsPerSecondPerGateway: Double { shard.reconnect.attemptsPerSecondPerGateway }

    public static var protocolName: String { "binary" }
    public static var interfaceDescription: String { "the binary interface" }
    /// Certificates only, and no push types at all.
    public static var hasTokenAuthentication: Bool { false }
    /// The token item is 32 bytes ("Device token, 32 bytes"); a gateway answers any other size with
    /// status 5, "Invalid token size".
    public static var carriesAnyTokenSize: Bool { false }
    /// Frames carry the token's bytes.
    public static var addressesTokensByHex: Bool { false }
    /// A frame's identifier is the shard's own, not an id Apple reports.
    public static var requestsHaveIDs: Bool { false }
    public static var hasFeedbackService: Bool { true }
    /// The settle grace window keeps rate × `settle_grace` of sent frames (design §2.5).
    public static var keepsWrittenNotifications: Bool { true }
    /// Sent frames stay in the shard's replay buffer until they settle (by probe or by time).
    public static var unsettledHolding: UnsettledHolding { .replayBuffer }
    /// `gateway.payload_limit`: a legacy gateway's own.
    public static func payloadLimit(pushType: APNsPushType?, broadcast: Bool) -> Int? { nil }

    public var cancellations: CampaignCancellations? {
        get { shard.cancellations }
        set { shard.cancellations = newValue }
    }

    public func makeTransport(
        group: any EventLoopGroup, limiter: ConnectionLimiter, logger: Logger, onOutcomes: @escaping OutcomeHandler
    ) throws -> any NotificationTransport {
        try BinaryTransport(configuration: self, group: group, limiter: limiter, logger: logger, onOutcomes: onOutcomes)
    }
}
