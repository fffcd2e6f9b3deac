/// Why a job (or registration) message was refused. `reason.rawValue` is what goes into the
/// dead-letter topic's `reason` header (contract: ops tools and counters read it); `detail` is a
/// sentence for people: which key, what was expected.
public struct JobError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: JobErrorReason
    public var detail: String
    /// For `no-certificate-for-app` (a job valid but for its app): its id and campaign, so the refusal
    /// is still counted in the campaign's progress, each job once. nil otherwise.
    public var jobID: String?
    public var campaign: String?

    public init(reason: JobErrorReason, detail: String) {
        self.reason = reason
        self.detail = detail
    }

    init(_ reason: JobErrorReason, _ detail: String) {
        self.init(reason: reason, detail: detail)
    }

    public var description: String { "\(reason.rawValue): \(detail)" }
}

/// The machine-readable reason of a `JobError` (the dead-letter `reason` header).
///
/// Cases may be added in later versions (two were added for registrations): a `switch` over this enum
/// outside this module should have a `default`, or use `rawValue`.
public enum JobErrorReason: String, Sendable, CaseIterable {
    /// Not valid JSON (RFC 8259), or a known top-level key given twice (ambiguous: parsers disagree on
    /// which one wins, so the job is refused rather than guessed at).
    case invalidJSON = "invalid-json"
    /// Valid JSON but not an object.
    case notAnObject = "not-an-object"
    /// No `id` (or `null`).
    case missingID = "missing-id"
    /// `id` is not a string of 1…128 UTF-8 bytes.
    case invalidID = "invalid-id"
    /// No `app`, or not a non-empty string.
    case missingApp = "missing-app"
    /// `app` is a string over 255 UTF-8 bytes (`JobDecoder.maxAppBytes`; no bundle id is that long).
    case invalidApp = "invalid-app"
    /// `token` missing, not a string, not an even count of 16…200 hex digits (`DeviceToken`).
    case invalidToken = "invalid-token"
    /// `channel` (a broadcast's channel id) is not a string of base64 text of at most 256 characters.
    case invalidChannel = "invalid-channel"
    /// Both `token` and `channel`: a job names one recipient, a device or a broadcast channel.
    case tokenAndChannel = "token-and-channel"
    /// `storage_policy` (a broadcast's channel's storage policy) is not `"no-storage"` or
    /// `"most-recent"`, or the job has no `channel`.
    case invalidStoragePolicy = "invalid-storage-policy"
    /// A broadcast whose nonzero `expiry` asks APNs to store it, on a channel created with the No Message
    /// Stored policy (Apple: "Providing a nonzero expiration for a channel created with the No Message
    /// Stored storage policy results in message rejection"). Decided by the decoder when the job says
    /// `storage_policy`, else before sending once the channel's policy is known (docs/design.md §5.5).
    case expiryOnNoStorageChannel = "expiry-on-no-storage-channel"
    /// No `payload` (or `null`).
    case missingPayload = "missing-payload"
    /// `payload` is not an object, has no `aps` object, or a key of Tables 3-1/3-2 has the wrong type.
    case invalidPayload = "invalid-payload"
    /// The compact payload (or its largest `alerts` variant) is over the limit.
    case payloadTooLarge = "payload-too-large"
    /// Priority 10 (given or by default) with an `aps` holding only `content-available`.
    case contentAvailableOnlyWithPriority10 = "priority-10-content-available-only"
    /// `priority` is not the number 10, 5 or 1, or not one the push type allows (a Live Activity: 10 or 5;
    /// a payload that shows nothing: 5).
    case invalidPriority = "invalid-priority"
    /// `expiry` is not a whole number of epoch seconds in 0…4294967295.
    case invalidExpiry = "invalid-expiry"
    /// `expiry` is in the past (0, "do not store", is never expired).
    case expired = "expired"
    /// `alerts` is not an object of language → alert (a string or an alert dictionary).
    case invalidAlerts = "invalid-alerts"
    /// `campaign` is not a string of 1…128 UTF-8 bytes.
    case invalidCampaign = "invalid-campaign"
    /// `collapse_id` is not a string of 1…64 UTF-8 bytes (HTTP/2 `apns-collapse-id`).
    case invalidCollapseID = "invalid-collapse-id"
    /// `push_type` is not one of Apple's `apns-push-type` values, or does not fit the job: a `background`
    /// push must have priority 5 and a payload that shows nothing (only content-available).
    case invalidPushType = "invalid-push-type"
    /// `user` (the producer's id of the recipient, for frequency caps) is not a string of 1…128 UTF-8 bytes.
    case invalidUser = "invalid-user"
    /// `time_zone` (the recipient's, for quiet hours) is not a string naming an IANA time zone (e.g.
    /// `Europe/Paris`; an offset such as `GMT+5` is not one), or is over 64 UTF-8 bytes.
    case invalidTimeZone = "invalid-time-zone"
    /// `transactional` (the job is exempt from frequency caps and quiet hours) is not a JSON boolean.
    case invalidTransactional = "invalid-transactional"
    /// `push_type` `liveactivity` with a payload that is not one Apple documents for its event (`start`,
    /// `update`, `end`): a required `aps` key missing or a key of the wrong type; the detail names it.
    case invalidLiveActivity = "invalid-live-activity"
    /// `push_type` `liveactivity` or `location` for an app that cannot send it: Apple serves those push
    /// types over token authentication only (decided when the job reaches its app, not by the decoder).
    case pushTypeNeedsTokenAuth = "push-type-needs-token-auth"
    /// A valid token that is not 32 bytes, for a binary app: the legacy binary interface carries only
    /// that size (command 2, item 1: "Device token, 32 bytes"), while HTTP/2 takes any (Apple: "APNs
    /// device tokens are of variable length"). Decided when the job reaches its app, as
    /// `push-type-needs-token-auth` is.
    case tokenSizeNeedsHTTP2 = "token-size-needs-http2"
    /// Registration: `registered_at` missing, not a whole number of epoch seconds (UInt32), or more than
    /// a day ahead of the clock (`RegistrationDecoder.maxAhead`).
    case invalidRegisteredAt = "invalid-registered-at"
    /// Registration: `language` is not a string of at most 64 UTF-8 bytes.
    case invalidLanguage = "invalid-language"
    /// A valid job (or registration) whose `app` is not one of the pipeline file's apps: decided by the
    /// decoder, before anything touches Redis.
    case noCertificateForApp = "no-certificate-for-app"
}
