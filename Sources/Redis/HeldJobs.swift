import Foundation
import TimeUnits

/// The byte caps on held jobs (design §2.11): what paused, scheduled and paced campaigns (and
/// `apps[].max_rate`) may keep in Redis, in total and per campaign. Each of the ``RedisKeys/heldShards``
/// held slots takes a share of each cap, so no one node of a cluster holds more than its share; a job
/// whose shard is full is not held (``HeldAnswer/full``): `run` leaves it in Kafka and its partition waits.
public struct HeldCaps: Sendable, Hashable {
    /// All campaigns together (`redis.held_max_bytes`).
    public var totalBytes: Int64
    /// One campaign, or one app's `max_rate` (`redis.held_campaign_max_bytes`).
    public var campaignBytes: Int64

    /// Sized for a small Redis (operations §3): 128 MiB of held jobs at most, 64 MiB per campaign (about
    /// 120 000 jobs of ~0.4 KiB, with Redis's own cost per job).
    public static let defaultTotalBytes: Int64 = 128 << 20
    public static let defaultCampaignBytes: Int64 = 64 << 20

    public init(totalBytes: Int64 = HeldCaps.defaultTotalBytes, campaignBytes: Int64 = HeldCaps.defaultCampaignBytes) {
        self.totalBytes = totalBytes
        self.campaignBytes = campaignBytes
    }

    /// One shard's share of the total.
    var shardTotal: Int64 { max(1, totalBytes / Int64(RedisKeys.heldShards)) }
    /// One shard's share of a campaign's cap.
    var shardCampaign: Int64 { max(1, campaignBytes / Int64(RedisKeys.heldShards)) }
}

/// Jobs of one campaign the gate (or a transport) holds back, in one deferral call (design §2.11–§2.13).
public struct Deferral: Sendable, Hashable {
    public enum Mode: Sendable, Hashable {
        /// Hold every job until `dueMs` (a pause: now, released on resume; a scheduled start: its time).
        case hold(dueMs: Int64)
        /// Pace: each job gets the next slot of the campaign's shared virtual clock (`{<p>}:pace:<id>`),
        /// 1/rate s apart, never before `notBeforeMs`; the jobs whose slot is due now are admitted, the
        /// others held until their slot.
        case pace(rate: Int, notBeforeMs: Int64)
    }

    public var campaign: String
    public var mode: Mode
    /// The messages to hold (``DeferredMessage/member(key:value:)``), in the order they came.
    public var messages: [[UInt8]]

    public init(campaign: String, mode: Mode, messages: [[UInt8]]) {
        self.campaign = campaign
        self.mode = mode
        self.messages = messages
    }

    /// The kind byte its stored members start with (``DeferredMessage``).
    var kind: UInt8 {
        if case .pace = mode { UInt8(ascii: "S") } else { UInt8(ascii: "H") }
    }
}

/// What a deferral call made of one message.
public enum HeldAnswer: Sendable, Hashable {
    /// Paced and its slot is due now: send it (nothing is stored).
    case admitted
    /// Held in Redis (or held already: a redelivered copy), released when due.
    case held
    /// Not held: its shard of the held slots is at a cap (``HeldCaps``). Nothing was stored and no pacing
    /// slot taken; the caller keeps the job and tries again when there is room.
    case full
}

/// How a deferred job is kept in `{<p>:held:<n>}:jobs:<campaign>`: a kind byte (`H` held: gated again when
/// released; `S` holds a pacing slot: admitted when released, without taking another), the Kafka key it
/// came with, a 0 byte, the message's value. Keys are token hex or a channel id: no 0 byte.
public enum DeferredMessage {
    /// The message as the gate holds it (the kind byte is added when it is stored).
    public static func member(key: [UInt8]?, value: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((key?.count ?? 0) + 1 + value.count)
        if let key { out.append(contentsOf: key) }
        out.append(0)
        out.append(contentsOf: value)
        return out
    }

