import Foundation
import TestSupport
import Testing

@testable import Redis
@testable import RedisClient

@Suite struct ClusterConfigurationTests {
    @Test func parsesNodeLists() throws {
        let plain = try RedisClusterConfiguration(nodes: ["10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.1:7000"])
        #expect(plain.seeds == [RedisNodeAddress(host: "10.0.0.1", port: 7000), RedisNodeAddress(host: "10.0.0.2", port: 7001)])
        #expect(plain.node.password == nil)

        let secret = try RedisClusterConfiguration(nodes: ["redis://app:s3cret@10.0.0.1:7000", "10.0.0.2:7001"])
        #expect(secret.node.username == "app")
        #expect(secret.configuration(of: secret.seeds[1]).password == "s3cret")
        #expect(secret.configuration(of: secret.seeds[1]).port == 7001)
        #expect(!secret.redactedDescription.contains("s3cret"))

        #expect(throws: RedisError.self) { try RedisClusterConfiguration(nodes: []) }
        #expect(throws: RedisError.self) { try RedisClusterConfiguration(nodes: ["10.0.0.1:7000/2"]) }
        #expect(throws: RedisError.self) { try RedisClusterConfiguration(nodes: ["10.0.0.1:notaport"]) }
        #expect(try RedisClusterConfiguration(nodes: ["rediss://10.0.0.1:7000"]).node.tls != nil)  // TLS (TLSTests)
        #expect(throws: RedisError.self) {
            try RedisClusterConfiguration(nodes: ["redis://:a@10.0.0.1:7000", "redis://:b@10.0.0.2:7000"])
        }
    }

    @Test func redirectionsAreParsed() {
        let from = RedisNodeAddress(host: "10.0.0.9", port: 7000)
        #expect(
            RedisRedirection("MOVED 3999 127.0.0.1:6381", from: from)
                == .moved(slot: 3999, to: RedisNodeAddress(host: "127.0.0.1", port: 6381)))
        #expect(RedisRedirection("ASK 12 :6382", from: from) == .ask(slot: 12, to: RedisNodeAddress(host: "10.0.0.9", port: 6382)))
        #expect(RedisRedirection("MOVED 1 [::1]:7001", from: nil) == .moved(slot: 1, to: RedisNodeAddress(host: "::1", port: 7001)))
        #expect(RedisRedirection("TRYAGAIN Multiple keys request during rehashing of slot", from: nil) == .retryLater)
        #expect(RedisRedirection("CLUSTERDOWN The cluster is down", from: nil) == .retryLater)
        #expect(RedisRedirection("READONLY You can't write against a read only replica.", from: nil) == .retryLater)
        #expect(RedisRedirection("ERR wrong number of arguments", from: nil) == nil)
        #expect(RedisRedirection("MOVED x 127.0.0.1:1", from: nil) == nil)
    }

    @Test func targetIsAClusterOnlyWhenNodesAreGiven() throws {
        #expect(
            try RedisTarget(url: "redis://127.0.0.1:6380", cluster: nil) == .single(try RedisConfiguration(url: "redis://127.0.0.1:6380")))
        guard case .cluster(let cluster) = try RedisTarget(url: RedisConfiguration.defaultURL, cluster: ["127.0.0.1:7000"]) else {
            Issue.record("expected a cluster target")
            return
        }
        #expect(cluster.seeds == [RedisNodeAddress(host: "127.0.0.1", port: 7000)])
    }
}

