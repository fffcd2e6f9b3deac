import Foundation
import Logging
import NIOCore
import NIOPosix
import Redis

/// What the dashboard shows, read from the Redis contract (docs/design.md §4.1): totals, the per-minute
/// hashes of the last hour, campaigns (`<p>:campaign:<id>`) and connections (`<p>:shard:<app>:<n>`).
/// Everything here is cluster-wide: every `run` process writes the same keys.
public struct DashboardSnapshot: Codable, Sendable {
    public struct Minute: Codable, Sendable {
        /// Epoch seconds of the minute's start.
        public var start: Int64
        public var counters: [String: Int64]
    }

    public struct Campaign: Codable, Sendable {
        public var id: String
        public var published: Int64
        public var counters: [String: Int64]
        /// What an operator set (`campaign pause`, `cancel`, …: design §2.10) as `campaign status` says it:
        /// `running` when nothing is set.
        public var state: String = "running"
        /// Jobs of it held in Redis (paused, scheduled, paced: design §2.11) and their bytes.
        public var heldJobs: Int64 = 0
        public var heldBytes: Int64 = 0
    }

    /// Jobs held in Redis under one name: a campaign, or an app's `max_rate` (`@app:<bundle id>`).
    public struct Held: Codable, Sendable {
        public var name: String
        public var jobs: Int64
        public var bytes: Int64
    }

    public struct Connection: Codable, Sendable {
        public var app: String
        public var shard: Int
        public var fields: [String: String]
    }

    /// Epoch seconds, from this process's clock.
    public var now: Int64
    public var prefix: String
    public var totals: [String: Int64] = [:]
    /// Oldest first, ending with the current (incomplete) minute.
    public var minutes: [Minute] = []
    public var campaigns: [Campaign] = []
    public var connections: [Connection] = []
    /// Everything held in Redis, by name (the held-bytes caps count these).
    public var held: [Held] = []
    /// Set when Redis could not be read: the page says so instead of showing stale numbers as current.
    public var error: String?
    /// Whether the page may show the pause / resume / cancel buttons: the server takes them (a control
    /// token is set, `POST /api/campaigns/<id>/<action>`).
    public var controls = false
}

/// Reads a ``DashboardSnapshot`` with a connection of its own that gives up quickly (a dashboard must
/// say "Redis unreachable" within a refresh, not wait minutes as the pipeline's connections do).
///
/// Two connections: one for the snapshots, one for readiness's PING (``redisProblem()``). A snapshot is
/// tens of round trips (SCANs over the keyspace, then the hashes), and the connection runs one call at a
/// time: a PING queued behind a few viewers' snapshots could miss a probe's timeout and flip readiness
/// while Redis is fine.
///
/// Snapshots are shared: ``snapshotJSON()`` answers every viewer from one read for ``cacheFor`` and, while
/// a read is under way, makes later callers wait for it instead of starting another, so N viewers cost
/// one read per refresh, not N.
public final class DashboardData: Sendable {
    private let client: any RedisConnection
    private let probe: any RedisConnection
    private let cache: SingleFlightCache<[UInt8]>
    /// How long a snapshot answers every viewer. Under the page's 2 s poll, so that one viewer sees
    /// every poll fresh (a cache as old as the poll period would hand it the previous read every other
    /// time), while any number of viewers cost one read per 1.5 s.
    public static let defaultCacheDuration: Duration = .milliseconds(1500)
    /// `host:port` of the server, or the cluster's seeds, for the messages (never a password).
    private let address: String
    private let keys: RedisKeys
    private let store: PipelineStore
    /// Whether the page shows the campaign buttons (the server was given a control token and ``controlRoute``).
    private let controls: Bool
    private let confirmationWait: Duration
    /// Campaign and shard hashes read per refresh at most (SCAN over the prefix, then one pipeline).
    public static let maxCampaigns = 200
    public static let maxConnections = 1024

    public convenience init(
        redisURL: String, prefix: String, logger: Logger, cacheFor: Duration = DashboardData.defaultCacheDuration
    ) throws {
        try self.init(redis: .single(try RedisConfiguration(url: redisURL)), prefix: prefix, logger: logger, cacheFor: cacheFor)
    }

    /// `redis`: one server or a cluster (the counters and campaign hashes share the `{<p>}` tag, so on a
    /// cluster they live on one primary, where SCAN is sent).
    /// `cacheFor`: how long one snapshot answers every viewer (0: each request reads, concurrent ones
    /// still share a read).
    /// `controls`: the page shows the campaign buttons (the server serves ``controlRoute`` behind the control token).
    /// `confirmationWait`: how long a button's answer waits for every running process to confirm.
    /// `eventLoopGroup`: where its two connections run (`run` passes the pipeline's loops).
    public init(
        redis: RedisTarget, prefix: String, logger: Logger, cacheFor: Duration = DashboardData.defaultCacheDuration,
        controls: Bool = false, confirmationWait: Duration = CampaignControlRoute.defaultConfirmationWait,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        self.controls = controls
        self.confirmationWait = confirmationWait
        func quick(_ configuration: RedisConfiguration) -> RedisConfiguration {
            var configuration = configuration
            configuration.connectTimeout = .seconds(1)
            configuration.commandTimeout = .seconds(2)
            configuration.reconnect = RedisReconnectPolicy(
                initialDelay: .milliseconds(50), maximumDelay: .milliseconds(200), maximumWait: .milliseconds(500))
            return configuration
        }
        var quiet = logger
        // An unreachable Redis is reported in the page; its retries would flood the log once per refresh.
        quiet.logLevel = .critical
        switch redis {
        case .single(let configuration):
            client = RedisClient(configuration: quick(configuration), logger: quiet, eventLoopGroup: eventLoopGroup)
            probe = RedisClient(configuration: quick(configuration), logger: quiet, eventLoopGroup: eventLoopGroup)
            address = RedisNodeAddress(host: configuration.host, port: configuration.port).description
        case .cluster(var configuration):
            configuration.node = quick(configuration.node)
            client = RedisCluster(configuration: configuration, logger: quiet, eventLoopGroup: eventLoopGroup)
            probe = RedisCluster(configuration: configuration, logger: quiet, eventLoopGroup: eventLoopGroup)
            address = "cluster " + configuration.seeds.map(\.description).joined(separator: ",")
        }
        keys = RedisKeys(prefix: prefix)
        var storeConfiguration = PipelineStoreConfiguration()
        storeConfiguration.keyPrefix = prefix
        store = PipelineStore(client: client, configuration: storeConfiguration, logger: quiet)
        cache = SingleFlightCache(ttl: cacheFor)
    }

