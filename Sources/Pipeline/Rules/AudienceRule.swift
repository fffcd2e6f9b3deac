import Foundation
import Jobs
import Kafka
import LocalTime
import Redis
import Sender

/// An audience rule (design §2.14): decides, for the jobs the gate admitted, whether each one reaches its
/// recipient now, later or never. A rule is one type in its folder under `Rules/` with its configuration,
/// its verdicts and, when it keeps state in Redis, its script and keys; ``AudienceRules/configured(_:lane:)``
/// lists the rules in their order. A rule that refuses a job names the outcome it settles with
/// (``SettledOutcomeKind``): counted, on the outcomes topic and in `job status` like every outcome.
protocol AudienceRule: Sendable {
    /// Whether the rule needs the recipient's registered profile (user, time zone) for this job when the
    /// job itself does not say: the gate then reads it in its call.
    func needsProfile(_ job: Job, control: CampaignControlState?) -> Bool

    /// One verdict per subject, in order. Pure rules answer from the subject and the clock; a rule with
    /// state in Redis makes one call per slot for the whole batch.
    func verdicts(_ subjects: [RuleSubject], nowMs: Int64, store: PipelineStore) async throws -> [RuleVerdict]
}

/// What a rule decides for one job.
enum RuleVerdict: Sendable, Equatable {
    /// Not this rule's concern, or within its bounds: the next rule decides.
    case pass
    /// Never sent: settled with this outcome (its lease freed by the settle).
    case settle(SettledOutcomeKind)
    /// Sent later: held in Redis under `place` (a campaign id, or `@app:<bundle id>`) until `dueMs` (epoch ms),
    /// then gated again. Bound by the held slots' byte caps like every held job (design §2.11).
    case hold(dueMs: Int64, place: String)
}

/// One admitted job as the rules see it.
struct RuleSubject: Sendable {
    /// Its index in the batch's jobs.
    var index: Int
    var job: Job
    /// Its id's fingerprint (the gate's): what the rules' records name it by.
    var fingerprint: JobFingerprint
    var recipient: RecipientIdentity
    /// Its campaign's control state (cap, holdout, local time), when it has one.
    var control: CampaignControlState?
    /// It came through the priority lane (exempt from caps and quiet hours).
    var isPriority: Bool
}

/// Who receives a job: the job's own `user` and `time_zone`, else its token's registered ones.
struct RecipientIdentity: Sendable, Hashable {
    var user: String?
    /// An IANA name known to ``TimeZones`` (the decoder refused any other in a job; a registration's is
    /// checked when it was registered).
    var timeZone: String?
    var tokenHex: String

    init(job: Job, profile: RecipientProfile?) {
        user = job.user ?? profile?.user
        timeZone = job.timeZone ?? profile?.timeZone
        tokenHex = job.tokenHex
    }

    /// What a frequency cap counts under: the user, else the token.
    var capKey: String { user.map { "u:" + $0 } ?? "t:" + tokenHex }

    /// The recipient's zone, else `fallback`.
    func zone(or fallback: TimeZone) -> TimeZone { timeZone.flatMap(TimeZones.named) ?? fallback }
}

/// The configured rules in their order (design §2.14): the holdout group first (a held-out recipient
/// is never sent, whatever else applies), then quiet hours and local time (they only move a job in
/// time), then the frequency caps last, so that only a job about to be sent counts against a cap.
struct AudienceRules: Sendable {
    let rules: [any AudienceRule]

    /// The rules of `configuration` for `lane`. Adding a rule: its folder and one line here.
    static func configured(_ configuration: PipelineConfiguration, lane: Lane) -> AudienceRules {
        let rules: [(any AudienceRule)?] = [
            HoldoutRule(),
            QuietHoursRule(configuration, lane: lane),
            LocalTimeRule(configuration),
            FrequencyCapRule(configuration),
        ]
        return AudienceRules(rules: rules.compactMap { $0 })
    }

    /// Whether any rule needs `job`'s registered profile.
    func needsProfile(_ job: Job, control: CampaignControlState?) -> Bool {
        // A job that names both its user and its zone needs nothing stored.
        if job.user != nil && job.timeZone != nil { return false }
        return rules.contains { $0.needsProfile(job, control: control) }
    }

    /// The rules' outcome for the admitted jobs among `subjects`: the subjects still to be sent, the
    /// settled ones by index, and the ones to hold.
    func decide(_ subjects: [RuleSubject], nowMs: Int64, store: PipelineStore) async throws -> RuleOutcome {
        var outcome = RuleOutcome()
        var open = subjects
        for rule in rules where !open.isEmpty {
            let verdicts = try await rule.verdicts(open, nowMs: nowMs, store: store)
            var next: [RuleSubject] = []
            next.reserveCapacity(open.count)
            for (subject, verdict) in zip(open, verdicts) {
                switch verdict {
                case .pass: next.append(subject)
                case .settle(let kind): outcome.settled[subject.index] = kind
                case .hold(let dueMs, let place): outcome.held.append(RuleOutcome.Hold(index: subject.index, dueMs: dueMs, place: place))
                }
            }
            open = next
        }
        return outcome
    }
}

/// What the rules decided for a batch's admitted jobs (those not named here are sent).
struct RuleOutcome: Sendable {
    struct Hold: Sendable, Equatable {
        var index: Int
        var dueMs: Int64
        var place: String
    }

    var settled: [Int: SettledOutcomeKind] = [:]
    var held: [Hold] = []
}
