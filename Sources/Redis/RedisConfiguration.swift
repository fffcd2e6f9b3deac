import Foundation
import Logging

/// Where and how to reach Redis.
///
/// Parsed from `redis://[user:password@]host:port[/db]`. There is no `rediss://`: hiredis 0.14 has no TLS,
/// so run Redis on loopback or a private network (or behind a TLS tunnel such as stunnel).
public struct RedisConfiguration: Sendable, Hashable {
    /// The server when none is configured (`redis.url`, `--redis`): its one home.
    public static let defaultURL = "redis://127.0.0.1:6379"

    public var host: String
    public var port: Int
    /// ACL user (Redis 6+). With a password but no user, `AUTH <password>` uses the `default` user.
    public var username: String?
    /// Never logged; ``redactedURL`` shows it as `***`.
    public var password: String?
    public var database: Int
    public var connectTimeout: Duration
    /// Read/write timeout of one round trip. A timeout is treated like a dropped connection: reconnect and
    /// retry, which the pipeline operations are built to survive (see ``PipelineStore``).
    public var commandTimeout: Duration
    public var reconnect: RedisReconnectPolicy

    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        username: String? = nil,
        password: String? = nil,
        database: Int = 0,
        connectTimeout: Duration = .seconds(2),
        commandTimeout: Duration = .seconds(30),
        reconnect: RedisReconnectPolicy = RedisReconnectPolicy()
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.reconnect = reconnect
    }

    /// `redis://[user:password@]host[:port][/db]`; user and password may be percent-encoded; an IPv6
    /// host goes in brackets (`redis://[::1]:6379`).
    public init(url: String) throws {
        self.init()
        if url.hasPrefix("rediss://") {
            throw RedisError.invalidURL("rediss:// (TLS) is not supported: hiredis 0.14 has no TLS")
        }
        guard url.hasPrefix("redis://") else {
            throw RedisError.invalidURL("expected redis://[user:password@]host:port[/db]")
        }
        var rest = Substring(url.dropFirst("redis://".count))
        var path = Substring("")
        if let slash = rest.firstIndex(of: "/") {
            path = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
        }
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let user: Substring, secret: Substring?
            if let colon = userInfo.firstIndex(of: ":") {
                user = userInfo[..<colon]
                secret = userInfo[userInfo.index(after: colon)...]
            } else {
                // `redis://secret@host` is the common shorthand for a password without a user.
                user = ""
                secret = userInfo
            }
            guard let decodedUser = String(user).removingPercentEncoding,
                  let decodedSecret = secret.map({ String($0).removingPercentEncoding }) ?? .some(nil)
            else { throw RedisError.invalidURL("bad percent-encoding in user info") }
            username = decodedUser.isEmpty ? nil : decodedUser
            password = (decodedSecret?.isEmpty ?? true) ? nil : decodedSecret
        }
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw RedisError.invalidURL("unclosed [ in host") }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty {
                throw RedisError.invalidURL("unexpected text after host")
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            portText = rest[rest.index(after: colon)...]
        } else {
            host = String(rest)
        }
        guard !host.isEmpty else { throw RedisError.invalidURL("missing host") }
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw RedisError.invalidURL("bad port \(portText)")
            }
            port = value
        }
        if !path.isEmpty {
            guard let db = Int(path), db >= 0 else { throw RedisError.invalidURL("bad database \(path)") }
            database = db
        }
    }

    /// The URL with the password replaced by `***`: the form that may appear in logs.
    public var redactedURL: String {
        var userInfo = ""
        if username != nil || password != nil {
            userInfo = (username ?? "") + (password != nil ? ":***" : "") + "@"
        }
        let hostPart = host.contains(":") ? "[\(host)]" : host
        return "redis://\(userInfo)\(hostPart):\(port)/\(database)"
    }
}

/// Where and how to reach a Redis Cluster: a few of its nodes (seeds) to learn the slot map from, and
/// what every node connection shares (credentials, timeouts, back-off).
///
/// Written as `host:port` or `redis://[user:password@]host:port` per node; credentials given on one
/// node apply to all (Cluster has one ACL per node but operators keep them equal). Cluster has only
/// database 0, so a `/db` other than 0 is refused.
public struct RedisClusterConfiguration: Sendable, Hashable {
    public var seeds: [RedisNodeAddress]
    /// The template of each node's connection: ``RedisConfiguration/host`` and ``RedisConfiguration/port``
    /// are replaced per node; ``RedisConfiguration/reconnect`` is the policy of the cluster as a whole
    /// (a node that stays down makes the client re-read the slot map from the others between attempts).
    public var node: RedisConfiguration

    public init(seeds: [RedisNodeAddress], node: RedisConfiguration = RedisConfiguration()) {
        self.seeds = seeds
        self.node = node
    }

