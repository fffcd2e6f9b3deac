import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import TimeUnits

/// Where and how to reach Redis.
///
/// Parsed from `redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS (``tls``: the server's
/// certificate verified against the system's roots, or the CA of ``RedisTLSConfiguration/ca``, and its
/// name against the host).
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
    /// retry, which callers must be built to survive (the pipeline's stores, in the `Redis` module, are).
    public var commandTimeout: Duration
    public var reconnect: RedisReconnectPolicy
    /// TLS (`rediss://`, or `redis.tls` in the pipeline file); nil: plain TCP.
    public var tls: RedisTLSConfiguration?

    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        username: String? = nil,
        password: String? = nil,
        database: Int = 0,
        connectTimeout: Duration = .seconds(2),
        commandTimeout: Duration = .seconds(30),
        reconnect: RedisReconnectPolicy = RedisReconnectPolicy(),
        tls: RedisTLSConfiguration? = nil
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.reconnect = reconnect
        self.tls = tls
    }

    /// `redis://[user:password@]host[:port][/db]`, read as RFC 3986 says: the authority runs from `//`
    /// to the first `/`, `?` or `#`; the user info is what comes before its last `@`, the user up to the
    /// first `:` and the password after it; both are percent-decoded (so a password holding `/`, `@`,
    /// `:`, `?`, `#` or `%` is written `%2F`, `%40`, `%3A`, `%3F`, `%23`, `%25`; or give it as
    /// `redis.password`). An IPv6 host goes in brackets (`redis://[::1]:6379`).
    ///
    /// No error message quotes the URL or any part of it: a malformed URL may hold a password anywhere
    /// (an unencoded `/` in it moves the rest into the path), and errors reach logs and terminals.
    public init(url: String) throws {
        self.init()
        let lower = url.prefix(9).lowercased()
        let scheme: String
        if lower.hasPrefix("rediss://") {
            scheme = "rediss://"
            tls = RedisTLSConfiguration()
        } else if lower.hasPrefix("redis://") {
            scheme = "redis://"
        } else {
            throw RedisError.invalidURL("expected redis://[user:password@]host:port[/db] (or rediss:// for TLS)")
        }
        let afterScheme = url.utf8.dropFirst(scheme.utf8.count)
        // RFC 3986 §3.2: the authority is terminated by the next "/", "?" or "#".
        let authorityEnd = afterScheme.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
        var rest = Substring(url[afterScheme.startIndex..<(authorityEnd ?? url.endIndex)])
        let tail = authorityEnd.map { Substring(url[$0...]) } ?? ""
        if tail.contains("@") {
            // Only a user info holding an unencoded "/", "?" or "#" puts an "@" there.
            throw RedisError.invalidURL(
                "the user info holds a character RFC 3986 does not allow there: percent-encode / ? # @ : % in the user and password (%2F %3F %23 %40 %3A %25), or give the password as redis.password"
            )
        }
        if let at = rest.lastIndex(of: "@") {
            (username, password) = try Self.credentials(fromUserInfo: rest[..<at])
            rest = rest[rest.index(after: at)...]
        }
        let (host, port) = try Self.hostAndPort(rest)
        self.host = host
        if let port { self.port = port }
        if let database = try Self.database(fromTail: tail) { self.database = database }
    }

    /// The user and password of a URL's user info (`user:password`, or `password` alone), each
    /// percent-decoded; an empty one is nil.
    private static func credentials(fromUserInfo userInfo: Substring) throws -> (username: String?, password: String?) {
        let user: Substring
        let secret: Substring?
        if let colon = userInfo.firstIndex(of: ":") {
            user = userInfo[..<colon]
            secret = userInfo[userInfo.index(after: colon)...]
        } else {
            // `redis://secret@host` is the common shorthand for a password without a user.
            user = ""
            secret = userInfo
        }
        guard let decodedUser = percentDecoded(user) else {
            throw RedisError.invalidURL("bad percent-encoding in the user name (a % must start %XX, UTF-8)")
        }
        var decodedSecret: String?
        if let secret {
            guard let decoded = percentDecoded(secret) else {
                throw RedisError.invalidURL("bad percent-encoding in the password (a % must start %XX, UTF-8; write % itself as %25)")
            }
            decodedSecret = decoded
        }
        return (decodedUser.isEmpty ? nil : decodedUser, (decodedSecret?.isEmpty ?? true) ? nil : decodedSecret)
    }

    /// `host[:port]` or `[ipv6][:port]`, the part of the authority after the user info. The port is nil
    /// when the URL gives none.
    private static func hostAndPort(_ rest: Substring) throws -> (host: String, port: Int?) {
        let host: String
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw RedisError.invalidURL("unclosed [ in the host") }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                portText = after.dropFirst()
            } else if !after.isEmpty {
                throw RedisError.invalidURL("unexpected text after the host's ]")
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            portText = rest[rest.index(after: colon)...]
        } else {
            host = String(rest)
        }
        guard !host.isEmpty else { throw RedisError.invalidURL("missing host") }
        guard let portText else { return (host, nil) }
        guard let value = Int(portText), (1...65535).contains(value) else {
            throw RedisError.invalidURL("bad port: expected a number in 1…65535")
        }
        return (host, value)
    }

    /// The database of what follows the authority (`/db`; nil: none given). A query or fragment is refused.
    private static func database(fromTail tail: Substring) throws -> Int? {
        let path = tail.dropFirst()  // the "/" (or "?"/"#", refused below)
        if tail.hasPrefix("?") || tail.hasPrefix("#") || path.contains("?") || path.contains("#") {
            throw RedisError.invalidURL("a query or fragment is not supported: expected redis://[user:password@]host:port[/db]")
        }
        guard !path.isEmpty else { return nil }
        guard let db = Int(path), db >= 0 else { throw RedisError.invalidURL("bad database: expected a number ≥ 0 after the /") }
        return db
    }

    /// RFC 3986 percent-decoding of a user-info part; nil when a `%` does not start two hex digits or
    /// the bytes are not UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var i = text.utf8.startIndex
        let end = text.utf8.endIndex
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        while i < end {
            let c = text.utf8[i]
            if c == UInt8(ascii: "%") {
                let h = text.utf8.index(after: i)
                guard h < end else { return nil }
                let l = text.utf8.index(after: h)
                guard l < end, let high = hex(text.utf8[h]), let low = hex(text.utf8[l]) else { return nil }
                bytes.append(high << 4 | low)
                i = text.utf8.index(after: l)
            } else {
                bytes.append(c)
                i = text.utf8.index(after: i)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The URL with the password replaced by `***`: the form that may appear in logs.
    public var redactedURL: String {
        var userInfo = ""
        if username != nil || password != nil {
            userInfo = (username ?? "") + (password != nil ? ":***" : "") + "@"
        }
        let hostPart = host.contains(":") ? "[\(host)]" : host
        return "\(tls != nil ? "rediss" : "redis")://\(userInfo)\(hostPart):\(port)/\(database)"
    }

    /// `host:port` (an IPv6 host in brackets), for logs and error messages.
    public var endpoint: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// TLS to Redis: `rediss://` URLs, and `redis.tls` in the pipeline file. The server's certificate is
/// always verified — chain and name — and TLS 1.2 is the least accepted.
public struct RedisTLSConfiguration: Sendable, Hashable {
    /// PEM file of the CA(s) that sign the server's certificate; nil: the system's trusted roots (a
    /// managed Redis with a public certificate).
    public var ca: String?
    /// PEM files of a client certificate and its key, for a server that asks for one (`tls-auth-clients`).
    public var certificate: String?
    public var key: String?
    /// The name the server's certificate must hold (and the SNI sent), when it is not the host the
    /// connection is made to (an IP address, or a cluster's nodes announced by address); nil: the host.
    public var serverName: String?

    public init(ca: String? = nil, certificate: String? = nil, key: String? = nil, serverName: String? = nil) {
        self.ca = ca
        self.certificate = certificate
        self.key = key
        self.serverName = serverName
    }

    /// The name to verify and to send as SNI for a connection to `host`: ``serverName``, or `host`
    /// unless it is an IP address (which is never sent as SNI; the certificate's IP addresses are then
    /// checked against the peer's address).
    func serverName(forHost host: String) -> String? {
        if let serverName { return serverName }
        return (try? SocketAddress(ipAddress: host, port: 0)) != nil ? nil : host
    }

    /// What is wrong with one key of ``RedisTLSConfiguration``: `key` is `ca`, `cert`, `key` or
    /// `server_name` (the pipeline file's names under `redis.tls`), `problem` starts "expected".
    public struct Problem: Error, Sendable, CustomStringConvertible {
        public var key: String
        public var problem: String
        public var description: String { "redis.tls.\(key): \(problem)" }
    }

    /// The swift-nio-ssl context: reads the files, so a missing or malformed one fails here, naming it
    /// (``RedisError/tls(_:)``).
    public func makeContext() throws -> NIOSSLContext {
        do {
            return try checkedContext()
        } catch let problem as Problem {
            throw RedisError.tls(problem.description)
        }
    }

    /// ``makeContext()`` with its failure as a ``Problem``, for a configuration file's error message.
    public func checkedContext() throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.certificateVerification = .fullVerification
        if let ca {
            let roots: [NIOSSLCertificate]
            do {
                roots = try NIOSSLCertificate.fromPEMFile(ca)
            } catch {
                throw Problem(key: "ca", problem: "expected a readable PEM file of CA certificates, \(ca) is not (\(error))")
            }
            guard !roots.isEmpty else { throw Problem(key: "ca", problem: "expected PEM certificates, \(ca) holds none") }
            tls.trustRoots = .certificates(roots)
        }
        switch (certificate, key) {
        case (nil, nil): break
        case (let certificate?, let key?):
            do {
                tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) }
            } catch {
                throw Problem(key: "cert", problem: "expected a readable PEM certificate file, \(certificate) is not (\(error))")
            }
            guard !tls.certificateChain.isEmpty else {
                throw Problem(key: "cert", problem: "expected a PEM certificate, \(certificate) holds none")
            }
            do {
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            } catch {
                throw Problem(key: "key", problem: "expected a readable PEM private key file, \(key) is not (\(error))")
            }
        case (nil, _?):
            throw Problem(key: "cert", problem: "expected the client certificate that goes with redis.tls.key (give both, or neither)")
        case (_?, nil):
            throw Problem(key: "key", problem: "expected the private key of redis.tls.cert (give both, or neither)")
        }
        if let serverName, (try? SocketAddress(ipAddress: serverName, port: 0)) != nil {
            throw Problem(
                key: "server_name", problem: "expected a DNS name, got the IP address \(serverName) (an IP address is checked without it)")
        }
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw Problem(key: "key", problem: "expected the private key of redis.tls.cert (\(error))")
        }
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
        var schemes = Set<Bool>()
        for entry in entries {
            let lower = entry.lowercased()
            let parsed = try RedisConfiguration(
                url: lower.hasPrefix("redis://") || lower.hasPrefix("rediss://") ? entry : "redis://" + entry)
            // A bare host:port follows the others' scheme; rediss:// on one node and redis:// on another
            // is a mistake, not a mixed cluster.
            if lower.contains("://") { schemes.insert(parsed.tls != nil) }
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
        guard schemes.count <= 1 else {
            throw RedisError.invalidURL("cluster nodes mix redis:// and rediss://: a cluster is all TLS or none")
        }
        var node = template ?? RedisConfiguration()
        if schemes.first == true, node.tls == nil { node.tls = RedisTLSConfiguration() }
        self.init(seeds: seeds, node: node)
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
        let credentials =
            node.password != nil || node.username != nil
            ? (node.username ?? "") + (node.password != nil ? ":***" : "") + "@" : ""
        return (node.tls != nil ? "rediss-cluster://" : "redis-cluster://") + credentials + seeds.map(\.description).joined(separator: ",")
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
    public func makeConnection(
        logger: Logger = Logger(label: "apns.redis"), eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) -> any RedisConnection {
        switch self {
        case .single(let configuration): return RedisClient(configuration: configuration, logger: logger, eventLoopGroup: eventLoopGroup)
        case .cluster(let configuration): return RedisCluster(configuration: configuration, logger: logger, eventLoopGroup: eventLoopGroup)
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

    /// The password every connection authenticates with (`redis.password`): replaces one given in the
    /// URL (or the cluster nodes' URLs). nil: the URL's.
    public var password: String? {
        get {
            switch self {
            case .single(let configuration): return configuration.password
            case .cluster(let configuration): return configuration.node.password
            }
        }
        set {
            switch self {
            case .single(var configuration):
                configuration.password = newValue
                self = .single(configuration)
            case .cluster(var configuration):
                configuration.node.password = newValue
                self = .cluster(configuration)
            }
        }
    }

    /// TLS for every connection (`redis.tls`): replaces what the URL's scheme says. nil: the URL's.
    public var tls: RedisTLSConfiguration? {
        get {
            switch self {
            case .single(let configuration): return configuration.tls
            case .cluster(let configuration): return configuration.node.tls
            }
        }
        set {
            switch self {
            case .single(var configuration):
                configuration.tls = newValue
                self = .single(configuration)
            case .cluster(var configuration):
                configuration.node.tls = newValue
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
        let initial = initialDelay.seconds
        let cap = maximumDelay.seconds
        let exponent = Double(max(0, attempt - 1))
        let base = min(cap, initial * pow(multiplier, min(exponent, 64)))
        let spread = base * min(max(jitter, 0), 1)
        let jittered = base - spread + (spread > 0 ? Double.random(in: 0...spread, using: &generator) : 0)
        return .nanoseconds(Int64(jittered * 1e9))
    }

    /// After attempt `attempt` of `operation` failed with `failure`, `waited` into the outage: the delay
    /// before the next attempt, logged (a warning for the first failure, then debug, so a long outage does
    /// not flood the log); or, once `maximumWait` has passed, the give-up logged and thrown
    /// (``RedisError/unavailable(waited:lastError:)``). `server`: "redis" or "redis cluster", in the messages.
    func retryDelay(
        _ operation: String, attempt: Int, waited: Duration, failure: String, server: String, logger: Logger,
        using generator: inout some RandomNumberGenerator
    ) throws -> Duration {
        if let maximumWait, waited >= maximumWait {
            logger.error(
                "\(server) unavailable, giving up",
                metadata: ["redis.operation": "\(operation)", "redis.waited_ms": "\(waited.milliseconds)", "error": "\(failure)"])
            throw RedisError.unavailable(waited: waited, lastError: failure)
        }
        let delay = delay(attempt: attempt, using: &generator)
        logger.log(
            level: attempt == 1 ? .warning : .debug, "\(server) call failed, retrying",
            metadata: [
                "redis.operation": "\(operation)", "redis.attempt": "\(attempt)", "redis.retry_in_ms": "\(delay.milliseconds)",
                "error": "\(failure)",
            ])
        return delay
    }
}

extension Duration {
    var timeval: timeval {
        let parts = components
        return Foundation.timeval(tv_sec: Int(parts.seconds), tv_usec: Int(parts.attoseconds / 1_000_000_000_000))
    }
}
