import Foundation
import TimeUnits

/// What an operator set for one campaign (`campaign cancel`, `pause`, …), as stored in the field of
/// `{<p>}:control` named by the campaign id (design §2.10, §4.1).
///
/// Stored as comma-separated words: `cancelled`, `paused`. An empty state is no field at all. Words this
/// version does not know are kept as they are (a newer `run` may have written them) and ignored.
public struct CampaignControlState: Sendable, Hashable, CustomStringConvertible {
    /// `campaign cancel`: every job of the campaign not yet written to a connection settles as
    /// `cancelled`. Final: nothing lifts it (publish under a new campaign id instead).
    public var cancelled = false
    /// `campaign pause` (until `campaign resume`).
    public var paused = false
    /// Words of a newer version, kept when this one rewrites the state.
    public var unknown: [String] = []

    public init(cancelled: Bool = false, paused: Bool = false) {
        self.cancelled = cancelled
        self.paused = paused
    }

    /// Parses a stored value; never fails (unknown words are kept in ``unknown``).
    public init(stored: String) {
        for word in stored.split(separator: ",") {
            switch word {
            case "cancelled": cancelled = true
            case "paused": paused = true
            default: unknown.append(String(word))
            }
        }
    }

    /// The value stored in `{<p>}:control` (empty: the field is removed).
    public var stored: String {
        var words: [String] = []
        if cancelled { words.append("cancelled") }
        if paused { words.append("paused") }
        return (words + unknown).joined(separator: ",")
    }

    public var isEmpty: Bool { stored.isEmpty }

    /// How `campaign status` says it: `cancelled`, `paused` or `running`.
    public var description: String {
        if cancelled { return "cancelled" }
        if paused { return "paused" }
        return "running"
    }
}

/// The whole control state as one read: its version and every campaign's state.
public struct CampaignControlSnapshot: Sendable, Hashable {
    /// `{<p>}:control:version` (0 before any change).
    public var version: Int64
    public var campaigns: [String: CampaignControlState]

    public init(version: Int64 = 0, campaigns: [String: CampaignControlState] = [:]) {
        self.version = version
        self.campaigns = campaigns
    }
}

/// A `run` process as a control change's waiter sees it: alive (its heartbeat exists) and the control
/// version it has applied.
public struct ControlAcknowledgement: Sendable, Hashable {
    /// Its lease owner id (``PipelineStoreConfiguration/leaseOwner``).
    public var owner: String
    /// Its heartbeat's text: `<host> pid <pid>`.
    public var process: String
    /// The control version it applied last; -1 while it had not applied any.
    public var version: Int64

    public init(owner: String, process: String, version: Int64) {
        self.owner = owner
        self.process = process
        self.version = version
    }
}

extension PipelineStore {
    /// Reads every campaign's control state and the version, in one round trip.
    public func readControl() async throws -> CampaignControlSnapshot {
        let replies = try await commands([RedisCommand("GET", keys.controlVersion), RedisCommand("HGETALL", keys.control)])
        return CampaignControlSnapshot(
            version: replies[0].string.flatMap { Int64($0) } ?? 0, campaigns: try Self.controlStates(replies[1]))
    }

    /// One poll of `run`'s control loop (design §2.10): records that this process has applied version
    /// `applied` (-1: none yet) in `{<p>}:control:seen`, and returns the control state if its version is
    /// not `applied` (nil: unchanged). One call. The record is written before the read, in the same
    /// script, so a `campaign cancel` that changes the state after this process read it finds this
    /// process in `seen` with an older version, and waits for it.
    public func pollControl(applied: Int64) async throws -> CampaignControlSnapshot? {
        let reply = try await client.eval(
            Scripts.controlPoll, keys: RedisArguments([keys.control, keys.controlVersion, keys.controlSeen]),
            arguments: RedisArguments([configuration.leaseOwner, String(applied)]))
        guard let parts = reply.array, let version = parts.first?.integer else {
            throw RedisError.unexpectedReply("control poll: \(reply)")
        }
        if parts.count == 1 { return nil }
        return CampaignControlSnapshot(version: version, campaigns: try Self.controlStates(parts[1]))
    }

    /// Records that this process has applied control version `version` (after it did).
    public func acknowledgeControl(version: Int64) async throws {
        _ = try await command(RedisCommand("HSET", keys.controlSeen, configuration.leaseOwner, String(version)))
    }

    /// Removes this process from `{<p>}:control:seen` (a graceful stop): a control change no longer waits for it.
    public func forgetControlAcknowledgement() async throws {
        _ = try await command(RedisCommand("HDEL", keys.controlSeen, configuration.leaseOwner))
    }

