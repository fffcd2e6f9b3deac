import Foundation
import Jobs
import LocalTime
import Redis
import RedisClient
import Sender

/// Quiet hours (design §2.16): `apps[].quiet_hours: {from: "22:00", to: "08:00"}` in the recipient's
/// zone — the job's `time_zone`, else its token's registered one, else the app's default. A job that
/// arrives inside them is held in Redis until they end (under its campaign when that has control state,
/// so a pause reaches it there, else under `@app:<app>`; a cancel reaches it when it comes back), or with `action: drop` settles `quiet`. The priority lane and
/// transactional jobs are exempt: a sign-in code at 23:00 is wanted.
struct QuietHoursRule: AudienceRule {
    let settings: [String: QuietHoursSettings]

    init?(_ configuration: PipelineConfiguration, lane: Lane) {
        if lane == .priority { return nil }
        var settings: [String: QuietHoursSettings] = [:]
        for app in configuration.apps { if let q = app.quietHours { settings[app.bundleID] = q } }
        if settings.isEmpty { return nil }
        self.settings = settings
    }

    func needsProfile(_ job: Job, control: CampaignControlState?) -> Bool {
        job.timeZone == nil && settings[job.app] != nil
    }

    func verdicts(_ subjects: [RuleSubject], nowMs: Int64, store: PipelineStore) async throws -> [RuleVerdict] {
        let now = Date(timeIntervalSince1970: Double(nowMs) / 1000)
        let verdicts = subjects.map { subject -> RuleVerdict in
            guard let quiet = settings[subject.job.app], !subject.job.isTransactional else { return .pass }
            let zone = subject.recipient.zone(or: quiet.defaultTimeZone)
            guard let end = quiet.window.end(containing: now, in: zone) else { return .pass }
            switch quiet.action {
            case .drop: return .settle(.quiet)
            case .hold:
                // Where the held-bytes waits (`CapWaits`) look for its room: its campaign when that has
                // control state (so a pause reaches it in Redis), else its app's place.
                let place =
                    subject.control != nil ? subject.job.campaign ?? Self.place(app: subject.job.app) : Self.place(app: subject.job.app)
                return .hold(dueMs: Int64((end.timeIntervalSince1970 * 1000).rounded(.up)), place: place)
            }
        }
        try await recordDrops(zip(subjects, verdicts).compactMap { $1 == .settle(.quiet) ? $0 : nil }, store: store)
        return verdicts
    }

    /// Keeps each dropped job's fingerprint in its token tag's ``RedisKeys/quietDropped(tag:)`` set, so that
    /// `job status` can say what became of it (one call per token slot, only for a batch that dropped
    /// some). Written before the settle: a job redelivered after a crash is dropped and written again.
    private func recordDrops(_ dropped: [RuleSubject], store: PipelineStore) async throws {
        if dropped.isEmpty { return }
        var members: [String: [Int64]] = [:]
        var order: [String] = []
        for subject in dropped {
            let tag = store.keys.tokenTag(app: subject.job.app, tokenHex: subject.job.tokenHex)
            if members[tag] == nil { order.append(tag) }
            members[tag, default: []].append(subject.fingerprint.member)
        }
        let retentionMs = store.configuration.dedupRetention.components.seconds * 1000
        let scriptGroups = order.map { tag in
            var arguments = RedisArguments()
            arguments.append(members[tag]!.count)
            for member in members[tag]! { arguments.append(member) }
            return ScriptGroup(tag: tag, keys: RedisArguments([store.keys.quietDropped(tag: tag)]), arguments: arguments)
        }
        var header = RedisArguments()
        header.append(retentionMs)
        _ = try await store.runGrouped(Self.dropsScript, header: header, groups: scriptGroups)
    }

    /// ARGV: retention-ms, #groups, then per group: #members, the members. KEYS per group: its
    /// ``RedisKeys/quietDropped(tag:)`` set. Each member is written with the server's time; entries older
    /// than the retention go, and the set expires after it. Returns per group its count.
    static let dropsScript = RedisScript(
        #"""
        local rcall, tonumber, KEYS, ARGV = redis.call, tonumber, KEYS, ARGV
        local time = rcall('TIME')
        local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        local retention = tonumber(ARGV[1])
        local out, i = {}, 3
        for g = 1, tonumber(ARGV[2]) do
          local n = tonumber(ARGV[i])
          for j = 1, n do rcall('ZADD', KEYS[g], nowMs, ARGV[i + j]) end
          i = i + n + 1
          rcall('ZREMRANGEBYSCORE', KEYS[g], '-inf', nowMs - retention)
          rcall('PEXPIRE', KEYS[g], retention)
          out[g] = n
        end
        return out
        """#)

    /// Where an app's quiet-held jobs wait when no campaign control names them: the app's own held place
    /// (that of `apps[].max_rate`, design §2.13).
    static func place(app: String) -> String { DeferredRelease.appDeferral(app) }
}

/// `apps[].quiet_hours`: `from` and `to` ("HH:MM", local), `default_time_zone` (IANA; UTC when absent),
/// `action` (`hold`, the default, or `drop`).
public struct QuietHoursSettings: Sendable {
    public enum Action: String, Sendable { case hold, drop }

    public var window: QuietHours
    public var defaultTimeZone: TimeZone
    public var action: Action

    public init(window: QuietHours, defaultTimeZone: TimeZone, action: Action = .hold) {
        self.window = window
        self.defaultTimeZone = defaultTimeZone
        self.action = action
    }

    static func parse(_ a: ConfigSection, file: String) throws -> QuietHoursSettings? {
        guard a.has("quiet_hours") else { return nil }
        let q = try a.section("quiet_hours")
        func time(_ key: String) throws -> WallTime {
            let text = try q.requiredString(key, "a local time HH:MM (24-hour)")
            guard let t = WallTime(parsing: text) else {
                throw ConfigurationError(
                    file: file, key: "\(q.path).\(key)", problem: "expected a local time HH:MM (24-hour), found \"\(text)\"")
            }
            return t
        }
        let from = try time("from")
        let to = try time("to")
        guard let window = QuietHours(from: from, to: to) else {
            throw ConfigurationError(file: file, key: "\(q.path).to", problem: "expected a time other than from (\(from))")
        }
        let zone = try timeZone(q, "default_time_zone", file: file) ?? TimeZone(identifier: "UTC")!
        let actionText = try q.string("action", default: "hold")
        guard let action = Action(rawValue: actionText) else {
            throw ConfigurationError(file: file, key: "\(q.path).action", problem: "expected hold or drop, found \"\(actionText)\"")
        }
        try q.finish()
        return QuietHoursSettings(window: window, defaultTimeZone: zone, action: action)
    }

    /// An IANA zone key of `section`; nil when absent.
    static func timeZone(_ section: ConfigSection, _ key: String, file: String) throws -> TimeZone? {
        guard let name = try section.string(key) else { return nil }
        guard let zone = TimeZones.named(name) else {
            throw ConfigurationError(
                file: file, key: section.path.isEmpty ? key : "\(section.path).\(key)",
                problem: "expected an IANA time zone name such as Europe/Paris, found \"\(name)\"")
        }
        return zone
    }
}
