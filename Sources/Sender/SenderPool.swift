import APNsProtocol
import APNsTransport
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// The binary transport of one app: `shards` TLS connections to its gateways, each a `Shard`.
/// Notifications route to a shard by a stable hash of their token, so one token's notifications keep
/// their order.
public final class SenderPool: NotificationTransport {
    public let configuration: PoolConfiguration
    private let shards: [Shard]

    /// Builds the pool; connections open on the first notification. Throws when the certificate,
    /// key or CA cannot be loaded (the error names the file).
    public init(
        configuration: PoolConfiguration, group: any EventLoopGroup, limiter: ConnectionLimiter? = nil,
        logger: Logger = Logger(label: "apns.sender"), onOutcomes: @escaping OutcomeHandler
    ) throws {
        self.configuration = configuration
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
    public var protocolName: String { "binary" }

    /// The shard a token goes to.
    public func shardIndex(for token: DeviceToken) -> Int {
        Int(token.stableHash % UInt64(shards.count))
    }

    /// Hands notifications to their shards; returns when every shard involved has room again
    /// (back-pressure: a full shard makes the caller wait, it never drops).
    public func send(_ notifications: [PushNotification]) async throws {
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

    /// Drains every shard (drain probe, or `settleAfter` as a fallback) and closes the connections.
    public func drainAndClose(before deadline: ContinuousClock.Instant) async -> [DrainResult] {
        var results: [DrainResult] = []
        for f in shards.map({ $0.drainAndClose() }) { results.append((try? await f.get()) ?? .settledByTime) }
        return results
    }

    public func statistics() async -> [ShardStatistics] {
        var out: [ShardStatistics] = []
        for s in shards { out.append((try? await s.currentStatistics().get()) ?? ShardStatistics()) }
        return out
    }
}
