import Foundation
import Logging
import NIOCore
import NIOPosix
import TimeUnits

/// A programming or set-up error of a cluster call: retrying cannot help.
public enum RedisClusterError: Error, Sendable, Hashable, CustomStringConvertible {
    /// One command or script whose keys hash to more than one slot. Redis Cluster refuses it
    /// (`CROSSSLOT`); we refuse it before sending, naming the slots, so the caller's key layout is fixed
    /// rather than a batch half-run. Give the keys one `{hash tag}`.
    case crossSlot(command: String, slots: [Int])
    /// A seed answered, but is not in cluster mode (`cluster-enabled no`): use `redis.url` for it.
    case notACluster(node: String, message: String)
    /// MOVED/ASK kept bouncing between nodes (a slot map that never settles).
    case tooManyRedirections(command: String, last: String)

    public var description: String {
        switch self {
        case .crossSlot(let command, let slots):
            return
                "\(command): keys in different hash slots \(slots) — one call must touch one slot on Redis Cluster (give its keys a common {hash tag})"
        case .notACluster(let node, let message):
            return "\(node) is not a Redis Cluster node (\(message)): configure it as redis.url, not redis.cluster"
        case .tooManyRedirections(let command, let last):
            return "\(command): too many MOVED/ASK redirections (last: \(last))"
        }
    }
}