    /// Changes one campaign's control state with `change` (read, changed, written only if nobody changed
    /// it meanwhile, else again) and increments the version, so every `run` process reloads it. Returns
    /// the new version and state. The version is incremented even when the state stays the same, so a
    /// waiter still learns that every process has it.
    public func changeControl(
        campaign: String, _ change: (CampaignControlState) -> CampaignControlState
    ) async throws -> (version: Int64, state: CampaignControlState) {
        var expected = try await command(RedisCommand("HGET", keys.control, campaign)).string ?? ""
        for _ in 0..<100 {
            let state = change(CampaignControlState(stored: expected))
            let reply = try await client.eval(
                Scripts.controlChange, keys: RedisArguments([keys.control, keys.controlVersion]),
                arguments: RedisArguments([campaign, expected, state.stored]))
            guard let parts = reply.array, parts.count == 2, let version = parts[0].integer else {
                throw RedisError.unexpectedReply("control change: \(reply)")
            }
            if version >= 0 { return (version, state) }
            expected = parts[1].string ?? ""
        }
        throw RedisError.unexpectedReply("control change of \(campaign): the state kept changing under it (100 attempts)")
    }

    /// The live `run` processes (heartbeat present) in `{<p>}:control:seen` and the version each applied.
    /// Entries of processes whose heartbeat is gone are removed (a process that comes back re-adds its
    /// entry with its next poll).
    public func controlAcknowledgements() async throws -> [ControlAcknowledgement] {
        let reply = try await command(RedisCommand("HGETALL", keys.controlSeen))
        guard let elements = reply.array, elements.count % 2 == 0 else { throw RedisError.unexpectedReply("HGETALL seen: \(reply)") }
        var live: [ControlAcknowledgement] = []
        for index in stride(from: 0, to: elements.count, by: 2) {
            guard let owner = elements[index].string else { continue }
            let version = elements[index + 1].string.flatMap { Int64($0) } ?? -1
            // Heartbeats are keys of no shared slot: read one by one (a handful of processes).
            if let process = try await command(RedisCommand("GET", keys.owner(owner))).string {
                live.append(ControlAcknowledgement(owner: owner, process: process, version: version))
            } else {
                _ = try? await command(RedisCommand("HDEL", keys.controlSeen, owner))
            }
        }
        return live.sorted { $0.owner < $1.owner }
    }

    static func controlStates(_ reply: RedisReply) throws -> [String: CampaignControlState] {
        guard let elements = reply.array, elements.count % 2 == 0 else { throw RedisError.unexpectedReply("HGETALL control: \(reply)") }
        var states: [String: CampaignControlState] = [:]
        for index in stride(from: 0, to: elements.count, by: 2) {
            guard let campaign = elements[index].string, let value = elements[index + 1].string else { continue }
            let state = CampaignControlState(stored: value)
            if !state.isEmpty { states[campaign] = state }
        }
        return states
    }
}