/// A real 3-primary cluster per test (``RedisClusterServer``): tests that migrate slots or kill a node
/// cannot disturb the others.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct ClusterClientTests {
    /// Keys spread over the three primaries land on the node owning their slot, as the nodes themselves
    /// compute it (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`), and nowhere else.
    @Test func routesEveryKeyToItsSlotsOwner() async throws {
        let server = try await RedisClusterServer()
        defer { server.stop() }
        let cluster = try server.client()
        try await cluster.connect()
        let keys = (0..<300).map { "route:\($0)" }
        for key in keys.prefix(150) { try await cluster.send(RedisCommand("SET", key, "v-\(key)")) }
        // The other half as one pipeline: split by node, replies in order.
        let replies = try await cluster.pipeline(keys.dropFirst(150).map { RedisCommand("SET", $0, "v-\($0)") })
        #expect(replies == Array(repeating: .status("OK"), count: 150))
        let readBack = try await cluster.pipeline(keys.map { RedisCommand("GET", $0) })
        #expect(readBack.map(\.string) == keys.map { "v-\($0)" })

        let ranges = try await slotRanges(server)
        var perNode = [Int](repeating: 0, count: 3)
        let probe = try server.nodeClient(0)
        for key in keys {
            let slot = Int(try await probe.send(RedisCommand("CLUSTER", "KEYSLOT", key)).integer ?? -1)
            #expect(slot == RedisSlot(key: key).value)
            let owner = ranges.first { $0.slots.contains(slot) }!.node
            perNode[owner] += 1
            // On its owner, without any redirection; on the others, a MOVED.
            let direct = try server.nodeClient(owner)
            #expect(try await direct.send(RedisCommand("GET", key)).string == "v-\(key)")
            let other = try server.nodeClient((owner + 1) % 3)
            #expect(try await other.pipeline([RedisCommand("GET", key)])[0].isMoved)
        }
        #expect(perNode.allSatisfy { $0 > 50 })  // 300 keys over 3 equal slot ranges
        for node in 0..<3 {
            #expect(try await server.nodeClient(node).send(RedisCommand("DBSIZE")).integer == Int64(perNode[node]))
        }
        let sizes = try await cluster.everyPrimary(RedisCommand("DBSIZE"))
        #expect(sizes.values.compactMap(\.integer).reduce(0, +) == 300)
        #expect(await cluster.statistics.moved == 0)
    }

    /// A script's keys under one hash tag run on the tag's node; keys in two slots are refused before
    /// anything is sent.
    @Test func scriptsRunOnTheirTagsNodeAndCrossSlotCallsAreRefused() async throws {
        let server = try await RedisClusterServer()
        defer { server.stop() }
        let cluster = try server.client()
        let script = RedisScript(
            "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); return redis.call('GET', KEYS[1])")
        var owners: Set<RedisNodeAddress> = []
        for tag in ["a", "b", "c", "d", "e", "f"] {
            let keys = ["{\(tag)}:one", "{\(tag)}:two"]
            let reply = try await cluster.eval(script, keys: keys, arguments: RedisArguments([tag]))
            #expect(reply.string == tag)
            owners.insert(try #require(try await cluster.node(forKey: keys[0])))
        }
        #expect(owners.count > 1)

        let keys = ["cross:one", "cross:two"]
        #expect(RedisSlot(key: keys[0]) != RedisSlot(key: keys[1]))
        await #expect(throws: RedisClusterError.crossSlot(command: "EVALSHA", slots: keys.map { RedisSlot(key: $0).value }.sorted())) {
            try await cluster.eval(script, keys: keys, arguments: RedisArguments(["x"]))
        }
        await #expect(throws: RedisClusterError.self) { try await cluster.send(RedisCommand("DEL", keys[0], keys[1])) }
        let existing = try await cluster.pipeline(keys.map { RedisCommand("EXISTS", $0) })
        #expect(existing == [.integer(0), .integer(0)])
        // Multi-key commands within one slot are fine.
        #expect(try await cluster.send(RedisCommand("DEL", "{a}:one", "{a}:two")) == .integer(2))
    }

    /// One slot migrated by hand, as `redis-cli --cluster reshard` does it: during the migration a key
    /// already moved (or new) is answered with ASK and served by the target after ASKING, a key not moved
    /// yet by the source; after `SETSLOT NODE` the old owner answers MOVED and the client re-reads the
    /// map and follows.
    @Test func followsAskDuringAMigrationAndMovedAfterIt() async throws {
        let server = try await RedisClusterServer()
        defer { server.stop() }
        let cluster = try server.client()
        try await cluster.connect()
        let moved = "{mig}:moved"
        let stays = "{mig}:stays"
        let fresh = "{mig}:fresh"
        let scripted = "{mig}:scripted"
        let slot = RedisSlot(key: moved).value
        try await cluster.send(RedisCommand("SET", moved, "1"))
        try await cluster.send(RedisCommand("SET", stays, "2"))

        let ranges = try await slotRanges(server)
        let source = ranges.first { $0.slots.contains(slot) }!.node
        let target = (source + 1) % 3
        let sourceID = try await server.nodeID(source)
        let targetID = try await server.nodeID(target)
        let sourceClient = try server.nodeClient(source)
        let targetClient = try server.nodeClient(target)
        try await targetClient.send(RedisCommand("CLUSTER", "SETSLOT", String(slot), "IMPORTING", sourceID))
        try await sourceClient.send(RedisCommand("CLUSTER", "SETSLOT", String(slot), "MIGRATING", targetID))
        try await sourceClient.send(RedisCommand("MIGRATE", "127.0.0.1", String(server.nodes[target].port), "", "0", "5000", "KEYS", moved))

        // Mid-migration: `moved` is only on the target, `stays` only on the source.
        #expect(try await cluster.send(RedisCommand("GET", moved)).string == "1")
        #expect(try await cluster.send(RedisCommand("GET", stays)).string == "2")
        try await cluster.send(RedisCommand("SET", fresh, "3"))
        let script = RedisScript("return redis.call('SET', KEYS[1], ARGV[1])")
        #expect(try await cluster.eval(script, keys: [scripted], arguments: RedisArguments(["4"])) == .status("OK"))
        let asked = await cluster.statistics.asked
        #expect(asked >= 3)  // GET moved, SET fresh, the script; `stays` needed none
        let onTarget = try await targetClient.pipeline([
            RedisCommand("ASKING"), RedisCommand("EXISTS", moved, fresh, scripted),
        ])
        #expect(onTarget[1] == .integer(3))
        #expect(try await sourceClient.send(RedisCommand("EXISTS", stays)) == .integer(1))

        // Finish: move the rest, give the slot to the target on every node.
        try await sourceClient.send(RedisCommand("MIGRATE", "127.0.0.1", String(server.nodes[target].port), "", "0", "5000", "KEYS", stays))
        for node in 0..<3 {
            try await server.nodeClient(node).send(RedisCommand("CLUSTER", "SETSLOT", String(slot), "NODE", targetID))
        }
        #expect(try await cluster.pipeline([RedisCommand("GET", stays)])[0].string == "2")
        #expect(await cluster.statistics.moved >= 1)
        #expect(try await cluster.node(forKey: stays) == RedisNodeAddress(host: "127.0.0.1", port: server.nodes[target].port))
        let values = try await cluster.pipeline([moved, stays, fresh, scripted].map { RedisCommand("GET", $0) })
        #expect(values.map(\.string) == ["1", "2", "3", "4"])
    }

    /// A primary killed: calls for its slots fail with ``RedisError/unavailable(waited:lastError:)``
    /// after the configured wait (no hang, no crash), the other primaries keep serving theirs, and once
    /// the node is back the same client uses it again.
    @Test func aKilledNodeFailsItsCallsClearlyAndIsUsedAgainWhenBack() async throws {
        let server = try await RedisClusterServer()
        defer { server.stop() }
        let cluster = try server.client(maximumWait: .milliseconds(500), logLevel: .critical)
        try await cluster.connect()
        let ranges = try await slotRanges(server)
        func key(on node: Int) -> String {
            (0...).lazy.map { "kill:\($0)" }.first { key in ranges.first { $0.slots.contains(RedisSlot(key: key).value) }!.node == node }!
        }
        let onVictim = key(on: 2)
        let onSurvivor = key(on: 0)
        try await cluster.send(RedisCommand("SET", onVictim, "before"))

        await server.nodes[2].kill()
        await #expect {
            try await cluster.send(RedisCommand("SET", onVictim, "during"))
        } throws: { error in
            guard case RedisError.unavailable(_, let lastError) = error else { return false }
            return lastError.contains(String(server.nodes[2].port))
        }
        // The other primaries keep serving their slots meanwhile.
        try await cluster.send(RedisCommand("SET", onSurvivor, "alive"))
        #expect(try await cluster.send(RedisCommand("GET", onSurvivor)).string == "alive")

        try await server.nodes[2].start()  // same port, same nodes.conf: it rejoins with its slots
        try await server.waitUntilReady()
        #expect(try await cluster.send(RedisCommand("SET", onVictim, "after")) == .status("OK"))
        #expect(try await cluster.send(RedisCommand("GET", onVictim)).string == "after")
    }

    /// The first seed is down: the slot map comes from the next one, and calls for the live primaries
    /// go through.
    @Test func aDeadSeedIsSkipped() async throws {
        let server = try await RedisClusterServer()
        defer { server.stop() }
        let ranges = try await slotRanges(server)
        await server.nodes[0].kill()
        let cluster = try server.client(maximumWait: .milliseconds(300), logLevel: .critical)
        try await cluster.connect()
        #expect(try await cluster.primaryNodes().count == 3)
        let key = (0...).lazy.map { "seed:\($0)" }.first { key in ranges.first { $0.slots.contains(RedisSlot(key: key).value) }!.node == 1
        }!
        #expect(try await cluster.send(RedisCommand("SET", key, "1")) == .status("OK"))
        // Only the dead one given: a start-up error, at once.
        await #expect(throws: RedisError.self) { try await RedisCluster(nodes: ["127.0.0.1:\(server.nodes[0].port)"]).connect() }
    }

    /// A plain server given as a cluster node: a start-up error that says what to do.
    @Test func aPlainServerIsRefusedAsAClusterNode() async throws {
        let plain = try await RedisServer()
        defer { plain.stop() }
        let cluster = try RedisCluster(nodes: ["127.0.0.1:\(plain.port)"])
        await #expect {
            try await cluster.connect()
        } throws: { error in
            guard case RedisClusterError.notACluster = error else { return false }
            return "\(error)".contains("redis.url")
        }
    }

    /// The cluster `ops/test` starts with `ops/redis-cluster`, when it exported one: the script builds a
    /// cluster this client can use.
    @Test(
        .enabled(if: RedisClusterServer.exported != nil, "APNS_TEST_REDIS_CLUSTER not set: ops/test starts ops/redis-cluster and sets it"))
    func theClusterOfOpsRedisClusterServesEveryPrimary() async throws {
        let cluster = try RedisCluster(nodes: RedisClusterServer.exported ?? [])
        try await cluster.connect()
        let primaries = try await cluster.primaryNodes()
        #expect(primaries.count == 3)
        let prefix = "ops-cluster-test:\(UUID().uuidString)"
        let keys = (0..<60).map { "\(prefix):\($0)" }
        _ = try await cluster.pipeline(keys.map { RedisCommand("SET", $0, "1", "EX", "60") })
        var seen: Set<RedisNodeAddress> = []
        for key in keys { seen.insert(try #require(try await cluster.node(forKey: key))) }
        #expect(seen.count == 3)
        #expect(try await cluster.pipeline(keys.map { RedisCommand("GET", $0) }).allSatisfy { $0.string == "1" })
        _ = try await cluster.pipeline(keys.map { RedisCommand("DEL", $0) })
    }
}

/// The node indices of `server` and the slots each owns, from `CLUSTER SLOTS` of node 0.
private func slotRanges(_ server: RedisClusterServer) async throws -> [(node: Int, slots: ClosedRange<Int>)] {
    let reply = try await server.nodeClient(0).send(RedisCommand("CLUSTER", "SLOTS"))
    return try (reply.array ?? []).map { range in
        let fields = try #require(range.array)
        let port = Int(try #require(fields[2].array?[1].integer))
        return (try #require(server.index(ofPort: port)), Int(fields[0].integer!)...Int(fields[1].integer!))
    }
}

extension RedisReply {
    var isMoved: Bool {
        if case .error(let message) = self { return message.hasPrefix("MOVED ") }
        return false
    }
}
