import Jobs
import Redis
import RedisClient

/// Frequency caps (design §2.15): at most N sends to one recipient (its user, else its token) per sliding
/// window, across campaigns and `run` processes — `apps[].frequency_caps` over all of an app's jobs, and a
/// campaign's own (`campaign publish --cap 1/24h`) over that campaign's. A job over a cap settles `capped`.
///
/// State: one sorted set per recipient (and one per recipient and capped campaign), job fingerprint → the
/// send's time, in a tag of the recipient's own (the caps of one user meet in one slot, whichever of its
/// tokens a job names). Trimmed to the longest window at each call and expiring after it: a recipient
/// costs at most its largest cap's count of entries. A job counts when this rule lets it pass, so only
/// a job about to be sent counts (the rules run after dedup, suppression and the other rules); one whose
/// fingerprint is in the set already (a retry, a redelivery) counts once.
///
/// One call per slot for the batch, after the gate's: the recipient's slot is not its token's, and the cap
/// must count only what the gate admitted.
struct FrequencyCapRule: AudienceRule {
    let settings: [String: FrequencyCapSettings]

    init(_ configuration: PipelineConfiguration) {
        var settings: [String: FrequencyCapSettings] = [:]
        for app in configuration.apps { if let s = app.frequencyCaps { settings[app.bundleID] = s } }
        // A campaign's own cap needs no app setting: the rule is always there (its cost without any cap
        // is a dictionary lookup and a nil check per admitted job).
        self.settings = settings
    }

    func needsProfile(_ job: Job, control: CampaignControlState?) -> Bool {
        job.user == nil && (control?.cap != nil || settings[job.app] != nil)
    }

    /// The caps that apply to `subject`, by key: the app's (`campaign` nil) and its campaign's.
    private func checks(_ subject: RuleSubject) -> [(campaign: String?, caps: [FrequencyCap])] {
        let app = settings[subject.job.app]
        let exemptions = app?.exempt ?? FrequencyCapSettings.defaultExempt
        if subject.isPriority && exemptions.contains(.priority) { return [] }
        if subject.job.isTransactional && exemptions.contains(.transactional) { return [] }
        var out: [(String?, [FrequencyCap])] = []
        if let app, !app.caps.isEmpty { out.append((nil, app.caps)) }
        if let cap = subject.control?.cap, let campaign = subject.job.campaign { out.append((campaign, [cap])) }
        return out
    }

    func verdicts(_ subjects: [RuleSubject], nowMs: Int64, store: PipelineStore) async throws -> [RuleVerdict] {
        var verdicts = [RuleVerdict](repeating: .pass, count: subjects.count)
        var groups: [String: CapGroup] = [:]
        var order: [String] = []
        let keys = store.keys
        for (s, subject) in subjects.enumerated() {
            let checks = checks(subject)
            if checks.isEmpty { continue }
            let recipient = subject.recipient.capKey
            let tag = keys.tokenTag(app: subject.job.app, tokenHex: recipient)
            if groups[tag] == nil {
                groups[tag] = CapGroup(tag: tag)
                order.append(tag)
            }
            groups[tag]!.add(
                subject: s, member: subject.fingerprint.member,
                refused: keys.frequencyCapRefused(tag: tag, recipient: recipient),
                checks: checks.map { (keys.frequencyCap(tag: tag, recipient: recipient, campaign: $0.campaign), $0.caps) })
        }
        if order.isEmpty { return verdicts }
        let list = order.map { groups[$0]! }
        let replies = try await store.runGrouped(Self.script, header: RedisArguments(), groups: list.map(\.scriptGroup))
        for (group, reply) in zip(list, replies) {
            guard case .bulk(let codes) = reply, codes.count == group.subjects.count else {
                throw RedisError.unexpectedReply("frequency caps: expected \(group.subjects.count) codes, got \(reply)")
            }
            for (position, s) in group.subjects.enumerated() where codes[position] == UInt8(ascii: "1") {
                verdicts[s] = .settle(.capped)
            }
        }
        return verdicts
    }

