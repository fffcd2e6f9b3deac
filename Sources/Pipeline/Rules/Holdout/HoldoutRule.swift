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

    /// Whether `recipient` (``RecipientIdentity/capKey``) falls in the first `basisPoints` ÷ 10 000 of
    /// `campaign`'s hash space. FNV-1a 64 over the campaign, a 0 byte and the recipient, mixed (its low
    /// bits alone spread poorly): stable across versions, since it decides who a running campaign skips.
    static func isHeldOut(campaign: String, recipient: String, basisPoints: Int) -> Bool {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in campaign.utf8 { h = (h ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        h = (h ^ 0) &* 0x0000_0100_0000_01b3
        for byte in recipient.utf8 { h = (h ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        // splitmix64's finalizer.
        h = (h ^ (h >> 30)) &* 0xbf58_476d_1ce4_e5b9
        h = (h ^ (h >> 27)) &* 0x94d0_49bb_1331_11eb
        h ^= h >> 31
        return Int(h % 10_000) < basisPoints
    }
}