extension Scripts {
    /// KEYS: control, version, seen. ARGV: owner, the version it applied (-1: none). Records the applied
    /// version first, then answers `{version}` when it is unchanged, else `{version, HGETALL control}`.
    static let controlPoll = RedisScript(
        #"""
        redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
        local v = tonumber(redis.call('GET', KEYS[2]) or '0')
        if v == tonumber(ARGV[2]) then return {v} end
        return {v, redis.call('HGETALL', KEYS[1])}
        """#)

    /// KEYS: control, version. ARGV: campaign, the value expected now ('' = none), the new value ('' =
    /// remove). Answers `{new version, value}`, or `{-1, current value}` when the value was not the
    /// expected one (nothing written).
    static let controlChange = RedisScript(
        #"""
        local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
        if current ~= ARGV[2] then return {-1, current} end
        if ARGV[3] == '' then
          redis.call('HDEL', KEYS[1], ARGV[1])
        else
          redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
        end
        return {redis.call('INCR', KEYS[2]), ARGV[3]}
        """#)
}

/// A job held back by the gate (its campaign paused): its message as consumed, due at `dueMs`.
public struct DeferredJob: Sendable, Hashable {
    public var campaign: String
    /// The message's value, exactly as consumed: what is published again when it is released.
    public var message: [UInt8]
    /// Epoch milliseconds from which it may be released (for a pause: when it was deferred, so the
    /// release keeps roughly the order they came in).
    public var dueMs: Int64

    public init(campaign: String, message: [UInt8], dueMs: Int64) {
        self.campaign = campaign
        self.message = message
        self.dueMs = dueMs
    }
}

extension PipelineStore {
    /// Holds jobs in `{<p>}:deferred:<campaign>` (design §2.11) and lists their campaigns in
    /// `{<p>}:deferred`: one call for a batch, every key in `{<p>}`. A job already held (the same message)
    /// is held once.
    public func deferJobs(_ jobs: [DeferredJob]) async throws {
        if jobs.isEmpty { return }
        var byCampaign: [String: [DeferredJob]] = [:]
        for job in jobs { byCampaign[job.campaign, default: []].append(job) }
        var keyList = [keys.deferredCampaigns]
        var arguments = RedisArguments()
        arguments.append(byCampaign.count)
        for (campaign, held) in byCampaign.sorted(by: { $0.key < $1.key }) {
            keyList.append(keys.deferred(campaign: campaign))
            arguments.append(campaign)
            arguments.append(held.count)
            for job in held {
                arguments.append(job.dueMs)
                arguments.append(bytes: job.message)
            }
        }
        let reply = try await client.eval(Scripts.deferJobs, keys: RedisArguments(keyList), arguments: arguments)
        guard reply.integer != nil else { throw RedisError.unexpectedReply("defer: \(reply)") }
    }

    /// The campaigns that have deferred jobs.
    public func deferredCampaigns() async throws -> [String] {
        let reply = try await command(RedisCommand("SMEMBERS", keys.deferredCampaigns))
        return (reply.array ?? []).compactMap(\.string).sorted()
    }

    /// How many jobs of `campaign` are deferred now.
    public func deferredCount(campaign: String) async throws -> Int64 {
        try await command(RedisCommand("ZCARD", keys.deferred(campaign: campaign))).integer ?? 0
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

    /// Up to `limit` of `campaign`'s deferred jobs due at `nowMs`, the earliest first.
    public func dueDeferred(campaign: String, nowMs: Int64, limit: Int) async throws -> [[UInt8]] {
        let reply = try await command(
            RedisCommand("ZRANGEBYSCORE", keys.deferred(campaign: campaign), "-inf", String(nowMs), "LIMIT", "0", String(limit)))
        guard let members = reply.array else { throw RedisError.unexpectedReply("ZRANGEBYSCORE: \(reply)") }
        return members.compactMap { if case .bulk(let bytes) = $0 { bytes } else { nil } }
    }

    /// Removes released jobs (after they were published again), and the campaign from `{<p>}:deferred`
    /// once it holds none: one call.
    public func removeDeferred(campaign: String, messages: [[UInt8]]) async throws {
        var arguments = RedisArguments()
        arguments.append(campaign)
        for m in messages { arguments.append(bytes: m) }
        _ = try await client.eval(
            Scripts.removeDeferred, keys: RedisArguments([keys.deferredCampaigns, keys.deferred(campaign: campaign)]),
            arguments: arguments)
    }
}

extension Scripts {
    /// KEYS: the deferred campaigns set, then one sorted set per campaign. ARGV: campaigns, then per
    /// campaign its id, its job count and (score, message) per job.
    static let deferJobs = RedisScript(
        #"""
        local at = 2
        local n = tonumber(ARGV[1])
        for c = 1, n do
          local campaign, count = ARGV[at], tonumber(ARGV[at + 1])
          at = at + 2
          for from = 0, count - 1, 500 do
            local chunk = {}
            for j = from, math.min(count - 1, from + 499) do
              chunk[#chunk + 1] = ARGV[at + 2 * j]
              chunk[#chunk + 1] = ARGV[at + 2 * j + 1]
            end
            redis.call('ZADD', KEYS[c + 1], unpack(chunk))
          end
          at = at + 2 * count
          redis.call('SADD', KEYS[1], campaign)
        end
        return n
        """#)

    /// KEYS: the lock. ARGV: owner, lease ms. 1 when this owner holds it (taken or renewed).
    static let lockRelease = RedisScript(
        #"""
        local holder = redis.call('GET', KEYS[1])
        if holder and holder ~= ARGV[1] then return 0 end
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        return 1
        """#)

    /// KEYS: the lock. ARGV: owner.
    static let unlockRelease = RedisScript(
        #"""
        if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
        return 1
        """#)

    /// KEYS: the deferred campaigns set, the campaign's sorted set. ARGV: campaign, messages.
    static let removeDeferred = RedisScript(
        #"""
        for from = 2, #ARGV, 500 do
          redis.call('ZREM', KEYS[2], unpack(ARGV, from, math.min(#ARGV, from + 499)))
        end
        if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('SREM', KEYS[1], ARGV[1]) end
        return 1
        """#)
}
