import Logging

/// What the roles of the pipeline store share (``GateStore``, ``SettleStore``, ``CampaignStore``,
/// ``RegistrationStore``): the connection, the configuration and key names, and the calls every Redis call
/// of the stores goes through — scripts over groups of one hash tag each (``run(_:header:groups:)``), one
/// script call (``eval(_:keys:arguments:)``), plain commands, and the counters script shared by the
/// settle and the campaigns (``applyCounters(_:operation:)``).
struct StoreRunner: Sendable {
    let client: any RedisConnection
    let configuration: PipelineStoreConfiguration
    let keys: RedisKeys
    let logger: Logger

    /// ``PipelineStore/jobMarkRetention``.
    var jobMarkRetention: Int64 {
        let dedup = configuration.dedupRetention.components.seconds + max(1, configuration.dedupBucketWidth.components.seconds)
        return max(dedup, configuration.campaignRetention?.components.seconds ?? 0)
    }

    /// Runs `script` over `groups` (each the keys of one hash tag): one call with all groups on a single
    /// Redis; one call per slot (``RedisSlot``), in parallel, with ``PipelineStoreConfiguration/oneSlotPerCall``.
    /// ARGV of a call: `header`, the number of its groups, then their arguments; KEYS: their keys.
    /// Returns each group's element of the script's reply, in the order of `groups`.
    func run(_ script: RedisScript, header: RedisArguments, groups: [ScriptGroup]) async throws -> [RedisReply] {
        if groups.isEmpty { return [] }
        let calls = Self.calls(groups, oneSlotPerCall: configuration.oneSlotPerCall)
        func one(_ members: [Int]) async throws -> [RedisReply] {
            var arguments = header
            arguments.append(members.count)
            var keyList = RedisArguments()
            for member in members {
                keyList.append(contentsOf: groups[member].keys)
                arguments.append(contentsOf: groups[member].arguments)
            }
            let reply = try await eval(script, keys: keyList, arguments: arguments)
            guard let replies = reply.array, replies.count == members.count else {
                throw RedisError.unexpectedReply("expected \(members.count) group replies, got \(reply)")
            }
            return replies
        }
        var result = Array(repeating: RedisReply.null, count: groups.count)
        if calls.count == 1 {
            for (member, reply) in zip(calls[0], try await one(calls[0])) { result[member] = reply }
            return result
        }
        // A struct, not a tuple, as the child tasks' result: a release build once crashed copying a tuple
        // result out of a task group (in `ops/bench scale`; not reproduced since the struct).
        struct CallReplies: Sendable {
            var members: [Int]
            var replies: [RedisReply]
        }
        try await withThrowingTaskGroup(of: CallReplies.self) { tasks in
            for members in calls { tasks.addTask { CallReplies(members: members, replies: try await one(members)) } }
            for try await call in tasks {
                for (member, reply) in zip(call.members, call.replies) { result[member] = reply }
            }
        }
        return result
    }

    /// Which groups go in one call: all of them, or those of one slot per call (in first-seen order).
    static func calls(_ groups: [ScriptGroup], oneSlotPerCall: Bool) -> [[Int]] {
        guard oneSlotPerCall else { return [Array(groups.indices)] }
        var calls: [[Int]] = []
        var callOf: [RedisSlot: Int] = [:]
        for (index, group) in groups.enumerated() {
            if let known = callOf[group.slot] {
                calls[known].append(index)
            } else {
                callOf[group.slot] = calls.count
                calls.append([index])
            }
        }
        return calls
    }

    func eval(_ script: RedisScript, keys: RedisArguments, arguments: RedisArguments) async throws -> RedisReply {
        try await client.eval(script, keys: keys, arguments: arguments)
    }

    func eval(_ script: RedisScript, keys: [String], arguments: RedisArguments) async throws -> RedisReply {
        try await client.eval(script, keys: RedisArguments(keys), arguments: arguments)
    }

    func command(_ command: RedisCommand) async throws -> RedisReply {
        try await client.send(command)
    }

    /// Plain commands in one round trip; callers send only keys of one slot together.
    func commands(_ list: [RedisCommand]) async throws -> [RedisReply] {
        try await client.pipeline(list)
    }

    func applyCounters(_ counters: CounterWrites, operation: String) async throws {
        let call = counters.call(markerTTL: configuration.batchMarkerRetention.components.seconds, resolved: [])
        let reply = try await eval(Scripts.counters, keys: call.keys, arguments: call.arguments)
        guard let applied = reply.integer else { throw RedisError.unexpectedReply("\(operation): \(reply)") }
        _ = noteApplied(applied == 1, operation: operation)
    }

    func noteApplied(_ applied: Bool, operation: String) -> Bool {
        if !applied {
            logger.debug("batch already applied; replay ignored", metadata: ["redis.operation": "\(operation)"])
        }
        return applied
    }

    static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }
}

/// A role of the pipeline store: reads the shared context through ``runner``, so a role's code names
/// `keys`, `configuration`, `command(_:)`… as the store's did.
protocol StoreRole {
    var runner: StoreRunner { get }
}

extension StoreRole {
    var client: any RedisConnection { runner.client }
    var configuration: PipelineStoreConfiguration { runner.configuration }
    var keys: RedisKeys { runner.keys }
    var logger: Logger { runner.logger }
    var jobMarkRetention: Int64 { runner.jobMarkRetention }

    func run(_ script: RedisScript, header: RedisArguments, groups: [ScriptGroup]) async throws -> [RedisReply] {
        try await runner.run(script, header: header, groups: groups)
    }

    func eval(_ script: RedisScript, keys: RedisArguments, arguments: RedisArguments) async throws -> RedisReply {
        try await runner.eval(script, keys: keys, arguments: arguments)
    }

    func eval(_ script: RedisScript, keys: [String], arguments: RedisArguments) async throws -> RedisReply {
        try await runner.eval(script, keys: keys, arguments: arguments)
    }

    func command(_ command: RedisCommand) async throws -> RedisReply {
        try await runner.command(command)
    }

    func commands(_ list: [RedisCommand]) async throws -> [RedisReply] {
        try await runner.commands(list)
    }

    func applyCounters(_ counters: CounterWrites, operation: String) async throws {
        try await runner.applyCounters(counters, operation: operation)
    }

    func noteApplied(_ applied: Bool, operation: String) -> Bool {
        runner.noteApplied(applied, operation: operation)
    }
}

/// A token tag of an app: (app, token bucket).
struct TagID: Hashable {
    var app: String
    var bucket: Int
}

/// One group of a script call: keys of one hash tag (so of one slot) and the group's arguments.
public struct ScriptGroup: Sendable {
    var slot: RedisSlot
    /// Every key is in `slot`: the group's tag is in each.
    var keys: RedisArguments
    var arguments: RedisArguments

    public init(tag: String, keys: RedisArguments, arguments: RedisArguments) {
        self.slot = RedisSlot(key: tag)
        self.keys = keys
        self.arguments = arguments
    }
}
