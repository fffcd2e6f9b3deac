import Foundation
import TimeUnits

/// What an operator set for one campaign (`campaign cancel`, `pause`, …), as stored in the field of
/// `{<p>}:control` named by the campaign id (design §2.10, §4.1).
///
/// Stored as comma-separated words: `cancelled` (with `cancelled_at=<epoch ms>`), `paused`, `at=<epoch ms>`
/// (scheduled start), `pace=<jobs per second>`. An empty state is no field at all. Words this version does not know are kept as they
/// are (a newer `run` may have written them) and ignored.
public struct CampaignControlState: Sendable, Hashable, CustomStringConvertible {
    /// `campaign cancel`: every job of the campaign not yet written to a connection settles as
    /// `cancelled`. Final: nothing lifts it (publish under a new campaign id instead).
    public var cancelled = false
    /// When it was cancelled (epoch ms): the entry is removed once it is older than the campaign's
    /// retention and the campaign's hash has expired (``PipelineStore/expireCancellations(retentionMs:nowMs:)``).
    /// Nil for a cancel written before this was recorded: stamped then.
    public var cancelledAtMs: Int64?
    /// `campaign pause` (until `campaign resume`).
    public var paused = false
    /// `campaign publish --at`: nothing of it is sent before this time (epoch milliseconds).
    public var startAtMs: Int64?
    /// `campaign pace --rate` / `publish --rate`: at most this many of its jobs per second, over every
    /// process together.
    public var rate: Int?
    /// `campaign publish --cap 1/24h`: at most `max` of the campaign's jobs per recipient in any
    /// `perMs` window (design §2.15).
    public var cap: FrequencyCap?
    /// `campaign publish --holdout 5%`: the share of recipients held out, in basis points (1…10 000;
    /// design §2.18).
    public var holdoutBasisPoints: Int?
    /// `campaign publish --at 09:00 --local-time`: each job is sent at this wall-clock time ("HH:MM") in
    /// its recipient's zone, the first such time at or after ``localTimeFromMs`` (design §2.17).
    public var localTime: String?
    public var localTimeFromMs: Int64?
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
            default:
                if word.hasPrefix("at="), let ms = Int64(word.dropFirst(3)) {
                    startAtMs = ms
                } else if word.hasPrefix("cancelled_at="), let ms = Int64(word.dropFirst(13)) {
                    cancelledAtMs = ms
                } else if word.hasPrefix("pace="), let n = Int(word.dropFirst(5)), n > 0 {
                    rate = n
                } else if word.hasPrefix("cap="), let c = FrequencyCap(stored: word.dropFirst(4)) {
                    cap = c
                } else if word.hasPrefix("holdout="), let n = Int(word.dropFirst(8)), (1...10_000).contains(n) {
                    holdoutBasisPoints = n
                } else if word.hasPrefix("local="), let at = word.dropFirst(6).firstIndex(of: "@"),
                    let from = Int64(word[word.index(after: at)...])
                {
                    localTime = String(word[word.index(word.startIndex, offsetBy: 6)..<at])
                    localTimeFromMs = from
                } else {
                    unknown.append(String(word))
                }
            }
        }
    }

    /// The value stored in `{<p>}:control` (empty: the field is removed).
    public var stored: String {
        var words: [String] = []
        if cancelled { words.append("cancelled") }
        if let cancelledAtMs { words.append("cancelled_at=\(cancelledAtMs)") }
        if paused { words.append("paused") }
        if let startAtMs { words.append("at=\(startAtMs)") }
        if let rate { words.append("pace=\(rate)") }
        if let cap { words.append("cap=\(cap.stored)") }
        if let holdoutBasisPoints { words.append("holdout=\(holdoutBasisPoints)") }
        if let localTime, let localTimeFromMs { words.append("local=\(localTime)@\(localTimeFromMs)") }
        return (words + unknown).joined(separator: ",")
    }

    public var isEmpty: Bool { stored.isEmpty }

    /// Whether it asks an audience rule of its jobs (a cap, a holdout, local-time delivery).
    public var hasAudienceRules: Bool { cap != nil || holdoutBasisPoints != nil || localTime != nil }

    /// How `campaign status` says it at `nowMs`: `cancelled`, `paused`, `scheduled for <RFC 3339>`, `paced
    /// at N/s` (combined with commas), or `running`.
    public func description(nowMs: Int64) -> String {
        if cancelled { return "cancelled" }
        var parts: [String] = []
        if paused { parts.append("paused") }
        if let startAtMs, startAtMs > nowMs {
            let formatter = ISO8601DateFormatter()
            parts.append("scheduled for \(formatter.string(from: Date(timeIntervalSince1970: Double(startAtMs) / 1000)))")
        }
        if let rate { parts.append("paced at \(rate)/s") }
        if let localTime { parts.append("at \(localTime) local time") }
        if let cap { parts.append("capped at \(cap)") }
        if let holdoutBasisPoints { parts.append("holding out \(Self.percent(basisPoints: holdoutBasisPoints))") }
        return parts.isEmpty ? "running" : parts.joined(separator: ", ")
    }

    public var description: String { description(nowMs: Int64(Date().timeIntervalSince1970 * 1000)) }

    /// Whether `recipient` (`u:<user>` or `t:<token hex>`) falls in the first `basisPoints` ÷ 10 000 of
    /// `campaign`'s hash space: its holdout group (design §2.18). FNV-1a 64 over the campaign, a 0 byte and
    /// the recipient, then mixed (FNV's low bits alone spread poorly). Stable across versions: it decides
    /// whom a running campaign skips, in every process and in `job status`.
    public static func isHeldOut(campaign: String, recipient: String, basisPoints: Int) -> Bool {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in campaign.utf8 { h = (h ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        h = h &* 0x0000_0100_0000_01b3  // the separator, a 0 byte
        for byte in recipient.utf8 { h = (h ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        // splitmix64's finalizer.
        h = (h ^ (h >> 30)) &* 0xbf58_476d_1ce4_e5b9
        h = (h ^ (h >> 27)) &* 0x94d0_49bb_1331_11eb
        h ^= h >> 31
        return Int(h % 10_000) < basisPoints
    }

    /// `500` → `5%`, `25` → `0.25%`.
    public static func percent(basisPoints: Int) -> String {
        basisPoints % 100 == 0 ? "\(basisPoints / 100)%" : String(format: "%.2f%%", Double(basisPoints) / 100)
    }
}

/// A frequency cap (design §2.15): at most ``max`` sends to one recipient in any window of ``per``
/// (sliding: counted back from each send). `apps[].frequency_caps` and `campaign publish --cap` say
/// `3/24h`-style (`s`, `m`, `h` or `d`).
public struct FrequencyCap: Sendable, Hashable, CustomStringConvertible {
    public var max: Int
    public var perMs: Int64

    public static let longestWindowMs: Int64 = 31 * 86_400_000

    public init?(max: Int, perMs: Int64) {
        guard (1...10_000).contains(max), (1000...Self.longestWindowMs).contains(perMs) else { return nil }
        self.max = max
        self.perMs = perMs
    }

    /// `3/24h`, `1/90m`, `10/7d`, `2/30s`.
    public init?(parsing text: some StringProtocol) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let max = Int(parts[0]), let perMs = Self.milliseconds(parts[1]) else { return nil }
        self.init(max: max, perMs: perMs)
    }

    /// A window written `<n><unit>` (`s`, `m`, `h`, `d`): its milliseconds.
    public static func milliseconds(_ text: some StringProtocol) -> Int64? {
        guard let unit = text.last, let n = Int64(text.dropLast()), n > 0, n < 1_000_000 else { return nil }
        switch unit {
        case "s": return n * 1000
        case "m": return n * 60_000
        case "h": return n * 3_600_000
        case "d": return n * 86_400_000
        default: return nil
        }
    }

    /// Stored in the control state as `<max>/<ms>`.
    init?(stored: some StringProtocol) {
        let parts = stored.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let max = Int(parts[0]), let perMs = Int64(parts[1]) else { return nil }
        self.init(max: max, perMs: perMs)
    }

    var stored: String { "\(max)/\(perMs)" }

    /// `1/24h`, `3/7d`, `1/90m`: days from two days up, as people say them.
    public var description: String {
        if perMs % 86_400_000 == 0 && perMs >= 172_800_000 { return "\(max)/\(perMs / 86_400_000)d" }
        for (unit, ms) in [("h", Int64(3_600_000)), ("m", 60_000)] where perMs % ms == 0 {
            return "\(max)/\(perMs / ms)\(unit)"
        }
        return "\(max)/\(perMs / 1000)s"
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

    /// What a control change came to: the new version and state, the live `run` processes, and those of
    /// them that had not applied it when the wait ended.
    public struct ControlChange: Sendable {
        public var version: Int64
        public var state: CampaignControlState
        public var processes: [ControlAcknowledgement]
        public var missing: [ControlAcknowledgement]
    }

    /// ``changeControl(campaign:_:)``, then waits up to `wait` until every live `run` process has applied
    /// the new version (design §2.10): what `campaign cancel|pause|resume|pace`, `campaign publish --at|--rate`
    /// and the dashboard's buttons do.
    public func changeControlAndWait(
        campaign: String, wait: Duration, _ change: (CampaignControlState) -> CampaignControlState
    ) async throws -> ControlChange {
        let clock = ContinuousClock()
        let deadline = clock.now + wait
        let (version, state) = try await changeControl(campaign: campaign, change)
        var processes = try await controlAcknowledgements()
        while processes.contains(where: { $0.version < version }), clock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            processes = try await controlAcknowledgements()
        }
        return ControlChange(version: version, state: state, processes: processes, missing: processes.filter { $0.version < version })
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

    /// Removes the cancels that have outlived their campaign (design §2.10): a cancel older than
    /// `retentionMs` whose campaign hash (`{<p>}:campaign:<id>`, refreshed by every settled job of the
    /// campaign, expiring the same retention after its last activity) is gone, so that no job of it can
    /// come again except as a new run (as a publish after its dedup records expired). Stamps a cancel
    /// recorded without its time (the time starts then). A removal increments the version, so every
    /// process drops the entry (and its per-job lookup) at its next poll. Returns the campaigns removed.
    /// Every `run` process calls it about once a minute: a read of the control hash, and a call per
    /// entry only when one is due.
    @discardableResult
    public func expireCancellations(
        retentionMs: Int64, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
    ) async throws
        -> [String]
    {
        var removed: [String] = []
        for (campaign, state) in try await readControl().campaigns where state.cancelled {
            guard let at = state.cancelledAtMs else {
                _ = try await changeControl(campaign: campaign) { current in
                    var stamped = current
                    if stamped.cancelled && stamped.cancelledAtMs == nil { stamped.cancelledAtMs = nowMs }
                    return stamped
                }
                continue
            }
            guard nowMs - at > retentionMs else { continue }
            let reply = try await client.eval(
                Scripts.controlExpire, keys: RedisArguments([keys.control, keys.controlVersion, keys.campaign(campaign)]),
                arguments: RedisArguments([campaign, state.stored]))
            if reply.integer == 1 { removed.append(campaign) }
        }
        return removed.sorted()
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

    /// KEYS: control, version, the campaign's hash. ARGV: campaign, its value as read. Removes the entry if
    /// it still holds that value and the campaign's hash is gone, incrementing the version: 1, else 0.
    static let controlExpire = RedisScript(
        #"""
        if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
        if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
        redis.call('HDEL', KEYS[1], ARGV[1])
        redis.call('INCR', KEYS[2])
        return 1
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
