import Foundation
import Jobs
import LocalTime
import Redis

/// Local-time delivery (design §2.17): `campaign publish --at 09:00 --local-time` sends each job of the
/// campaign at 09:00 on its recipient's wall clock — the first 09:00 there at or after the publish — in
/// the recipient's zone (the job's, else its token's registered one, else the app's default). A job
/// that comes before its time is held in Redis under its campaign until then (so pause, cancel and pace
/// still apply, and the held slots' byte caps bound it); released, it is gated again and passes.
struct LocalTimeRule: AudienceRule {
    /// Each app's default zone (`apps[].default_time_zone`, else its quiet hours' default), UTC otherwise.
    let defaults: [String: TimeZone]
    static let utc = TimeZone(identifier: "UTC")!

    init(_ configuration: PipelineConfiguration) {
        var defaults: [String: TimeZone] = [:]
        for app in configuration.apps {
            if let zone = app.defaultTimeZone ?? app.quietHours?.defaultTimeZone { defaults[app.bundleID] = zone }
        }
        self.defaults = defaults
    }

    func needsProfile(_ job: Job, control: CampaignControlState?) -> Bool {
        job.timeZone == nil && control?.localTime != nil
    }

    func verdicts(_ subjects: [RuleSubject], nowMs: Int64, store: PipelineStore) async throws -> [RuleVerdict] {
        subjects.map { subject in
            guard let control = subject.control, let text = control.localTime, let fromMs = control.localTimeFromMs,
                let wall = WallTime(parsing: text), let campaign = subject.job.campaign
            else { return .pass }
            let zone = subject.recipient.zone(or: defaults[subject.job.app] ?? Self.utc)
            let due = Self.dueMs(wall, fromMs: fromMs, in: zone)
            return due <= nowMs ? .pass : .hold(dueMs: due, place: campaign)
        }
    }

    /// The first instant at or after `fromMs` at which `zone`'s clock reads `wall`, in epoch ms.
    static func dueMs(_ wall: WallTime, fromMs: Int64, in zone: TimeZone) -> Int64 {
        let due = LocalDelivery.due(wall, after: Date(timeIntervalSince1970: Double(fromMs) / 1000), in: zone)
        return Int64((due.timeIntervalSince1970 * 1000).rounded(.up))
    }
}
