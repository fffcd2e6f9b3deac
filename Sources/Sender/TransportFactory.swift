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
