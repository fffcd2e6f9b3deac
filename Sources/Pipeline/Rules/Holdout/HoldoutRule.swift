import Jobs
import Redis

/// `campaign publish --holdout 5%` (design §2.18): a share of a campaign's recipients never receives it,
/// so that the producer can measure the campaign's lift against them. Who is held out is a hash of the
/// campaign and the recipient (its user, else its token): the same recipients across redeliveries,
/// processes and restarts, with no state in Redis; a user with several devices is held out on all of
/// them. Settles `held_out`.
struct HoldoutRule: AudienceRule {
    func needsProfile(_ job: Job, control: CampaignControlState?) -> Bool {
        job.user == nil && (control?.holdoutBasisPoints ?? 0) > 0
    }

    func verdicts(_ subjects: [RuleSubject], nowMs: Int64, store: PipelineStore) async throws -> [RuleVerdict] {
        subjects.map { subject in
            guard let share = subject.control?.holdoutBasisPoints, share > 0, let campaign = subject.job.campaign else { return .pass }
            return Self.isHeldOut(campaign: campaign, recipient: subject.recipient.capKey, basisPoints: share) ? .settle(.heldOut) : .pass
        }
    }

    static func isHeldOut(campaign: String, recipient: String, basisPoints: Int) -> Bool {
        CampaignControlState.isHeldOut(campaign: campaign, recipient: recipient, basisPoints: basisPoints)
    }
}
