import APNsProtocol
import Logging
import NIOCore
import Synchronization

/// What one app's transport is built from. Each transport's configuration (``BinaryTransportConfiguration``,
/// ``HTTP2TransportConfiguration``) conforms and builds its own transport, so ``TransportFactory`` — the
/// one place `run` and `send` build transports — names no protocol: a new transport is a new
/// conforming type beside the others, not a case added to theirs.
public protocol TransportConfiguration: Sendable {
    /// The bundle id (topic) the transport sends for.
    var app: String { get }
    /// Connection attempts per second allowed to one gateway address, over every connection of the
    /// process that uses the same limiter (Apple: "APNs treats rapid connection and disconnection as a
    /// denial-of-service attack").
    var attemptsPerSecondPerGateway: Double { get }
    /// Campaigns cancelled or paused (design §2.10, §2.11): checked right before each write. nil:
    /// nothing is cancelled.
    var cancellations: CampaignCancellations? { get set }

    /// The transport, its connections opened on the first notification. Throws when its credentials
    /// cannot be loaded (the error names the file).
    func makeTransport(
        group: any EventLoopGroup, limiter: ConnectionLimiter, logger: Logger, onOutcomes: @escaping OutcomeHandler
    ) throws -> any NotificationTransport

    // What the protocol can do, asked of the configuration's type: the pipeline reads these instead of
    // switching on the kind of transport.

    /// The protocol's name in logs, metric labels and readiness lines (`http2`, `binary`).
    static var protocolName: String { get }
    /// How an error message names the interface ("HTTP/2", "the binary interface").
    static var interfaceDescription: String { get }
    /// Whether an app may authenticate with a provider token, which the push types Apple serves over
    /// token-based connections only (`liveactivity`, `location`) and broadcasts need.
    static var hasTokenAuthentication: Bool { get }
    /// Whether it carries device tokens of any size (Apple: "APNs device tokens are of variable length").
    static var carriesAnyTokenSize: Bool { get }
    /// Whether a request addresses its device by the token's hex, which a notification then keeps.
    static var addressesTokensByHex: Bool { get }
    /// Whether each request carries an id the gateway knows it by (`apns-id`), which outcomes report.
    static var requestsHaveIDs: Bool { get }
    /// Whether the gateway has a feedback service to poll for tokens no longer valid.
    static var hasFeedbackService: Bool { get }
    /// Whether written notifications stay in memory after their write (a settle window): memory is
    /// freed a while after it was used.
    static var keepsWrittenNotifications: Bool { get }
    /// What a connection holds of what it wrote and has not settled, which its
    /// ``ConnectionStatistics/replayCount`` counts.
    static var unsettledHolding: UnsettledHolding { get }
    /// The largest payload the protocol takes for a notification of `pushType` (nil: alert), or for a
    /// broadcast; nil: the gateway's own limit, which the configuration gives.
    static func payloadLimit(pushType: APNsPushType?, broadcast: Bool) -> Int?
}

/// What a connection holds of what it wrote and has not settled (``TransportConfiguration/unsettledHolding``).
public enum UnsettledHolding: Sendable {
    /// A replay buffer: the written notifications themselves, kept until they settle
    /// (``ConnectionStatistics/replayCount`` and ``ConnectionStatistics/replayBytes``).
    case replayBuffer
    /// Streams: requests written and not answered yet, open on the connection (``ConnectionStatistics/replayCount``).
    case openStreams
}

extension TransportConfiguration {
    /// The largest payload the protocol takes of any notification (nil: the gateway's configured limit).
    public static var largestPayloadLimit: Int? {
        let limits =
            APNsPushType.allCases.compactMap { payloadLimit(pushType: $0, broadcast: false) }
            + [payloadLimit(pushType: nil, broadcast: true)].compactMap { $0 }
        return limits.max()
    }
}

/// Builds the transports of a process (`run`: one per app; `send`: one). Transports of one kind with
/// the same reconnect rate share one ``ConnectionLimiter``: the gateway counts connection attempts,
/// whichever app makes them. Called once per transport at start, never per notification.
public final class TransportFactory: Sendable {
    private let group: any EventLoopGroup
    private let logger: Logger
    private let limiters = Mutex<[LimiterKey: ConnectionLimiter]>([:])

    private struct LimiterKey: Hashable {
        var kind: ObjectIdentifier
        var attemptsPerSecond: Double
    }

    public init(group: any EventLoopGroup, logger: Logger) {
        self.group = group
        self.logger = logger
    }

    public func make(_ configuration: any TransportConfiguration, onOutcomes: @escaping OutcomeHandler) throws -> any NotificationTransport
    {
        let rate = configuration.attemptsPerSecondPerGateway
        let key = LimiterKey(kind: ObjectIdentifier(type(of: configuration)), attemptsPerSecond: rate)
        let limiter = limiters.withLock { limiters in
            if let shared = limiters[key] { return shared }
            let made = ConnectionLimiter(attemptsPerSecond: rate)
            limiters[key] = made
            return made
        }
        return try configuration.makeTransport(group: group, limiter: limiter, logger: logger, onOutcomes: onOutcomes)
    }
}
