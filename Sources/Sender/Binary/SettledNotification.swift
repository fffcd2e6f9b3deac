import APNsProtocol

/// What a binary shard keeps of a notification once it settled by time, for the grace window
/// (docs/design.md §2.5): what writing it again takes and the job id its log lines name
/// (`refused_after_settle`, `lost_after_settle`). Its outcome went out when it settled, so nothing
/// else of it is read again: not its campaign's counters, not its Kafka position.
///
/// A shard keeps rate × `settle_grace` of these (~60 000 at 100 000 jobs/s over 4 shards in `ops/bench
/// e2e`), so they are small: 64 bytes, no allocation of their own. The payload is shared (one per
/// template variant); the app is not kept, every notification of a shard is its app's; and the id of a
/// campaign's job — `<campaign>:<token hex>`, `Campaign.jobID` — is kept as its campaign, rebuilt only
/// when a log line needs it, rather than as a string of its own (~110 bytes on the heap for a 70-byte
/// id). Keeping the whole notification (its storage object, the id) cost ~600 bytes of resident memory
/// per notification kept.
struct SettledNotification {
    /// The token's four words (`DeviceToken.binaryWords`): a binary shard only ever holds 32-byte tokens
    /// (`BinaryTransport.send` answers any other size itself), and a `DeviceToken`, which may hold another
    /// size, takes 33 bytes (72 for this struct).
    private let tokenWords: (UInt64, UInt64, UInt64, UInt64)
    var token: DeviceToken { DeviceToken(binaryWords: tokenWords) }
    let payload: [UInt8]
    /// The job id, or the campaign when `jobIDIsCampaignToken` (the id is `<campaign>:<token hex>`).
    private let jobIDOrCampaign: String
    let expiry: UInt32
    let priority: Priority
    let jobIDIsCampaignToken: Bool
    /// `Pending.attempts` and `processingFailures`, saturating: a resend counts on from them.
    let attempts: UInt8
    let processingFailures: UInt8

    init(_ n: PushNotification, attempts: Int, processingFailures: Int) {
        guard let words = n.token.binaryWords else {
            preconditionFailure("a binary shard holds only 32-byte tokens (BinaryTransport.send refuses the others)")
        }
        tokenWords = words
        payload = n.payload
        expiry = n.expiry
        priority = n.priority
        if let id = n.keptJobID {
            jobIDOrCampaign = id
            jobIDIsCampaignToken = false
        } else {
            jobIDOrCampaign = n.campaign!
            jobIDIsCampaignToken = true
        }
        self.attempts = UInt8(clamping: attempts)
        self.processingFailures = UInt8(clamping: processingFailures)
    }

    var jobID: String {
        jobIDIsCampaignToken ? PushNotification.campaignJobID(campaign: jobIDOrCampaign, token: token) : jobIDOrCampaign
    }

    /// The notification to write again: what goes on the wire, its job id, its shard's `app` and (for a
    /// campaign's job) campaign. Its Kafka position is not kept: the settler had it when it was reported.
    func notification(app: String) -> PushNotification {
        PushNotification(
            jobID: jobID, app: app, token: token, payload: payload, expiry: expiry, priority: priority,
            campaign: jobIDIsCampaignToken ? jobIDOrCampaign : nil)
    }
}