    /// Nil when Redis answers PING on the probe's own connection; else why not (for `/readyz`).
    public func redisProblem() async -> String? {
        do {
            let reply = try await probe.send(RedisCommand("PING"))
            return reply == .status("PONG") ? nil : "redis: PING answered \(reply)"
        } catch {
            return "redis: unreachable at \(address) (\(error))"
        }
    }

    public func snapshot() async -> DashboardSnapshot {
        let now = PipelineStore.epochNow()
        var s = DashboardSnapshot(now: now, prefix: keys.prefix)
        s.controls = controls
        do {
            let stats = try await store.readStats(lastMinutes: 60, now: now)
            s.totals = stats.totals.fields
            s.minutes = stats.minutes.map { .init(start: $0.start, counters: $0.counters.fields) }
            // What is held in Redis (design §2.11): the listed campaigns' held slots.
            let heldNames = Array(try await store.deferredCampaigns().prefix(Self.maxCampaigns))
            let usage = try await store.heldUsage(campaigns: heldNames)
            s.held = heldNames.compactMap { name in
                usage[name].flatMap { $0.jobs > 0 ? DashboardSnapshot.Held(name: name, jobs: $0.jobs, bytes: $0.bytes) : nil }
            }
            let campaignKeys = try await scan(keys.campaignPrefix, limit: Self.maxCampaigns)
            let shardKeys = try await scan(keys.shardPrefix, limit: Self.maxConnections)
            let replies = try await client.pipeline((campaignKeys + shardKeys).map { RedisCommand("HGETALL", $0) })
            let control = campaignKeys.isEmpty ? CampaignControlSnapshot() : try await store.readControl()
            for (key, reply) in zip(campaignKeys, replies) {
                let fields = Self.fields(reply).compactMapValues { Int64($0) }
                let id = String(key.dropFirst(keys.campaignPrefix.count))
                var campaign = DashboardSnapshot.Campaign(id: id, published: fields["published"] ?? 0, counters: fields)
                if let state = control.campaigns[id] { campaign.state = state.description }
                if let held = usage[id] {
                    campaign.heldJobs = held.jobs
                    campaign.heldBytes = held.bytes
                }
                s.campaigns.append(campaign)
            }
            for (key, reply) in zip(shardKeys, replies.dropFirst(campaignKeys.count)) {
                // {<p>}:shard:<app>:<n>; the app (a bundle id) has no colon.
                let rest = key.dropFirst(keys.shardPrefix.count)
                guard let colon = rest.lastIndex(of: ":"), let n = Int(rest[rest.index(after: colon)...]) else { continue }
                s.connections.append(.init(app: String(rest[..<colon]), shard: n, fields: Self.fields(reply)))
            }
            s.campaigns.sort { $0.id < $1.id }
            s.connections.sort { ($0.app, $0.shard) < ($1.app, $1.shard) }
        } catch {
            s.error = "Redis at \(address) could not be read: \(error)"
        }
        return s
    }

    /// The snapshot as JSON, shared by every caller for ``defaultCacheDuration`` (or the `cacheFor` given).
    public func snapshotJSON() async -> [UInt8] {
        await cache.value { await self.readSnapshotJSON() }
    }

    private func readSnapshotJSON() async -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? Array(encoder.encode(await snapshot()))) ?? Array(#"{"error":"encoding failed"}"#.utf8)
    }

    /// The route of the dashboard's campaign buttons, on this data's quick-failing connection.
    public var controlRoute: CampaignControlRoute { CampaignControlRoute(store: store, confirmationWait: confirmationWait) }

    public func close() async {
        await client.close()
        await probe.close()
    }

    /// Keys starting with `prefix`, by SCAN (never KEYS: it blocks the server), at most `limit`.
    private func scan(_ prefix: String, limit: Int) async throws -> [String] {
        var cursor = "0"
        var found: [String] = []
        let pattern = prefix.replacingOccurrences(of: "*", with: "\\*") + "*"
        repeat {
            let reply = try await client.send(RedisCommand("SCAN", cursor, "MATCH", pattern, "COUNT", "1000"), routedBy: prefix)
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string else { break }
            cursor = next
            found.append(contentsOf: (parts[1].array ?? []).compactMap(\.string))
        } while cursor != "0" && found.count < limit
        return Array(Set(found)).sorted().prefix(limit).map { $0 }
    }

    private static func fields(_ reply: RedisReply) -> [String: String] {
        guard let elements = reply.array else { return [:] }
        var out: [String: String] = [:]
        for i in stride(from: 0, to: elements.count - 1, by: 2) {
            if let k = elements[i].string, let v = elements[i + 1].string { out[k] = v }
        }
        return out
    }
}