    /// A stored member's parts: whether it holds a pacing slot, its key (nil when empty) and its value.
    public static func parse(_ stored: [UInt8]) -> (slotted: Bool, key: [UInt8]?, value: [UInt8]) {
        guard let kind = stored.first else { return (false, nil, []) }
        let body = stored.dropFirst()
        guard let zero = body.firstIndex(of: 0) else { return (kind == UInt8(ascii: "S"), nil, Array(body)) }
        let key = Array(body[..<zero])
        return (kind == UInt8(ascii: "S"), key.isEmpty ? nil : key, Array(body[(zero + 1)...]))
    }

    /// The message of a stored member (without its kind byte): what ``member(key:value:)`` made.
    public static func message(of stored: [UInt8]) -> [UInt8] { Array(stored.dropFirst()) }
}

/// A held job as the release reads it.
public struct HeldMessage: Sendable, Hashable {
    /// The stored member (kind byte, key, 0, value).
    public var stored: [UInt8]
    /// Read from the single sorted set of an older version (`{<p>}:deferred:<id>`), not from a shard.
    public var isLegacy: Bool

    public init(stored: [UInt8], isLegacy: Bool = false) {
        self.stored = stored
        self.isLegacy = isLegacy
    }
}

/// A job waiting at a cap, asked about (``PipelineStore/heldRoom(_:)``): its campaign (the name it would be
/// held under) and its Kafka key and value (only their shard and size are sent).
public struct HeldRoomRequest: Sendable {
    public var campaign: String
    public var shard: Int
    /// What it would count against the caps.
    public var bytes: Int64

    public init(campaign: String, key: [UInt8]?, value: [UInt8]) {
        self.campaign = campaign
        shard = RedisKeys.heldShard(key: key, value: value)
        // Its stored member (kind, key, 0, value) and Redis's own cost.
        bytes = Int64(2 + (key?.count ?? 0) + value.count) + PipelineStore.heldOverheadPerJob
    }
}

/// What one campaign holds in Redis.
public struct HeldUsage: Sendable, Hashable {
    public var jobs: Int64
    /// The messages' bytes plus Redis's own cost per job (``PipelineStore/heldOverheadPerJob``): what the
    /// caps count. Jobs held by an older version count their jobs only.
    public var bytes: Int64

    public init(jobs: Int64 = 0, bytes: Int64 = 0) {
        self.jobs = jobs
        self.bytes = bytes
    }
}

extension PipelineStore {
    /// What a held job costs Redis beyond its member's bytes (sorted-set entry, skiplist node, allocator
    /// rounding), counted with every job against the caps so that they bound Redis's memory rather than the
    /// messages alone. Measured: 160 bytes per job with redis-server 7.0.15 and members of 370–570 bytes
    /// (`HeldJobsStoreTests.heldBytesFollowRedisMemory`, `used_memory` over 20 000 held jobs).
    public static let heldOverheadPerJob: Int64 = 160