    /// `entries` as written in the pipeline file (`redis.cluster`) or on a command line.
    public init(nodes entries: [String]) throws {
        guard !entries.isEmpty else { throw RedisError.invalidURL("no cluster nodes: expected a list of host:port") }
        var template: RedisConfiguration?
        var seeds: [RedisNodeAddress] = []
        for entry in entries {
            let parsed = try RedisConfiguration(url: entry.hasPrefix("redis://") || entry.hasPrefix("rediss://") ? entry : "redis://" + entry)
            guard parsed.database == 0 else {
                throw RedisError.invalidURL("\(parsed.host):\(parsed.port): Redis Cluster has only database 0")
            }
            if parsed.password != nil || parsed.username != nil {
                if let template, template.password != parsed.password || template.username != parsed.username {
                    throw RedisError.invalidURL("cluster nodes give different credentials: give them once, or the same on every node")
                }
                template = parsed
            }
            let address = RedisNodeAddress(host: parsed.host, port: parsed.port)
            if !seeds.contains(address) { seeds.append(address) }
        }
        self.init(seeds: seeds, node: template ?? RedisConfiguration())
    }

    /// The configuration of the connection to `address`.
    public func configuration(of address: RedisNodeAddress) -> RedisConfiguration {
        var configuration = node
        configuration.host = address.host
        configuration.port = address.port
        configuration.database = 0
        return configuration
    }

    /// The seeds with the password replaced by `***`: the form that may appear in logs.
    public var redactedDescription: String {
        let credentials = node.password != nil || node.username != nil
            ? (node.username ?? "") + (node.password != nil ? ":***" : "") + "@" : ""
        return "redis-cluster://" + credentials + seeds.map(\.description).joined(separator: ",")
    }
}

/// One node of a cluster, as the slot map and `MOVED`/`ASK` redirections name it.
public struct RedisNodeAddress: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Which Redis the pipeline talks to: one server (`redis.url`) or a cluster (`redis.cluster`). Both give
/// a ``RedisConnection`` with the same calls, so the code above them does not know which it has.
public enum RedisTarget: Sendable, Hashable {
    case single(RedisConfiguration)
    case cluster(RedisClusterConfiguration)

    /// From the pipeline file's keys: a cluster when `cluster` is given, else the one server at `url`.
    public init(url: String, cluster: [String]?) throws {
        if let cluster {
            self = .cluster(try RedisClusterConfiguration(nodes: cluster))
        } else {
            self = .single(try RedisConfiguration(url: url))
        }
    }

    /// A new client for the target (not connected yet: ``RedisConnection/connect()`` does it).
    public func makeConnection(logger: Logger = Logger(label: "apns.redis")) -> any RedisConnection {
        switch self {
        case .single(let configuration): return RedisClient(configuration: configuration, logger: logger)
        case .cluster(let configuration): return RedisCluster(configuration: configuration, logger: logger)
        }
    }

    /// How long one call keeps retrying an unreachable server (or cluster) before it fails: short for
    /// a dashboard that should say "unreachable" quickly, long for a poller holding results; `nil`
    /// waits forever.
    public var maximumWait: Duration? {
        get {
            switch self {
            case .single(let configuration): return configuration.reconnect.maximumWait
            case .cluster(let configuration): return configuration.node.reconnect.maximumWait
            }
        }
        set {
            switch self {
            case .single(var configuration):
                configuration.reconnect.maximumWait = newValue
                self = .single(configuration)
            case .cluster(var configuration):
                configuration.node.reconnect.maximumWait = newValue
                self = .cluster(configuration)
            }
        }
    }

    /// For logs: passwords as `***`.
    public var redactedDescription: String {
        switch self {
        case .single(let configuration): return configuration.redactedURL
        case .cluster(let configuration): return configuration.redactedDescription
        }
    }
}

/// Exponential back-off with jitter and a cap between reconnect attempts.
///
/// Why jitter: after a Redis restart every pipeline process reconnects at once; spreading the attempts
/// keeps them from arriving in lock step. Why a maximum wait: a caller holding outcomes would rather wait
/// out a restart or fail-over than drop them, but not forever when the configuration is wrong.
public struct RedisReconnectPolicy: Sendable, Hashable {
    public var initialDelay: Duration
    public var maximumDelay: Duration
    public var multiplier: Double
    /// Fraction of each delay that is randomised: 0.5 means a delay d becomes uniform in [d/2, d].
    public var jitter: Double
    /// How long one call keeps retrying before it throws ``RedisError/unavailable(waited:lastError:)``;
    /// `nil` waits forever.
    public var maximumWait: Duration?

    public init(
        initialDelay: Duration = .milliseconds(50),
        maximumDelay: Duration = .seconds(2),
        multiplier: Double = 2,
        jitter: Double = 0.5,
        maximumWait: Duration? = .seconds(300)
    ) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.multiplier = multiplier
        self.jitter = jitter
        self.maximumWait = maximumWait
    }

    /// The delay before attempt `attempt` (1-based), jittered with `generator`.
    public func delay(attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let initial = initialDelay.seconds, cap = maximumDelay.seconds
        let exponent = Double(max(0, attempt - 1))
        let base = min(cap, initial * pow(multiplier, min(exponent, 64)))
        let spread = base * min(max(jitter, 0), 1)
        let jittered = base - spread + (spread > 0 ? Double.random(in: 0...spread, using: &generator) : 0)
        return .nanoseconds(Int64(jittered * 1e9))
    }
}

extension Duration {
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }

    var timeval: timeval {
        let parts = components
        return Foundation.timeval(tv_sec: Int(parts.seconds), tv_usec: Int(parts.attoseconds / 1_000_000_000_000))
    }
}
