import APNsProtocol
import APNsTransport
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// The binary transport of one app: `shards` TLS connections to its gateways, each a `Shard`.
/// Notifications route to a shard by a stable hash of their token, so one token's notifications keep
/// their order.
public final class BinaryTransport: NotificationTransport {
    public let configuration: BinaryTransportConfiguration
    private let shards: [Shard]
    private let onOutcomes: OutcomeHandler

    /// Builds the pool; connections open on the first notification. Throws when the certificate,
    /// key or CA cannot be loaded (the error names the file).
    public init(
        configuration: BinaryTransportConfiguration, group: any EventLoopGroup, limiter: ConnectionLimiter? = nil,
        logger: Logger = Logger(label: "apns.sender"), onOutcomes: @escaping OutcomeHandler
    ) throws {
        self.configuration = configuration
        self.onOutcomes = onOutcomes
        let sslContext = try configuration.credentials.makeClientContext()
        let limiter = limiter ?? ConnectionLimiter(attemptsPerSecond: configuration.shard.reconnect.attemptsPerSecondPerGateway)
        var loops = group.makeIterator()
        shards = (0..<configuration.shards).map { i in
            Shard(
                app: configuration.app, index: i, eventLoop: loops.next() ?? group.next(), config: configuration.shard,
                sslContext: sslContext, serverHostname: configuration.serverHostname, gateways: configuration.gateways,
                limiter: limiter, logger: logger, onOutcomes: onOutcomes)
        }
    }

    public var app: String { configuration.app }
    public var protocolName: String { BinaryTransportConfiguration.protocolName }

    /// The refusal of a broadcast handed to the binary interface.
    static let noBroadcast = "broadcast-needs-http2-token-auth"

    /// The shard a token goes to.
    public func shardIndex(for token: DeviceToken) -> Int {
        Int(token.stableHash % UInt64(shards.count))
    }

    /// Hands notifications to their shards; returns when every shard involved has room again
    /// (back-pressure: a full shard makes the caller wait, it never drops).
    ///
    /// A token that is not 32 bytes never reaches a shard: the binary interface has no other size
    /// (command 2, item 1: "Device token, 32 bytes"), so it is answered at once as the gateway would
    /// answer it, `status 5: Invalid token size` (dead-lettered). The pipeline and `send` refuse such
    /// jobs before (`token-size-needs-http2`); this keeps the shards' 32-byte invariant for any caller.
    public func send(_ notifications: [PushNotification]) async throws {
        // The binary interface has no broadcast (a frame carries a 32-byte device token): a channel's
        // notification is refused here, never written. The pipeline dead-letters these before they come
        // (`push-type-needs-token-auth`); this keeps a caller that did not from sending a placeholder.
        if notifications.contains(where: { $0.channel != nil }) {
            let broadcasts = notifications.filter { $0.channel != nil }
            onOutcomes(
                OutcomeBatch(
                    app: app, connection: 0,
                    outcomes: broadcasts.map {
                        Outcome(
                            notification: $0, delivery: .rejected(.badRequest(reason: Self.noBroadcast)), code: Self.noBroadcast,
                            attempts: 0, connection: 0)
                    }, events: SenderEvents()))
            let devices = notifications.filter { $0.channel == nil }
            if !devices.isEmpty { try await send(devices) }
            return
        }
        if !notifications.allSatisfy(\.token.fitsBinaryInterface) {
            try await sendRefusingTokenSizes(notifications)
            return
        }
        if shards.count == 1 {
            try await shards[0].submit(notifications).get()
            return
        }
        var parts = Array(repeating: [PushNotification](), count: shards.count)
        for n in notifications { parts[shardIndex(for: n.token)].append(n) }
        var waits: [EventLoopFuture<Void>] = []
        for (i, part) in parts.enumerated() where !part.isEmpty { waits.append(shards[i].submit(part)) }
        for w in waits { try await w.get() }
    }

    private func sendRefusingTokenSizes(_ notifications: [PushNotification]) async throws {
        var fitting: [PushNotification] = []
        var refused: [Outcome] = []
        let status = ErrorStatus.invalidTokenSize
        for n in notifications {
            if n.token.fitsBinaryInterface {
                fitting.append(n)
            } else {
                refused.append(
                    Outcome(
                        notification: n, delivery: .rejected(.badRequest(reason: "status \(status.rawValue): \(status.summary)")),
                        code: "\(status.rawValue)", attempts: 0, connection: 0))
            }
        }
        onOutcomes(OutcomeBatch(app: app, connection: 0, outcomes: refused, events: SenderEvents()))
        if !fitting.isEmpty { try await send(fitting) }
    }

    /// Drains every shard (drain probe, or `settleAfter` as a fallback) and closes the connections.
    public func drainAndClose(before deadline: ContinuousClock.Instant) async -> [DrainOutcome] {
        var results: [DrainOutcome] = []
        for f in shards.map({ $0.drainAndClose() }) { results.append((try? await f.get()) ?? .settledByTime) }
        return results
    }

    public func statistics() async -> [ConnectionStatistics] {
        var out: [ConnectionStatistics] = []
        for s in shards { out.append((try? await s.currentStatistics().get()) ?? ConnectionStatistics()) }
        return out
    }
}