/// A Redis Cluster client built on ``RedisClient`` (hiredis has no cluster support): one connection per
/// primary, each call routed to the primary owning the hash slot of its keys.
///
/// - The slot map comes from `CLUSTER SLOTS`, read from any node that answers (known primaries first,
///   then the configured seeds), at the first call and again whenever it proves wrong.
/// - `MOVED <slot> <node>`: the slot has a new owner for good (resharding, fail-over). The map is read
///   again and the call sent to the new owner.
/// - `ASK <slot> <node>`: the slot is being migrated and this key is already on the target. The call is
///   sent there once, preceded by `ASKING` in the same round trip; the map is not changed.
/// - `TRYAGAIN` (a multi-key call during a migration), `CLUSTERDOWN`, `READONLY` (a write reached a
///   node demoted to replica since the map was read), a node that does not answer or a slot no one
///   serves: wait with ``RedisReconnectPolicy`` back-off (the cluster configuration's `reconnect`),
///   re-read the map from the other nodes, try again — until `maximumWait`, then
///   ``RedisError/unavailable(waited:lastError:)``, as a single ``RedisClient`` does.
/// - A primary's fail-over is these cases in turn: its connection refused or silent until the cluster
///   marks it failed (`CLUSTERDOWN` from the others meanwhile, with full coverage required), then its
///   replica promoted (the next map read names it), then `MOVED` from the old primary once it is back as
///   a replica. The map is read from any node the last map named, replicas included, so seeds that
///   list only the primaries still find the promoted replica when its old primary is the one gone.
///
/// Calls are not serialised across nodes: this actor only routes; each node's ``RedisClient`` runs its
/// round trips on its own channel and event loop, so calls to different nodes overlap.
///
/// Commands without keys (`PING`, `INFO`, `SCRIPT LOAD`) go to one primary; ``everyPrimary(_:)`` sends
/// one to all of them (`DBSIZE`, `FLUSHALL`, `KEYS`).
public actor RedisCluster: RedisConnection {
    public struct Statistics: Sendable, Hashable {
        public var slotMapRefreshes = 0
        public var moved = 0
        public var asked = 0
        /// Attempts that had to wait (back-off) before being tried again.
        public var retries = 0
    }

    public nonisolated let configuration: RedisClusterConfiguration
    private nonisolated let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    /// Per slot: the index in `primaries` of its owner, or -1 when no node serves it.
    private var owners = [Int](repeating: -1, count: RedisSlot.count)
    private var primaries: [RedisNodeAddress] = []
    /// The replicas the last map named: where the map is read from when primaries are gone.
    private var replicas: [RedisNodeAddress] = []
    private var mapLoaded = false
    /// Set when a node failed: re-read the map before the next attempt.
    private var mapSuspect = false
    private var refreshing: Task<Void, Error>?
    private var clients: [RedisNodeAddress: RedisClient] = [:]
    private var keyTable: RedisCommandKeyTable?
    private var random = SystemRandomNumberGenerator()
    public private(set) var statistics = Statistics()

    /// `eventLoopGroup`: where the nodes' connections run (each picks one of its loops).
    public init(
        configuration: RedisClusterConfiguration, logger: Logger = Logger(label: "apns.redis"),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        var logger = logger
        logger[metadataKey: "redis.cluster"] = "\(configuration.seeds.map(\.description).joined(separator: ","))"
        self.logger = logger
    }

    public init(nodes: [String], logger: Logger = Logger(label: "apns.redis")) throws {
        self.init(configuration: try RedisClusterConfiguration(nodes: nodes), logger: logger)
    }

    // MARK: - RedisConnection

    /// Reads the slot map and connects to every primary, without retrying: no seed answering, a password
    /// refused or a server that is not a cluster fails here, at start. A primary that does not answer
    /// while others do is only logged: its slots may be failing over, and calls for them wait as usual.
    public func connect() async throws {
        try await refreshSlotMap()
        for node in primaries {
            do {
                try await client(for: node).connect()
            } catch let error as RedisError where Self.isNodeFailure(error) {
                logger.warning("redis cluster primary not reachable at start", metadata: ["redis.node": "\(node)", "error": "\(error)"])
            }
        }
    }

    public func close() async {
        for client in clients.values { await client.close() }
    }

    @discardableResult
    public func send(_ command: RedisCommand) async throws -> RedisReply {
        try await ensureSlotMap(command.name)
        let reply = try await routedReply(command, slot: try await slot(of: command))
        if case .error(let message) = reply { throw RedisError.server(message) }
        return reply
    }

    @discardableResult
    public func send(_ command: RedisCommand, routedBy key: String) async throws -> RedisReply {
        let reply = try await routedReply(command, slot: RedisSlot(key: key).value)
        if case .error(let message) = reply { throw RedisError.server(message) }
        return reply
    }

    public nonisolated var redactedDescription: String { configuration.redactedDescription }

    /// The commands grouped by the node owning their slot, one round trip per node, the nodes in
    /// parallel; replies in the order of `commands`. Commands on one node run in order; commands on
    /// different nodes in no defined order (as on a cluster they would anyway). A command redirected or
    /// refused for the moment (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) or whose node failed is sent again on
    /// its own, routed like ``send(_:)``.
    public func pipeline(_ commands: [RedisCommand]) async throws -> [RedisReply] {
        if commands.isEmpty { return [] }
        try await ensureSlotMap("pipeline")
        var slots: [Int?] = []
        slots.reserveCapacity(commands.count)
        for command in commands { slots.append(try await slot(of: command)) }

        var groups: [RedisNodeAddress: [Int]] = [:]
        var unrouted: [Int] = []
        for (index, slot) in slots.enumerated() {
            if let node = currentOwner(of: slot) { groups[node, default: []].append(index) } else { unrouted.append(index) }
        }
        var replies = [RedisReply?](repeating: nil, count: commands.count)
        var again = unrouted
        let work = groups.map { (client(for: $0.key), $0.value) }
        // A struct, not a tuple, as the child tasks' result: a `([Int], Result<…>)` tuple crashed the
        // release build's task group (swift_retain on a bad pointer when the group copied a result).
        let results = await withTaskGroup(of: NodeReplies.self) { group in
            for (client, indices) in work {
                let part = indices.map { commands[$0] }
                group.addTask {
                    do { return NodeReplies(indices: indices, replies: try await client.pipeline(part), failure: nil) } catch {
                        return NodeReplies(indices: indices, replies: [], failure: error as? RedisError ?? .unexpectedReply("\(error)"))
                    }
                }
            }
            var results: [NodeReplies] = []
            for await result in group { results.append(result) }
            return results
        }
        for result in results {
            if let failure = result.failure {
                guard Self.isNodeFailure(failure) else { throw failure }
                mapSuspect = true
                again.append(contentsOf: result.indices)
                continue
            }
            for (index, reply) in zip(result.indices, result.replies) {
                if case .error(let message) = reply, RedisRedirection(message, from: nil) != nil {
                    again.append(index)
                } else {
                    replies[index] = reply
                }
            }
        }
        for index in again.sorted() {
            replies[index] = try await routedReply(commands[index], slot: slots[index])
        }
        return replies.map { $0! }
    }

    public func eval(_ script: RedisScript, keys: [String] = [], arguments: RedisArguments = RedisArguments()) async throws -> RedisReply {
        try await eval(script, keys: RedisArguments(keys), arguments: arguments)
    }

    public func eval(_ script: RedisScript, keys: RedisArguments, arguments: RedisArguments) async throws -> RedisReply {
        let view = RedisArgumentsView(keys)
        let slot = try Self.commonSlot(
            of: (0..<view.count).map { i in view.withElement(i) { RedisSlot(keyBytes: $0).value } }, command: "EVALSHA")
        return try await routed("evalsha", slot: slot) { client, asking in
            guard asking else { return try await client.eval(script, keys: keys, arguments: arguments) }
            // The target may never have seen the script: load it in the same round trip (SCRIPT LOAD
            // needs no ASKING and returns the same digest).
            let replies = try await client.pipeline([
                RedisCommand("SCRIPT", "LOAD", script.source), RedisCommand("ASKING"),
                RedisCommand(evalsha: script, keys: keys, arguments: arguments),
            ])
            if case .error(let message) = replies[2] { throw RedisError.server(message) }
            return replies[2]
        }
    }

    // MARK: - Inspection (tests, operations)

    /// The primaries of the current slot map (read first if needed).
    public func primaryNodes() async throws -> [RedisNodeAddress] {
        try await ensureSlotMap("CLUSTER SLOTS")
        return primaries
    }

    /// The primary that owns `key`'s slot in the current map.
    public func node(forKey key: String) async throws -> RedisNodeAddress? {
        try await ensureSlotMap("CLUSTER SLOTS")
        return currentOwner(of: RedisSlot(key: key).value)
    }

    /// `command` sent to every primary (e.g. `DBSIZE`, `FLUSHALL`, `KEYS pattern`, `SCRIPT FLUSH`); a
    /// node's error reply is returned in place.
    public func everyPrimary(_ command: RedisCommand) async throws -> [RedisNodeAddress: RedisReply] {
        try await ensureSlotMap(command.name)
        var result: [RedisNodeAddress: RedisReply] = [:]
        for node in primaries { result[node] = try await client(for: node).pipeline([command])[0] }
        return result
    }

    /// `command` sent to the primary `node` (a `SCAN` over its keys, say); an error reply throws.
    public func send(_ command: RedisCommand, to node: RedisNodeAddress) async throws -> RedisReply {
        try await ensureSlotMap(command.name)
        return try await client(for: node).send(command)
    }

    // MARK: - Routing

    /// Sends `command` to its slot's owner, following redirections and waiting out transient failures;
    /// returns its reply, an error reply in place.
    private func routedReply(_ command: RedisCommand, slot: Int?) async throws -> RedisReply {
        try await routed(command.name, slot: slot) { client, asking in
            let reply = try await client.pipeline(asking ? [RedisCommand("ASKING"), command] : [command]).last!
            // Redirections go back to `routed`; any other error reply is the caller's.
            if case .error(let message) = reply, RedisRedirection(message, from: nil) != nil {
                throw RedisError.server(message)
            }
            return reply
        }
    }

    private func routed<T>(
        _ operation: String, slot: Int?, _ body: (RedisClient, _ asking: Bool) async throws -> T
    ) async throws -> T {
        let start = ContinuousClock.now
        var attempt = 0
        var redirections = 0
        var askTarget: RedisNodeAddress?
        while true {
            var failure: String
            do {
                let node = try await targetNode(slot: slot, askTarget: askTarget)
                let asking = askTarget != nil
                askTarget = nil
                do {
                    let result = try await body(client(for: node), asking)
                    if attempt > 0 {
                        logger.info(
                            "redis cluster call succeeded after waiting",
                            metadata: [
                                "redis.operation": "\(operation)", "redis.attempts": "\(attempt + 1)",
                            ])
                    }
                    return result
                } catch RedisError.server(let message) {
                    switch RedisRedirection(message, from: node) {
                    case .moved(let movedSlot, let target)?:
                        statistics.moved += 1
                        redirections += 1
                        guard redirections <= 16 else { throw RedisClusterError.tooManyRedirections(command: operation, last: message) }
                        logger.debug("slot moved", metadata: ["redis.slot": "\(movedSlot)", "redis.node": "\(target)"])
                        // The slot's new owner is known now; the rest of the map probably changed too
                        // (a resharding moves many slots): read it once, then trust MOVED for this slot.
                        try? await refreshSlotMap()
                        learn(slot: movedSlot, owner: target)
                        continue
                    case .ask(_, let target)?:
                        statistics.asked += 1
                        redirections += 1
                        guard redirections <= 16 else { throw RedisClusterError.tooManyRedirections(command: operation, last: message) }
                        askTarget = target
                        continue
                    case .retryLater?:
                        failure = message
                        mapSuspect = true
                    case nil:
                        throw RedisError.server(message)
                    }
                } catch let error as RedisError where Self.isNodeFailure(error) {
                    failure = "\(node): \(error)"
                    mapSuspect = true
                }
            } catch RedisError.server(let message) where message.hasPrefix("CLUSTERDOWN") {
                failure = message
            } catch let error as RedisError where Self.isNodeFailure(error) {
                // No node answered CLUSTER SLOTS.
                failure = "\(error)"
            }
            attempt += 1
            try await backOff(operation, attempt: attempt, since: start, failure: failure)
        }
    }

    /// Where the next attempt goes: the node an ASK named, else the slot's owner in the map (read first
    /// when none is loaded; a failure to read it is a node failure like any other, for the back-off).
    private func targetNode(slot: Int?, askTarget: RedisNodeAddress?) async throws -> RedisNodeAddress {
        if let askTarget { return askTarget }
        if !mapLoaded { try await refreshSlotMap() }
        guard let owner = currentOwner(of: slot) else {
            throw RedisError.server("CLUSTERDOWN no node serves slot \(slot ?? -1) in the slot map")
        }
        return owner
    }

    /// After `attempt` failed: gives up once the node policy's `maximumWait` has passed since `start`,
    /// else waits its delay for that attempt and re-reads a map the failure made suspect.
    private func backOff(_ operation: String, attempt: Int, since start: ContinuousClock.Instant, failure: String) async throws {
        statistics.retries += 1
        let delay = try configuration.node.reconnect.retryDelay(
            operation, attempt: attempt, waited: ContinuousClock.now - start, failure: failure, server: "redis cluster",
            logger: logger, using: &random)
        try await Task.sleep(for: delay)
        if mapSuspect { try? await refreshSlotMap() }
    }

    /// A node that did not answer (or is still loading): the per-node clients do not wait themselves
    /// (`maximumWait` zero), so the cluster can re-read the map from the other nodes between attempts.
    private static func isNodeFailure(_ error: RedisError) -> Bool {
        switch error {
        case .unavailable, .connection: return true
        case .server(let message): return error.isTransient || message.hasPrefix("CLUSTERDOWN")
        default: return false
        }
    }

    private func currentOwner(of slot: Int?) -> RedisNodeAddress? {
        guard let slot else { return primaries.first }
        let index = owners[slot]
        return index >= 0 ? primaries[index] : nil
    }

    private func learn(slot: Int, owner: RedisNodeAddress) {
        guard (0..<RedisSlot.count).contains(slot) else { return }
        if let index = primaries.firstIndex(of: owner) {
            owners[slot] = index
        } else {
            primaries.append(owner)
            owners[slot] = primaries.count - 1
        }
    }

    private func client(for node: RedisNodeAddress) -> RedisClient {
        if let client = clients[node] { return client }
        var nodeConfiguration = configuration.configuration(of: node)
        // The cluster waits and re-routes; a node's own client fails at once so it can.
        nodeConfiguration.reconnect.maximumWait = .zero
        var nodeLogger = logger
        nodeLogger[metadataKey: "redis.cluster"] = nil
        let client = RedisClient(configuration: nodeConfiguration, logger: nodeLogger, eventLoopGroup: eventLoopGroup)
        clients[node] = client
        return client
    }

    // MARK: - Slot map

    /// Reads the map unless it is loaded; retried with back-off when no node answers.
    private func ensureSlotMap(_ operation: String) async throws {
        if mapLoaded { return }
        let clock = ContinuousClock()
        let start = clock.now
        var attempt = 0
        while true {
            do {
                try await refreshSlotMap()
                return
            } catch let error as RedisError where Self.isNodeFailure(error) {
                attempt += 1
                statistics.retries += 1
                let waited = clock.now - start
                if let maximumWait = configuration.node.reconnect.maximumWait, waited >= maximumWait {
                    throw RedisError.unavailable(waited: waited, lastError: "\(error)")
                }
                let delay = configuration.node.reconnect.delay(attempt: attempt, using: &random)
                logger.log(
                    level: attempt == 1 ? .warning : .debug, "redis cluster slot map unavailable, retrying",
                    metadata: [
                        "redis.operation": "\(operation)", "redis.retry_in_ms": "\(delay.milliseconds)", "error": "\(error)",
                    ])
                try await Task.sleep(for: delay)
            }
        }
    }

    /// Reads `CLUSTER SLOTS` from the first node that answers. Concurrent callers share one read.
    private func refreshSlotMap() async throws {
        if let refreshing { return try await refreshing.value }
        let task = Task { try await self.loadSlotMap() }
        refreshing = task
        defer { refreshing = nil }
        try await task.value
    }

    private func loadSlotMap() async throws {
        var candidates = primaries
        for node in replicas + configuration.seeds where !candidates.contains(node) { candidates.append(node) }
        var failures: [String] = []
        for node in candidates {
            let reply: RedisReply
            do {
                reply = try await client(for: node).send(RedisCommand("CLUSTER", "SLOTS"))
            } catch RedisError.server(let message) where message.contains("cluster support disabled") {
                throw RedisClusterError.notACluster(node: node.description, message: message)
            } catch let error as RedisError where Self.isNodeFailure(error) {
                failures.append("\(node): \(error)")
                continue
            }
            try apply(reply, from: node)
            try await loadKeyTable(from: node)
            statistics.slotMapRefreshes += 1
            mapLoaded = true
            mapSuspect = false
            return
        }
        throw RedisError.connection("no cluster node answered CLUSTER SLOTS: " + failures.joined(separator: "; "))
    }

    /// `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replica…], …]`.
    private func apply(_ reply: RedisReply, from source: RedisNodeAddress) throws {
        guard let ranges = reply.array else { throw RedisError.unexpectedReply("CLUSTER SLOTS: \(reply)") }
        var newOwners = [Int](repeating: -1, count: RedisSlot.count)
        var newPrimaries: [RedisNodeAddress] = []
        var newReplicas: [RedisNodeAddress] = []
        for range in ranges {
            guard let fields = range.array, fields.count >= 3,
                let first = fields[0].integer, let last = fields[1].integer,
                let primary = fields[2].array, primary.count >= 2, let port = primary[1].integer,
                0 <= first, first <= last, last < RedisSlot.count
            else { throw RedisError.unexpectedReply("CLUSTER SLOTS entry: \(range)") }
            // An empty or `?` host means "the address you reached me on" (cluster-preferred-endpoint-type).
            var host = primary[0].string ?? ""
            if host.isEmpty || host == "?" { host = source.host }
            let node = RedisNodeAddress(host: host, port: Int(port))
            let index: Int
            if let known = newPrimaries.firstIndex(of: node) {
                index = known
            } else {
                newPrimaries.append(node)
                index = newPrimaries.count - 1
            }
            for slot in Int(first)...Int(last) { newOwners[slot] = index }
            for replica in fields.dropFirst(3) {
                guard let endpoint = replica.array, endpoint.count >= 2, let port = endpoint[1].integer else { continue }
                var host = endpoint[0].string ?? ""
                if host.isEmpty || host == "?" { host = source.host }
                let node = RedisNodeAddress(host: host, port: Int(port))
                if !newReplicas.contains(node) { newReplicas.append(node) }
            }
        }
        if newPrimaries != primaries {
            logger.info(
                "redis cluster slot map", metadata: ["redis.primaries": "\(newPrimaries.map(\.description).joined(separator: ","))"])
        }
        owners = newOwners
        primaries = newPrimaries
        replicas = newReplicas.filter { !newPrimaries.contains($0) }
    }

    // MARK: - Keys of a command

    /// The slot of `command`'s keys (nil: no keys, any node will do).
    private func slot(of command: RedisCommand) async throws -> Int? {
        let arguments = RedisArgumentsView(command.arguments)
        if let slot = try commandKeys().slot(of: arguments, command: command) { return slot.value }
        if !(try commandKeys().isMovable(arguments)) { return nil }
        // Keys whose position depends on other arguments (SORT … STORE, XREAD STREAMS…): ask a node.
        let reply = try await routedReply(RedisCommand("COMMAND", arguments: command.arguments.prefixed(with: "GETKEYS")), slot: nil)
        if case .error(let message) = reply { throw RedisError.server(message) }
        return try Self.commonSlot(of: (reply.array ?? []).compactMap { $0.string.map { Array($0.utf8) } }, command: command.name)
    }

    private static func commonSlot(of keys: [[UInt8]], command: String) throws -> Int? {
        try commonSlot(of: keys.map { key in key.withUnsafeBytes { RedisSlot(keyBytes: $0).value } }, command: command)
    }

    /// The one slot of keys whose slots are `keySlots`; nil without keys.
    private static func commonSlot(of keySlots: [Int], command: String) throws -> Int? {
        var slot: Int?
        var slots: Set<Int> = []
        for keySlot in keySlots {
            slots.insert(keySlot)
            slot = slot ?? keySlot
        }
        if slots.count > 1 { throw RedisClusterError.crossSlot(command: command, slots: slots.sorted()) }
        return slot
    }

    /// Where each command's keys are, from the server itself (`COMMAND`, read once): right for every
    /// command of the running version, with no table of ours to keep up to date.
    private func commandKeys() throws -> RedisCommandKeyTable {
        guard let keyTable else { throw RedisError.unexpectedReply("COMMAND table not loaded") }
        return keyTable
    }

    private func loadKeyTable(from node: RedisNodeAddress) async throws {
        if keyTable != nil { return }
        keyTable = try RedisCommandKeyTable(try await client(for: node).send(RedisCommand("COMMAND")))
    }
}