    /// Holds messages of paused, scheduled and paced campaigns in the held slots, paced ones taking their
    /// slots of the campaign's clock first (design §2.11–§2.13). Returns, per deferral and message, what
    /// became of it. A message held already is held once (a paced one keeps its slot). With
    /// `enforcingCaps` (the gate) a message whose shard is at a cap (``PipelineStoreConfiguration/heldCaps``)
    /// is ``HeldAnswer/full``: nothing stored, no slot taken. Without it (jobs a transport held back,
    /// taken from Kafka already) everything is held.
    ///
    /// Calls: the campaigns listed in `{<p>}:deferred` (with the paced ones' slots: one call in `{<p>}`), the
    /// shards' writes (one call on a single Redis, one per slot on a cluster), the listing again once
    /// something was stored (a release that found the campaign empty meanwhile may have removed it); paced
    /// deferrals first look their messages up in their shards (one call more), so that a redelivered copy
    /// or a job at the cap takes no slot.
    public func deferJobs(
        _ deferrals: [Deferral], nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000), enforcingCaps: Bool = true
    ) async throws -> [[HeldAnswer]] {
        if deferrals.isEmpty { return [] }
        let caps = capsHeader(enforcing: enforcingCaps)
        let batch = HeldBatch(deferrals)
        // Per message: E held already, R room (to be held, or admitted if its slot is due), F at a cap.
        let flags = try await checkPaced(batch, caps: caps)
        // The campaigns listed (before anything is stored) and the paced ones' slots.
        let scores = try await reserveSlots(deferrals, flags: flags, nowMs: nowMs)
        let (answers, listed, written) = try await store(batch, flags: flags, scores: scores, caps: caps)
        if !listed.isEmpty {
            // Listed again now that they hold something (see the doc comment): a set, so idempotent.
            var arguments = RedisArguments([keys.deferredCampaigns])
            for name in listed.sorted() { arguments.append(name) }
            _ = try await command(RedisCommand("SADD", arguments: arguments))
            try await awaitReplicas(of: written.sorted() + [keys.deferredCampaigns])
        }
        return answers
    }

    /// With ``PipelineStoreConfiguration/heldReplicaAcks`` set: until that many replicas of each node
    /// written (one key per slot in `keys`) acknowledge what this connection wrote to it (`WAIT`), retried
    /// up to ``PipelineStoreConfiguration/heldReplicaWait``, then ``RedisError/unavailable(waited:lastError:)``:
    /// the messages then stay unsettled in Kafka, to be held again.
    private func awaitReplicas(of keys: [String]) async throws {
        let wanted = configuration.heldReplicaAcks
        guard wanted > 0 else { return }
        let clock = ContinuousClock()
        let start = clock.now
        for key in keys {
            while true {
                let acked = try await client.send(RedisCommand("WAIT", String(wanted), "1000"), routedBy: key).integer ?? 0
                if acked >= wanted { break }
                let waited = clock.now - start
                let problem = "held jobs acknowledged by \(acked) of \(wanted) replicas (redis.held_replica_acks) of the node of \(key)"
                if waited >= configuration.heldReplicaWait { throw RedisError.unavailable(waited: waited, lastError: problem) }
                logger.warning("held jobs not on enough replicas yet, waiting", metadata: ["redis.problem": "\(problem)"])
            }
        }
    }

    /// A deferral call's messages as stored (kind byte first) and, per deferral, its messages by shard.
    private struct HeldBatch {
        var deferrals: [Deferral]
        var members: [[[UInt8]]] = []
        /// Per deferral, its shards in the order first met, each with its messages' indices in order.
        var shards: [[(shard: Int, indices: [Int])]] = []

        init(_ deferrals: [Deferral]) {
            self.deferrals = deferrals
            for d in deferrals {
                var stored: [[UInt8]] = []
                stored.reserveCapacity(d.messages.count)
                var byShard: [Int: [Int]] = [:]
                var order: [Int] = []
                for (i, m) in d.messages.enumerated() {
                    var member = [d.kind]
                    member.append(contentsOf: m)
                    stored.append(member)
                    let shard = RedisKeys.heldShard(message: m)
                    if byShard[shard] == nil { order.append(shard) }
                    byShard[shard, default: []].append(i)
                }
                members.append(stored)
                shards.append(order.map { ($0, byShard[$0]!) })
            }
        }
    }

    /// The flags of ``Scripts/heldCheck`` for the paced deferrals' messages (`R` for the others: a hold
    /// takes no slot, its store checks the caps).
    private func checkPaced(_ batch: HeldBatch, caps: RedisArguments) async throws -> [[UInt8]] {
        var flags = batch.deferrals.map { [UInt8](repeating: UInt8(ascii: "R"), count: $0.messages.count) }
        var groups: [ScriptGroup] = []
        var owners: [(deferral: Int, indices: [Int])] = []
        for (k, d) in batch.deferrals.enumerated() {
            guard case .pace = d.mode else { continue }
            for (shard, indices) in batch.shards[k] {
                groups.append(shardGroup(shard: shard, name: d.campaign, members: indices.map { batch.members[k][$0] }))
                owners.append((k, indices))
            }
        }
        if groups.isEmpty { return flags }
        let replies = try await run(Scripts.heldCheck, header: caps, groups: groups)
        for (reply, owner) in zip(replies, owners) {
            let got = try Self.flags(reply, count: owner.indices.count, operation: "held check")
            for (position, index) in owner.indices.enumerated() { flags[owner.deferral][index] = got[position] }
        }
        return flags
    }

    /// Stores the messages with room and a score (``Scripts/heldStore``, which checks the caps again).
    /// Returns each message's answer and the campaigns that stored something.
    private func store(
        _ batch: HeldBatch, flags: [[UInt8]], scores: [[Int64]], caps: RedisArguments
    ) async throws -> (answers: [[HeldAnswer]], listed: Set<String>, written: Set<String>) {
        var answers = batch.deferrals.map { [HeldAnswer](repeating: .held, count: $0.messages.count) }
        var groups: [ScriptGroup] = []
        var owners: [(deferral: Int, indices: [Int], tag: String)] = []
        for (k, d) in batch.deferrals.enumerated() {
            for (shard, indices) in batch.shards[k] {
                var storing: [Int] = []
                var pairs = RedisArguments()
                for i in indices {
                    switch flags[k][i] {
                    case UInt8(ascii: "E"): answers[k][i] = .held
                    case UInt8(ascii: "F"): answers[k][i] = .full
                    default:
                        if scores[k][i] < 0 {
                            answers[k][i] = .admitted
                        } else {
                            storing.append(i)
                            pairs.append(scores[k][i])
                            pairs.append(bytes: batch.members[k][i])
                        }
                    }
                }
                if storing.isEmpty { continue }
                var arguments = RedisArguments()
                arguments.append(d.campaign)
                arguments.append(storing.count)
                arguments.append(contentsOf: pairs)
                groups.append(
                    ScriptGroup(
                        tag: keys.heldTag(shard: shard),
                        keys: RedisArguments([keys.held(shard: shard, name: d.campaign), keys.heldBytes(shard: shard)]),
                        arguments: arguments))
                owners.append((k, storing, keys.heldTag(shard: shard)))
            }
        }
        var listed = Set<String>()
        var written = Set<String>()
        if groups.isEmpty { return (answers, listed, written) }
        let replies = try await run(Scripts.heldStore, header: caps, groups: groups)
        for (reply, owner) in zip(replies, owners) {
            let got = try Self.flags(reply, count: owner.indices.count, operation: "held store")
            var stored = false
            for (position, index) in owner.indices.enumerated() {
                switch got[position] {
                case UInt8(ascii: "N"):
                    answers[owner.deferral][index] = .held
                    stored = true
                case UInt8(ascii: "E"): answers[owner.deferral][index] = .held
                default: answers[owner.deferral][index] = .full  // filled by another process meanwhile
                }
            }
            // Once per group, not per message: its campaign is listed and its slot was written.
            if stored {
                listed.insert(batch.deferrals[owner.deferral].campaign)
                written.insert(owner.tag)
            }
        }
        return (answers, listed, written)
    }

    /// The caps' header of the shard scripts: enforce, the shard's campaign and total shares, the cost per
    /// job, the retention (ms).
    private func capsHeader(enforcing: Bool) -> RedisArguments {
        var header = RedisArguments()
        header.append(enforcing ? 1 : 0)
        header.append(configuration.heldCaps.shardCampaign)
        header.append(configuration.heldCaps.shardTotal)
        header.append(Self.heldOverheadPerJob)
        header.append(max(1, jobMarkRetention) * 1000)
        return header
    }

    private func shardGroup(shard: Int, name: String, members: [[UInt8]]) -> ScriptGroup {
        var arguments = RedisArguments()
        arguments.append(name)
        arguments.append(members.count)
        for m in members { arguments.append(bytes: m) }
        return ScriptGroup(
            tag: keys.heldTag(shard: shard),
            keys: RedisArguments([keys.held(shard: shard, name: name), keys.heldBytes(shard: shard)]), arguments: arguments)
    }

    /// One call in `{<p>}`: lists every deferral's campaign in `{<p>}:deferred` and gives the paced ones'
    /// messages with room (`R`) their slots. Returns per deferral and message the score to store it with
    /// (a hold's due time; a paced message's slot in ms), or -1 when its slot is due now (admitted).
    private func reserveSlots(_ deferrals: [Deferral], flags: [[UInt8]], nowMs: Int64) async throws -> [[Int64]] {
        var keyList = [keys.deferredCampaigns]
        var arguments = RedisArguments()
        arguments.append(nowMs)
        arguments.append(deferrals.count)
        for (k, d) in deferrals.enumerated() {
            keyList.append(keys.pace(campaign: d.campaign))
            arguments.append(d.campaign)
            switch d.mode {
            case .hold:
                arguments.append(0)
                arguments.append(0)
                arguments.append(bytes: [UInt8]())
            case .pace(let rate, let notBeforeMs):
                arguments.append(rate)
                arguments.append(notBeforeMs)
                arguments.append(bytes: flags[k])
            }
        }
        let reply = try await client.eval(Scripts.heldReserve, keys: RedisArguments(keyList), arguments: arguments)
        guard let parts = reply.array, parts.count == deferrals.count else { throw RedisError.unexpectedReply("held reserve: \(reply)") }
        return deferrals.indices.map { k in
            let d = deferrals[k]
            switch d.mode {
            case .hold(let dueMs):
                return [Int64](repeating: dueMs, count: d.messages.count)
            case .pace:
                let slots = (parts[k].array ?? []).map { $0.integer ?? -1 }
                var out = [Int64](repeating: -1, count: d.messages.count)
                var next = 0
                for i in out.indices where flags[k][i] == UInt8(ascii: "R") {
                    out[i] = next < slots.count ? slots[next] : -1
                    next += 1
                }
                return out
            }
        }
    }

    /// A shard script's reply: one flag byte per message.
    static func flags(_ reply: RedisReply, count: Int, operation: String) throws -> [UInt8] {
        guard case .bulk(let bytes) = reply, bytes.count == count else {
            throw RedisError.unexpectedReply("\(operation): expected \(count) flags, got \(reply)")
        }
        return bytes
    }

    /// The campaigns that have held jobs (and, for a minute or so after their last release, some that
    /// held some: the release removes them once it finds them empty).
    public func deferredCampaigns() async throws -> [String] {
        let reply = try await command(RedisCommand("SMEMBERS", keys.deferredCampaigns))
        return (reply.array ?? []).compactMap(\.string).sorted()
    }

    /// How many jobs of `campaign` are held now (every shard, and what an older version held).
    public func deferredCount(campaign: String) async throws -> Int64 {
        try await heldUsage(campaigns: [campaign])[campaign]?.jobs ?? 0
    }

    /// What each of `campaigns` holds: jobs and bytes over every shard (one call on a single Redis, one
    /// per slot on a cluster), plus the jobs an older version held (one call in `{<p>}`).
    public func heldUsage(campaigns: [String]) async throws -> [String: HeldUsage] {
        var usage: [String: HeldUsage] = [:]
        if campaigns.isEmpty { return usage }
        var groups: [ScriptGroup] = []
        for shard in 0..<RedisKeys.heldShards {
            var keyList = RedisArguments([keys.heldBytes(shard: shard)])
            var arguments = RedisArguments()
            arguments.append(campaigns.count)
            for name in campaigns {
                keyList.append(keys.held(shard: shard, name: name))
                arguments.append(name)
            }
            groups.append(ScriptGroup(tag: keys.heldTag(shard: shard), keys: keyList, arguments: arguments))
        }
        let replies = try await run(Scripts.heldUsage, header: RedisArguments(), groups: groups)
        for reply in replies {
            let values = (reply.array ?? []).map { $0.integer ?? 0 }
            for (i, name) in campaigns.enumerated() where 2 * i + 1 < values.count {
                usage[name, default: HeldUsage()].jobs += values[2 * i]
                usage[name, default: HeldUsage()].bytes += values[2 * i + 1]
            }
        }
        let legacy = try await commands(campaigns.map { RedisCommand("ZCARD", keys.legacyDeferred(campaign: $0)) })
        for (name, reply) in zip(campaigns, legacy) { usage[name, default: HeldUsage()].jobs += reply.integer ?? 0 }
        return usage
    }

    /// How many of `campaign`'s held jobs are due at exactly each of `dues` (epoch ms), over every shard:
    /// for `campaign status` of a local-time campaign, whose jobs wait for their zone's wall-clock time.
    /// One call on a single Redis (one per slot on a cluster).
    public func heldCounts(campaign: String, dues: [Int64]) async throws -> [Int64] {
        if dues.isEmpty { return [] }
        var header = RedisArguments()
        header.append(dues.count)
        for due in dues { header.append(due) }
        let groups = (0..<RedisKeys.heldShards).map { shard in
            ScriptGroup(
                tag: keys.heldTag(shard: shard), keys: RedisArguments([keys.held(shard: shard, name: campaign)]),
                arguments: RedisArguments())
        }
        let replies = try await run(Self.heldCountsScript, header: header, groups: groups)
        var counts = [Int64](repeating: 0, count: dues.count)
        for reply in replies {
            for (i, n) in (reply.array ?? []).enumerated() where i < counts.count { counts[i] += n.integer ?? 0 }
        }
        return counts
    }

    /// ARGV: #dues, the dues, #groups. KEYS: one held set per group. Per group, a ZCOUNT per due.
    static let heldCountsScript = RedisScript(
        #"""
        local n = tonumber(ARGV[1])
        local out = {}
        for g = 1, tonumber(ARGV[n + 2]) do
          local counts = {}
          for d = 1, n do counts[d] = redis.call('ZCOUNT', KEYS[g], ARGV[1 + d], ARGV[1 + d]) end
          out[g] = counts
        end
        return out
        """#)

    /// Whether each job would find room under the caps in its shard now: for jobs waiting at a cap, so that
    /// they are gated again only when they may be held. One call on a single Redis (one per slot on a
    /// cluster); no message is sent.
    public func heldRoom(_ jobs: [HeldRoomRequest]) async throws -> [Bool] {
        var byShard: [Int: [Int]] = [:]
        for (i, job) in jobs.enumerated() { byShard[job.shard, default: []].append(i) }
        var groups: [ScriptGroup] = []
        var owners: [[Int]] = []
        for (shard, indices) in byShard.sorted(by: { $0.key < $1.key }) {
            var arguments = RedisArguments()
            arguments.append(indices.count)
            for i in indices {
                arguments.append(jobs[i].campaign)
                arguments.append(jobs[i].bytes)
            }
            groups.append(
                ScriptGroup(tag: keys.heldTag(shard: shard), keys: RedisArguments([keys.heldBytes(shard: shard)]), arguments: arguments))
            owners.append(indices)
        }
        var room = [Bool](repeating: false, count: jobs.count)
        for (reply, indices) in zip(try await run(Scripts.heldRoom, header: capsHeader(enforcing: true), groups: groups), owners) {
            let got = try Self.flags(reply, count: indices.count, operation: "held room")
            for (position, i) in indices.enumerated() { room[i] = got[position] == UInt8(ascii: "1") }
        }
        return room
    }

    /// Takes (or renews) the lock on releasing `campaign`'s jobs for `lease`: one process at a time moves
    /// them, so a job is not published once per process.
    public func lockRelease(campaign: String, lease: Duration) async throws -> Bool {
        let reply = try await client.eval(
            Scripts.lockRelease, keys: RedisArguments([keys.deferredLock(campaign: campaign)]),
            arguments: RedisArguments([configuration.leaseOwner, String(max(1, lease.milliseconds))]))
        return reply.integer == 1
    }

    /// Gives the lock up (if this process holds it).
    public func unlockRelease(campaign: String) async throws {
        _ = try await client.eval(
            Scripts.unlockRelease, keys: RedisArguments([keys.deferredLock(campaign: campaign)]),
            arguments: RedisArguments([configuration.leaseOwner]))
    }

    /// Up to about `limit` of `campaign`'s held jobs due at `nowMs` (`limit` ÷ shards, rounded up, from each
    /// shard, the earliest first), and up to `limit` of those an older version held.
    public func dueDeferred(campaign: String, nowMs: Int64, limit: Int) async throws -> [HeldMessage] {
        let perShard = max(1, (limit + RedisKeys.heldShards - 1) / RedisKeys.heldShards)
        var groups = (0..<RedisKeys.heldShards).map { shard in
            ScriptGroup(
                tag: keys.heldTag(shard: shard), keys: RedisArguments([keys.held(shard: shard, name: campaign)]),
                arguments: RedisArguments([String(perShard)]))
        }
        groups.append(
            ScriptGroup(
                tag: keys.countersTag, keys: RedisArguments([keys.legacyDeferred(campaign: campaign)]),
                arguments: RedisArguments([String(limit)])))
        var header = RedisArguments()
        header.append(nowMs)
        let replies = try await run(Scripts.heldDue, header: header, groups: groups)
        var due: [HeldMessage] = []
        for (g, reply) in replies.enumerated() {
            for member in reply.array ?? [] {
                if case .bulk(let bytes) = member { due.append(HeldMessage(stored: bytes, isLegacy: g == RedisKeys.heldShards)) }
            }
        }
        return due
    }

    /// Removes released jobs (after they were published again) and their bytes; once the campaign holds
    /// nothing (`messages` empty: a check alone), drops it from `{<p>}:deferred`. A shard call (one on a
    /// single Redis) and one in `{<p>}`.
    public func removeDeferred(campaign: String, messages: [HeldMessage]) async throws {
        var byShard: [Int: [[UInt8]]] = [:]
        var legacy: [[UInt8]] = []
        for m in messages {
            if m.isLegacy {
                legacy.append(m.stored)
            } else {
                byShard[RedisKeys.heldShard(message: DeferredMessage.message(of: m.stored)), default: []].append(m.stored)
            }
        }
        // Every shard, to learn whether the campaign holds anything left.
        let groups = (0..<RedisKeys.heldShards).map { shard in
            var arguments = RedisArguments()
            arguments.append(campaign)
            let removing = byShard[shard] ?? []
            arguments.append(removing.count)
            for m in removing { arguments.append(bytes: m) }
            return ScriptGroup(
                tag: keys.heldTag(shard: shard),
                keys: RedisArguments([keys.held(shard: shard, name: campaign), keys.heldBytes(shard: shard)]), arguments: arguments)
        }
        var header = RedisArguments()
        header.append(Self.heldOverheadPerJob)
        let remaining = try await run(Scripts.heldRemove, header: header, groups: groups).reduce(Int64(0)) { $0 + ($1.integer ?? 1) }
        var arguments = RedisArguments()
        arguments.append(campaign)
        arguments.append(remaining)
        for m in legacy { arguments.append(bytes: m) }
        _ = try await client.eval(
            Scripts.heldUnlist, keys: RedisArguments([keys.deferredCampaigns, keys.legacyDeferred(campaign: campaign)]),
            arguments: arguments)
    }

    /// The key released paced jobs are signed with (design §2.13): 32 random bytes, made by the first
    /// `run` (`SET NX`) and read by the others. One round trip.
    public func releaseKey() async throws -> [UInt8] {
        var fresh = SystemRandomNumberGenerator()
        let candidate = (0..<32).map { _ in UInt8.random(in: 0...255, using: &fresh) }
        let hex = candidate.map { String(format: "%02x", $0) }.joined()
        let replies = try await commands([RedisCommand("SET", keys.releaseKey, hex, "NX"), RedisCommand("GET", keys.releaseKey)])
        guard let stored = replies[1].string, stored.count == 64 else {
            throw RedisError.unexpectedReply("\(keys.releaseKey): expected 64 hex digits")
        }
        var key: [UInt8] = []
        var index = stored.startIndex
        while index < stored.endIndex {
            let next = stored.index(index, offsetBy: 2)
            guard let byte = UInt8(stored[index..<next], radix: 16) else {
                throw RedisError.unexpectedReply("\(keys.releaseKey): expected 64 hex digits")
            }
            key.append(byte)
            index = next
        }
        return key
    }
}
