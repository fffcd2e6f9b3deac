import Foundation
import Logging
import ProcessSupport
import Redis
import Testing

/// A throw-away Redis Cluster of `masters` primaries, each with `replicas` replicas (none by default),
/// each node a `redis-server --cluster-enabled yes` on a free loopback port, killed when the test ends.
/// Nodes `0..<masters` are the primaries; node `masters + m * replicas + r` is primary `m`'s replica `r`.
///
/// Built with the cluster commands themselves (`CLUSTER ADDSLOTSRANGE`, `SET-CONFIG-EPOCH`, `MEET`) rather
/// than `redis-cli --cluster create`: no prompt, no fixed sleeps, and each test gets its own cluster, so
/// tests that migrate slots or kill nodes cannot disturb the others. `ops/redis-cluster` builds one with
/// `redis-cli` for people and benchmarks.
public final class RedisClusterServer: @unchecked Sendable {
    public let nodes: [RedisServer]
    public let masters: Int
    /// Whether the nodes speak only TLS, the cluster bus included (`--tls-cluster yes`).
    public let tls: Bool

    /// Every node as `redis.cluster` lists them: `host:port`, or `rediss://host:port` over TLS.
    public var addresses: [String] { nodes.map { "\(tls ? "rediss://" : "")127.0.0.1:\($0.port)" } }

    /// Only the primaries' addresses, as a `redis.cluster` written before any fail-over would list them.
    public var primaryAddresses: [String] { Array(addresses.prefix(masters)) }

    /// The replica nodes of primary `master`.
    public func replicaIndices(of master: Int) -> [Int] {
        let perPrimary = (nodes.count - masters) / masters
        return (0..<perPrimary).map { masters + master * perPrimary + $0 }
    }

    /// `redis.tls`: the test CA when the nodes speak TLS.
    public var tlsConfiguration: RedisTLSConfiguration? { nodes.first?.tlsConfiguration }

    /// `nodeTimeout`: how long a silent node takes to be marked failed. Full coverage is not required, so
    /// the other primaries keep serving their slots while one is down (what the kill test checks).
    /// `tls`: every node speaks only TLS (`--tls-port`), to clients and on the cluster bus, and
    /// announces its TLS port in `CLUSTER SLOTS` (`--tls-cluster yes`).
    /// `replicas`: per primary; a replica takes its primary's place `nodeTimeout` and an election after
    /// the primary stops answering (`--cluster-replica-validity-factor 0`: however stale it is).
    public init(masters: Int = 3, replicas: Int = 0, nodeTimeout: Duration = .seconds(5), tls: Bool = false) async throws {
        self.tls = tls
        self.masters = masters
        var nodes: [RedisServer] = []
        var busPorts: [Int] = []
        for _ in 0..<(masters * (1 + replicas)) {
            // A picked port may be taken before the node binds it (tests run in parallel): the node then
            // exits, and is started again with other ports (RedisServer retries its client port).
            var attempt = 1
            while true {
                let busPort = try freeLoopbackPort()
                do {
                    var arguments = [
                        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", String(Int(nodeTimeout / .milliseconds(1))),
                        "--cluster-require-full-coverage", "no", "--cluster-replica-validity-factor", "0",
                        // The bus port is the client port + 10 000 unless given: a free port of its own
                        // instead, since client port + 10 000 may be taken or past 65 535.
                        "--cluster-port", String(busPort),
                    ]
                    if tls {
                        // On the bus a node is a TLS client too, and the server certificate is for server
                        // authentication only: it presents a client's certificate of the same CA.
                        arguments += [
                            "--tls-cluster", "yes",
                            "--tls-client-cert-file", TestCertificates.pem("com.example.shop"),
                            "--tls-client-key-file", TestCertificates.key("com.example.shop"),
                        ]
                    }
                    nodes.append(try await RedisServer(tls: tls, extraArguments: arguments))
                    busPorts.append(busPort)
                    break
                } catch  where attempt < 3 {
                    attempt += 1
                }
            }
        }
        self.nodes = nodes
        for (index, node) in nodes.enumerated() {
            let client = try node.client(logLevel: .critical)
            if index < masters {
                let first = RedisSlot.count * index / masters
                let last = RedisSlot.count * (index + 1) / masters - 1
                try await client.send(RedisCommand("CLUSTER", "ADDSLOTSRANGE", String(first), String(last)))
            }
            // Distinct epochs up front, as redis-cli does: no epoch collision to resolve at start.
            try await client.send(RedisCommand("CLUSTER", "SET-CONFIG-EPOCH", String(index + 1)))
            if index > 0 { try await client.send(RedisCommand("CLUSTER", "MEET", "127.0.0.1", String(nodes[0].port), String(busPorts[0]))) }
            await client.close()
        }
        try await waitUntilReady()
        if nodes.count > masters { try await attachReplicas() }
    }

    /// Each replica node follows its primary (`CLUSTER REPLICATE`), until every primary reports its
    /// replicas online (`INFO replication`).
    private func attachReplicas(timeout: Duration = .seconds(60)) async throws {
        for master in 0..<masters {
            let id = try await nodeID(master)
            for replica in replicaIndices(of: master) {
                let client = try nodeClient(replica)
                try await client.send(RedisCommand("CLUSTER", "REPLICATE", id))
                await client.close()
            }
        }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        for master in 0..<masters {
            while try await onlineReplicas(of: master) < replicaIndices(of: master).count {
                guard clock.now < deadline else { throw TestFailure("replicas of node \(master) not online after \(timeout)") }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// How many replicas node `index` reports online (`INFO replication`'s `slaveN:…state=online`).
    public func onlineReplicas(of index: Int) async throws -> Int {
        try await replicationInfo(index).filter { $0.key.hasPrefix("slave") && $0.value.contains("state=online") }.count
    }

    /// Node `index`'s `INFO replication` as fields.
    public func replicationInfo(_ index: Int) async throws -> [String: String] {
        let client = try nodeClient(index)
        defer { Task { await client.close() } }
        let info = try await client.send(RedisCommand("INFO", "replication")).string ?? ""
        return Dictionary(
            info.split(whereSeparator: \.isNewline).compactMap { line -> (String, String)? in
                let parts = line.split(separator: ":", maxSplits: 1)
                return parts.count == 2 ? (String(parts[0]), String(parts[1]).trimmingCharacters(in: .whitespaces)) : nil
            }, uniquingKeysWith: { a, _ in a })
    }

    /// Until node `index` says it is a primary (`role:master`): a replica's promotion.
    public func waitUntilPrimary(_ index: Int, timeout: Duration = .seconds(120)) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while (try? await replicationInfo(index))?["role"] != "master" {
            guard clock.now < deadline else { throw TestFailure("node \(index) not promoted after \(timeout)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// A cluster client seeded with every node, failing fast enough for tests.
    /// `seeds`: the nodes it is configured with (default: every node).
    public func client(seeds: [String]? = nil, maximumWait: Duration = .seconds(20), logLevel: Logger.Level = .info) throws -> RedisCluster
    {
        var configuration = try RedisClusterConfiguration(nodes: seeds ?? addresses)
        configuration.node.tls = tlsConfiguration
        configuration.node.reconnect = RedisReconnectPolicy(
            initialDelay: .milliseconds(20), maximumDelay: .milliseconds(200), maximumWait: maximumWait)
        var logger = Logger(label: "apns.redis.cluster.test")
        logger.logLevel = logLevel
        return RedisCluster(configuration: configuration, logger: logger, eventLoopGroup: RedisServer.clientLoops)
    }

    /// A plain client of node `index` (no routing: sees only that node's keys).
    public func nodeClient(_ index: Int) throws -> RedisClient { try nodes[index].client(logLevel: .critical) }

    /// The index of the node listening on `port`.
    public func index(ofPort port: Int) -> Int? { nodes.firstIndex { $0.port == port } }

    /// Node `index`'s cluster id (`CLUSTER MYID`).
    public func nodeID(_ index: Int) async throws -> String {
        let client = try nodeClient(index)
        defer { Task { await client.close() } }
        return try await client.send(RedisCommand("CLUSTER", "MYID")).string ?? ""
    }

    /// Until every running node says `cluster_state:ok`, knows all nodes and sees every slot assigned.
    public func waitUntilReady(running: [Int]? = nil, timeout: Duration = .seconds(30)) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var last = ""
        while clock.now < deadline {
            var ready = true
            for index in running ?? Array(nodes.indices) {
                let client = try nodeClient(index)
                let info = (try? await client.send(RedisCommand("CLUSTER", "INFO")).string) ?? ""
                await client.close()
                let fields = Dictionary(
                    info.split(whereSeparator: \.isNewline).compactMap { line -> (String, String)? in
                        let parts = line.split(separator: ":", maxSplits: 1)
                        return parts.count == 2 ? (String(parts[0]), String(parts[1]).trimmingCharacters(in: .whitespaces)) : nil
                    }, uniquingKeysWith: { a, _ in a })
                if fields["cluster_state"] != "ok" || fields["cluster_known_nodes"] != String(nodes.count)
                    || fields["cluster_slots_ok"] != String(RedisSlot.count)
                {
                    ready = false
                    last = "node \(index): \(info.replacingOccurrences(of: "\r\n", with: " "))"
                    break
                }
            }
            if ready { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("cluster not ready after \(timeout): \(last)")
    }

    public func stop() {
        for node in nodes { node.stop() }
    }
}

extension RedisClusterServer {
    /// The cluster `ops/test` started with `ops/redis-cluster` (`APNS_TEST_REDIS_CLUSTER=host:port,…`), if any.
    public static var exported: [String]? {
        guard let value = ProcessInfo.processInfo.environment["APNS_TEST_REDIS_CLUSTER"], !value.isEmpty else { return nil }
        return value.split(separator: ",").map(String.init)
    }
}

/// Which Redis a parameterised test runs against: the Redis stage's suites and the pipeline integration
/// test take it as an argument (`@Test(arguments: RedisTestTarget.allCases)`), so the same test body proves
/// the same behaviour on one server and on a 3-primary cluster.
public enum RedisTestTarget: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case single
    case cluster
    /// One redis-server that speaks only TLS (`rediss://`, the test CA).
    case tls
    /// A 3-primary Redis Cluster whose nodes speak only TLS (clients and cluster bus).
    case tlsCluster

    public var testDescription: String {
        switch self {
        case .single: "one redis-server"
        case .cluster: "Redis Cluster (3 primaries)"
        case .tls: "one redis-server over TLS"
        case .tlsCluster: "Redis Cluster (3 primaries) over TLS"
        }
    }
}

/// A running Redis of either kind, started for one test.
public final class RedisUnderTest: @unchecked Sendable {
    public let target: RedisTestTarget
    /// Set for `.single`.
    public let server: RedisServer?
    /// Set for `.cluster`.
    public let cluster: RedisClusterServer?

    public init(_ target: RedisTestTarget) async throws {
        self.target = target
        switch target {
        case .single, .tls:
            server = try await RedisServer(tls: target == .tls)
            cluster = nil
        case .cluster, .tlsCluster:
            server = nil
            cluster = try await RedisClusterServer(tls: target == .tlsCluster)
        }
    }

    /// A client of the right kind (``RedisClient`` or ``RedisCluster``), failing fast enough for tests.
    public func connection(maximumWait: Duration = .seconds(20), logLevel: Logger.Level = .info) throws -> any RedisConnection {
        if let server { return try server.client(maximumWait: maximumWait, logLevel: logLevel) }
        return try cluster!.client(maximumWait: maximumWait, logLevel: logLevel)
    }

    /// The pipeline file's view of it: `redis.url` for one server, `redis.cluster` for a cluster.
    public var url: String { server?.url ?? RedisConfiguration.defaultURL }
    public var clusterNodes: [String]? { cluster?.addresses }
    /// `redis.tls`: the test CA when the server speaks TLS.
    public var tls: RedisTLSConfiguration? { server?.tlsConfiguration ?? cluster?.tlsConfiguration }

    /// Keys matching `pattern` on every node (KEYS reaches one node only).
    public func keys(_ pattern: String) async throws -> [String] {
        var result: [String] = []
        let clients = try server.map { [try $0.client(logLevel: .critical)] } ?? cluster!.nodes.indices.map { try cluster!.nodeClient($0) }
        for client in clients {
            result += (try await client.send(RedisCommand("KEYS", pattern)).array ?? []).compactMap(\.string)
            await client.close()
        }
        return result
    }

    public func stop() {
        server?.stop()
        cluster?.stop()
    }
}