/// What one node answered to its part of a pipeline.
struct NodeReplies: Sendable {
    var indices: [Int]
    var replies: [RedisReply]
    var failure: RedisError?
}

/// A cluster's answer that sends the call elsewhere or asks it to wait.
enum RedisRedirection: Equatable {
    case moved(slot: Int, to: RedisNodeAddress)
    case ask(slot: Int, to: RedisNodeAddress)
    /// `TRYAGAIN` (a multi-key call on a slot in migration), `CLUSTERDOWN` (the cluster is failing a
    /// node over), or `READONLY` (the node was demoted to replica after the map was read): wait, read
    /// the map again, retry.
    case retryLater

    /// `from`: the node that answered, for an endpoint with an empty host (`MOVED 3999 :6380`).
    init?(_ message: String, from node: RedisNodeAddress?) {
        if message.hasPrefix("TRYAGAIN") || message.hasPrefix("CLUSTERDOWN") || message.hasPrefix("READONLY") {
            self = .retryLater
            return
        }
        let parts = message.split(separator: " ")
        guard parts.count == 3, parts[0] == "MOVED" || parts[0] == "ASK", let slot = Int(parts[1]),
            let colon = parts[2].lastIndex(of: ":"), let port = Int(parts[2][parts[2].index(after: colon)...])
        else { return nil }
        var host = String(parts[2][..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.isEmpty { host = node?.host ?? "127.0.0.1" }
        let target = RedisNodeAddress(host: host, port: port)
        self = parts[0] == "MOVED" ? .moved(slot: slot, to: target) : .ask(slot: slot, to: target)
    }
}

/// Where the keys of each command are, as `COMMAND` describes them (first key, last key, step; Redis 7
/// sub-commands such as `OBJECT|ENCODING` separately).
struct RedisCommandKeyTable: Sendable {
    struct Positions: Sendable {
        var first: Int
        var last: Int
        var step: Int
        var movable: Bool
    }

    private var commands: [String: Positions] = [:]

    init(_ reply: RedisReply) throws {
        guard let entries = reply.array else { throw RedisError.unexpectedReply("COMMAND: \(reply)") }
        for entry in entries { add(entry) }
    }

    /// Sub-commands come named `object|encoding`, as they are looked up.
    private mutating func add(_ entry: RedisReply) {
        guard let fields = entry.array, fields.count >= 6, let name = fields[0].string,
            let first = fields[3].integer, let last = fields[4].integer, let step = fields[5].integer
        else { return }
        let flags = (fields[2].array ?? []).compactMap(\.string)
        commands[name.lowercased()] = Positions(first: Int(first), last: Int(last), step: Int(step), movable: flags.contains("movablekeys"))
        if fields.count > 9, let subcommands = fields[9].array {
            for subcommand in subcommands { add(subcommand) }
        }
    }

    private func positions(_ arguments: RedisArgumentsView) -> Positions? {
        guard arguments.count > 0 else { return nil }
        let name = arguments.lowercased(0)
        guard var positions = commands[name] else { return nil }
        if positions.first == 0, arguments.count > 1, let sub = commands[name + "|" + arguments.lowercased(1)] {
            positions = sub
        }
        return positions
    }

    /// Whether only the server can tell where the keys are (`COMMAND GETKEYS`).
    func isMovable(_ arguments: RedisArgumentsView) -> Bool {
        guard !Self.scriptCalls.contains(arguments.count > 0 ? arguments.lowercased(0) : "") else { return false }
        return positions(arguments)?.movable ?? false
    }

    private static let scriptCalls: Set<String> = ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"]

    /// The one slot of the command's keys; nil when it has none or only the server can tell
    /// (``isMovable(_:)``). Keys in two slots throw ``RedisClusterError/crossSlot(command:slots:)``.
    func slot(of arguments: RedisArgumentsView, command: RedisCommand) throws -> RedisSlot? {
        guard arguments.count > 0 else { return nil }
        var range: StrideThrough<Int>
        if Self.scriptCalls.contains(arguments.lowercased(0)) {
            // `EVALSHA sha numkeys key… arg…`
            guard arguments.count >= 3, let count = Int(arguments.lowercased(2)), count > 0, arguments.count >= 3 + count else {
                return nil
            }
            range = stride(from: 3, through: 2 + count, by: 1)
        } else {
            guard let positions = positions(arguments), !positions.movable, positions.first > 0, positions.first < arguments.count else {
                return nil
            }
            let last = positions.last < 0 ? arguments.count + positions.last : min(positions.last, arguments.count - 1)
            guard last >= positions.first else { return nil }
            range = stride(from: positions.first, through: last, by: max(1, positions.step))
        }
        var slot: RedisSlot?
        var slots: Set<Int> = []
        for index in range {
            let keySlot = arguments.withElement(index) { RedisSlot(keyBytes: $0) }
            slots.insert(keySlot.value)
            slot = slot ?? keySlot
        }
        if slots.count > 1 { throw RedisClusterError.crossSlot(command: command.name, slots: slots.sorted()) }
        return slot
    }
}

/// The arguments of one command read in place (no copy per argument): a command of a large pipeline
/// is routed by hashing its key's bytes where they are.
struct RedisArgumentsView {
    private let arguments: RedisArguments
    private let offsets: [Int]

    init(_ arguments: RedisArguments) {
        self.arguments = arguments
        var offsets: [Int] = []
        offsets.reserveCapacity(arguments.lengths.count)
        var offset = 0
        for length in arguments.lengths {
            offsets.append(offset)
            offset += length
        }
        self.offsets = offsets
    }

    var count: Int { offsets.count }

    func withElement<R>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let start = offsets[index]
        let length = arguments.lengths[index]
        return arguments.bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start..<start + length])) }
    }

    func lowercased(_ index: Int) -> String {
        withElement(index) { String(decoding: $0, as: UTF8.self).lowercased() }
    }
}

extension RedisArguments {
    /// `word` followed by these arguments.
    func prefixed(with word: String) -> RedisArguments {
        var result = RedisArguments([word])
        result.append(contentsOf: self)
        return result
    }
}
