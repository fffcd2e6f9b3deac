import Foundation
import Jobs
import LocalTime
import Redis
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
        return subjects.map { subject in
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
    }

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