    /// ARGV from 2 (after #groups), per group: #keys, #jobs, each key's longest window (ms; negative for a
    /// refused-jobs key), then per job:
    /// member, refused-key-index, #checks, (key-index max window-ms)…. KEYS per group: its sorted sets
    /// (the counted sends', and each recipient's refused jobs', ``RedisKeys/frequencyCapRefused(tag:recipient:)``,
    /// where a capped job's fingerprint is kept for `job status` as long as the sends that capped it).
    /// Returns per group a digit per job: 1 over a cap (nothing counted), 0 counted (or counted before).
    static let script = RedisScript(
        #"""
        local rcall, tonumber, KEYS, ARGV = redis.call, tonumber, KEYS, ARGV
        local time = rcall('TIME')
        local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        local out = {}
        local k, i = 0, 2
        for g = 1, tonumber(ARGV[1]) do
          local nk, nj = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
          i = i + 2
          -- Per key: its entries within its longest window (a key nobody was sent to yet, the usual
          -- case in a broad campaign, costs one ZCARD here, then a ZADD and a PEXPIRE: 3 calls a job).
          -- A negative window marks a recipient's refused-jobs key: read by nobody here, trimmed when written.
          local longest, card, touched = {}, {}, {}
          for x = 1, nk do
            longest[x] = tonumber(ARGV[i]); i = i + 1
            if longest[x] > 0 then
              local n = rcall('ZCARD', KEYS[k + x])
              if n > 0 then
                n = n - rcall('ZREMRANGEBYSCORE', KEYS[k + x], '-inf', nowMs - longest[x])
              end
              card[x] = n
            end
          end
          local codes = {}
          for j = 1, nj do
            local member, refusedX, nc = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
            i = i + 3
            local room, counted, checked = true, false, {}
            for c = 1, nc do
              local x, max, window = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
              i = i + 3
              checked[c] = x
              local key = KEYS[k + x]
              if card[x] == 0 then
                -- Nothing counted: room, and not counted before.
              elseif rcall('ZSCORE', key, member) then
                counted = true
              elseif card[x] >= max and rcall('ZCOUNT', key, '(' .. (nowMs - window), '+inf') >= max then
                -- (Fewer entries than `max` in the longest window: fewer in any shorter one.)
                room = false
              end
            end
            if counted or room then
              for c = 1, nc do
                local x = checked[c]
                card[x] = card[x] + rcall('ZADD', KEYS[k + x], 'NX', nowMs, member)
                touched[x] = true
              end
              codes[j] = '0'
            else
              rcall('ZADD', KEYS[k + refusedX], nowMs, member)
              touched[refusedX] = true
              codes[j] = '1'
            end
          end
          for x in pairs(touched) do
            local window = longest[x]
            if window < 0 then
              window = -window
              rcall('ZREMRANGEBYSCORE', KEYS[k + x], '-inf', nowMs - window)
            end
            rcall('PEXPIRE', KEYS[k + x], window)
          end
          k = k + nk
          out[g] = table.concat(codes)
        end
        return out
        """#)
}

/// One recipient tag's share of a caps call.
private struct CapGroup {
    var tag: String
    var keys: [String] = []
    /// Each key's index in `keys`: a group holds two keys per recipient (~120 in a batch of 1 000 over 16
    /// token buckets), so a search of `keys` per job made the batch quadratic.
    private var indexOf: [String: Int] = [:]
    var longest: [Int64] = []
    var subjects: [Int] = []
    var jobArguments = RedisArguments()

    init(tag: String) { self.tag = tag }

    mutating func add(subject: Int, member: Int64, refused: String, checks: [(key: String, caps: [FrequencyCap])]) {
        subjects.append(subject)
        jobArguments.append(String(member))
        // The refused set lives as long as the job's longest window (trimmed and expiring with it); its
        // window goes negative to the script, which then reads nothing of it.
        jobArguments.append(index(of: refused, window: -(checks.flatMap(\.caps).map(\.perMs).max() ?? 0)) + 1)
        jobArguments.append(checks.reduce(0) { $0 + $1.caps.count })
        for check in checks {
            let x = index(of: check.key, window: check.caps.map(\.perMs).max() ?? 0)
            for cap in check.caps {
                jobArguments.append(x + 1)
                jobArguments.append(cap.max)
                jobArguments.append(cap.perMs)
            }
        }
    }

    /// `key`'s index in the group's keys (added when new), its longest window raised to `window` (a
    /// refused-jobs key's windows are negative: lowered).
    private mutating func index(of key: String, window: Int64) -> Int {
        if let known = indexOf[key] {
            longest[known] = window < 0 ? min(longest[known], window) : max(longest[known], window)
            return known
        }
        indexOf[key] = keys.count
        keys.append(key)
        longest.append(window)
        return keys.count - 1
    }

    var scriptGroup: ScriptGroup {
        var arguments = RedisArguments()
        arguments.append(keys.count)
        arguments.append(subjects.count)
        for window in longest { arguments.append(window) }
        arguments.append(contentsOf: jobArguments)
        return ScriptGroup(tag: tag, keys: RedisArguments(keys), arguments: arguments)
    }
}

/// `apps[].frequency_caps` (a list of `{max: 3, per: 24h}`) and `apps[].frequency_caps_exempt` (which
/// jobs no cap counts, by default both kinds: `[priority, transactional]`; `[]` caps every job).
public struct FrequencyCapSettings: Sendable, Hashable {
    public enum Exemption: String, Sendable, Hashable, CaseIterable {
        /// Jobs of the priority lane (`kafka.priority_topic`).
        case priority
        /// Jobs marked `"transactional": true`.
        case transactional
    }

    public static let defaultExempt: Set<Exemption> = [.priority, .transactional]

    public var caps: [FrequencyCap]
    public var exempt: Set<Exemption> = FrequencyCapSettings.defaultExempt

    public init(caps: [FrequencyCap], exempt: Set<Exemption> = FrequencyCapSettings.defaultExempt) {
        self.caps = caps
        self.exempt = exempt
    }

    /// The app entry's keys; nil when it has no `frequency_caps`.
    static func parse(_ a: ConfigSection, file: String) throws -> FrequencyCapSettings? {
        guard a.has("frequency_caps") else {
            if a.has("frequency_caps_exempt") {
                throw ConfigurationError(file: file, key: "\(a.path).frequency_caps_exempt", problem: "only with frequency_caps")
            }
            return nil
        }
        var caps: [FrequencyCap] = []
        for entry in try a.sections("frequency_caps") {
            if !entry.has("max") {
                throw ConfigurationError(file: file, key: "\(entry.path).max", problem: "missing: the most sends per window (1…10000)")
            }
            let max = try entry.int("max", default: 0, range: 1...10_000)
            let per = try entry.requiredString("per", "the window, e.g. 24h, 90m, 7d")
            guard let perMs = FrequencyCap.milliseconds(per), let cap = FrequencyCap(max: max, perMs: perMs) else {
                throw ConfigurationError(
                    file: file, key: "\(entry.path).per",
                    problem: "expected a window of 1s…31d written like 30s, 90m, 24h or 7d, found \"\(per)\"")
            }
            try entry.finish()
            caps.append(cap)
        }
        if caps.isEmpty {
            throw ConfigurationError(file: file, key: "\(a.path).frequency_caps", problem: "expected at least one {max, per} entry")
        }
        var settings = FrequencyCapSettings(caps: caps)
        if let names = try a.strings("frequency_caps_exempt") {
            settings.exempt = try Set(
                names.map { name in
                    guard let e = Exemption(rawValue: name) else {
                        throw ConfigurationError(
                            file: file, key: "\(a.path).frequency_caps_exempt",
                            problem: "expected priority or transactional, found \"\(name)\"")
                    }
                    return e
                })
        }
        return settings
    }
}
