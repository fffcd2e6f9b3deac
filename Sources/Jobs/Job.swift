import APNsProtocol

/// A validated notification job (`docs/design.md §3.1`), as decoded from one Kafka message by `JobDecoder`.
///
/// A value type over one shared, immutable storage object: the pipeline hands jobs from stage to stage
/// (decoding, gate, send) and a copy is one reference count, not one per string, payload part and
/// alert (copying the fields was ~10 % of `run`'s CPU). A setter, which nothing on the hot
/// path calls, makes a new storage object.
public struct Job: Sendable {
    // `@usableFromInline`: the getters the gate and the dispatch read per job (`id`, `app`, `tokenHex`,
    // `channel`, `campaign`, `pushType`, `hasAlerts`; `user`, `timeZone`, `isTransactional` for the
    // audience rules) are inlined into the pipeline's code rather than called
    // (`perf`). The storage holds them in a `let`: a `var` of a class read from another
    // module costs a dynamic exclusivity check (`swift_beginAccess`) per read, which was ~0.07 µs per
    // job in `send --protocol http2` (`perf`).
    @usableFromInline struct Fields: Sendable {
        @usableFromInline var id: String
        @usableFromInline var app: String
        var token: DeviceToken
        @usableFromInline var tokenHex: String
        /// A broadcast job's channel (then `token` is ``Job/channelPlaceholderToken`` and `tokenHex` empty);
        /// nil for a device job, which costs it one nil word.
        @usableFromInline var channel: BroadcastChannelID?
        var payload: Payload
        @usableFromInline var alerts: [String: Alert]
        var template: JobTemplate?
        var expiry: UInt32
        /// Whether `expiry` is the job's own (false: the decoder's default), and a broadcast's channel's
        /// storage policy as the job states it: what a broadcast's `apns-expiration` is made from
        /// (`APNsBroadcastExpiration`). Padding beside `priority` for a device job.
        var expiryIsStated: Bool
        var storagePolicy: APNsChannelStoragePolicy?
        var priority: Priority
        /// In the padding before `campaign`, as the two above.
        @usableFromInline var isTransactional: Bool
        @usableFromInline var campaign: String?
        var collapseID: String?
        @usableFromInline var pushType: APNsPushType?
        /// The recipient, for the audience rules: one reference, nil when the job names neither (two
        /// optional strings were 32 bytes more per job in flight: benchmarks §7.16).
        @usableFromInline var recipientNames: RecipientNames?
    }

    /// A job's `user` and `time_zone`, made only when it has either.
    @usableFromInline final class RecipientNames: Sendable {
        @usableFromInline let user: String?
        @usableFromInline let timeZone: String?

        init(user: String?, timeZone: String?) {
            self.user = user
            self.timeZone = timeZone
        }

        static func make(user: String?, timeZone: String?) -> RecipientNames? {
            user == nil && timeZone == nil ? nil : RecipientNames(user: user, timeZone: timeZone)
        }
    }

    @usableFromInline final class Storage: Sendable {
        @usableFromInline let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    @usableFromInline var storage: Storage

    private mutating func update(_ change: (inout Fields) -> Void) {
        var f = storage.fields
        change(&f)
        storage = Storage(f)
    }

    /// Idempotency key (dedup): 1…128 UTF-8 bytes.
    public var id: String {
        @inlinable get { storage.fields.id }
        set { update { $0.id = newValue } }
    }
    /// Bundle id = certificate topic: selects the pool. Non-empty.
    public var app: String {
        @inlinable get { storage.fields.app }
        set { update { $0.app = newValue } }
    }
    public var token: DeviceToken {
        get { storage.fields.token }
        set {
            update { s in
                s.token = newValue
                s.tokenHex = newValue.hex
                s.channel = nil  // a token makes it a device job
                s.storagePolicy = nil
            }
        }
    }
    /// `token.hex` (lower-case), made once per job: the gate, the notification and the settler share it.
    /// Empty for a broadcast job (it has no token).
    @inlinable public var tokenHex: String { storage.fields.tokenHex }

    /// The job's recipient: its device token, or the broadcast channel it names (`channel`).
    public var recipient: Recipient {
        if let channel = storage.fields.channel { return .channel(channel) }
        return .device(storage.fields.token)
    }

    /// The broadcast channel, nil for a device job.
    @inlinable public var channel: BroadcastChannelID? { storage.fields.channel }

    /// What the job's Redis records are keyed and bucketed by (design §4.1): the token's hex, or for a
    /// broadcast the channel id (its dedup record and lease live in the channel's bucket; it has no
    /// suppression, registration or language).
    public var recipientKey: String { storage.fields.channel?.value ?? storage.fields.tokenHex }

    /// The `token` of a broadcast job, which has none (``APNsBroadcast/placeholderToken``).
    public static var channelPlaceholderToken: DeviceToken { APNsBroadcast.placeholderToken }
    public var payload: Payload {
        get { storage.fields.payload }
        set {
            update { s in
                s.payload = newValue
                s.template = nil
            }
        }
    }
    /// Language → alert (a string or an alert dictionary), used instead of the payload's own alert for
    /// devices registered with that language. May be empty.
    public var alerts: [String: Alert] {
        get { storage.fields.alerts }
        set {
            update { s in
                s.alerts = newValue
                s.template = nil
            }
        }
    }
    /// Whether `alerts` has any: what the gate asks per job (a language is read only for such jobs),
    /// without taking a copy of the dictionary as `alerts` does.
    @inlinable public var hasAlerts: Bool { !storage.fields.alerts.isEmpty }
    /// Where `payload` and `alerts` came from when the decoder shared them between jobs: their encoded
    /// variants are kept there, one per (alert, encoder). Dropped when either is changed.
    var template: JobTemplate? {
        get { storage.fields.template }
        set { update { $0.template = newValue } }
    }
    /// Epoch seconds after which APNs may discard the notification; 0 = do not store.
    public var expiry: UInt32 {
        get { storage.fields.expiry }
        set {
            update { s in
                s.expiry = newValue
                s.expiryIsStated = true
            }
        }
    }
    /// The job's own `expiry`, nil when it gave none (then `expiry` is the decoder's default, now plus
    /// its time to live). A broadcast's `apns-expiration` is made from this and its channel's storage
    /// policy (docs/design.md §5.5), not from the default.
    public var statedExpiry: UInt32? {
        storage.fields.expiryIsStated ? storage.fields.expiry : nil
    }
    /// A broadcast's channel's storage policy as the job states it (`storage_policy`); nil: not stated
    /// (the sender learns it from APNs), and always nil for a device job.
    public var storagePolicy: APNsChannelStoragePolicy? {
        get { storage.fields.storagePolicy }
        set { update { $0.storagePolicy = newValue } }
    }
    public var priority: Priority {
        get { storage.fields.priority }
        set { update { $0.priority = newValue } }
    }
    public var campaign: String? {
        @inlinable get { storage.fields.campaign }
        set { update { $0.campaign = newValue } }
    }
    /// HTTP/2 `apns-collapse-id`: notifications with the same id replace each other on the device.
    /// 1…64 UTF-8 bytes. The binary interface has no such field.
    public var collapseID: String? {
        get { storage.fields.collapseID }
        set { update { $0.collapseID = newValue } }
    }
    /// HTTP/2 `apns-push-type`; nil lets the transport infer it (background for a payload that shows
    /// nothing, else alert).
    public var pushType: APNsPushType? {
        @inlinable get { storage.fields.pushType }
        set { update { $0.pushType = newValue } }
    }
    /// The producer's id of the recipient (`user`, 1…128 UTF-8 bytes): whose frequency caps the job
    /// counts against. nil when the job names none.
    public var user: String? {
        @inlinable get { storage.fields.recipientNames?.user }
        set { update { $0.recipientNames = RecipientNames.make(user: newValue, timeZone: $0.recipientNames?.timeZone) } }
    }
    /// The recipient's IANA time zone name (`time_zone`, e.g. `Europe/Paris`, checked by
    /// ``JobDecoder/knownTimeZone(_:)``): where its quiet hours are reckoned. nil when the job names none.
    public var timeZone: String? {
        @inlinable get { storage.fields.recipientNames?.timeZone }
        set { update { $0.recipientNames = RecipientNames.make(user: $0.recipientNames?.user, timeZone: newValue) } }
    }
    /// Whether the job is transactional (`transactional: true`: a sign-in code, an order update): exempt
    /// from frequency caps and quiet hours. False unless the job says so.
    public var isTransactional: Bool {
        @inlinable get { storage.fields.isTransactional }
        set { update { $0.isTransactional = newValue } }
    }

    public init(
        id: String, app: String, token: DeviceToken, payload: Payload, alerts: [String: Alert] = [:],
        expiry: UInt32, priority: Priority = .immediate, campaign: String? = nil, collapseID: String? = nil,
        pushType: APNsPushType? = nil, user: String? = nil, timeZone: String? = nil, isTransactional: Bool = false
    ) {
        self.init(
            id: id, app: app, token: token, payload: payload, alerts: alerts, template: nil, expiry: expiry, priority: priority,
            campaign: campaign, collapseID: collapseID, pushType: pushType, user: user, timeZone: timeZone,
            isTransactional: isTransactional)
    }

    init(
        id: String, app: String, token: DeviceToken, payload: Payload, alerts: [String: Alert], template: JobTemplate?,
        expiry: UInt32, expiryIsStated: Bool = true, priority: Priority, campaign: String?, collapseID: String?, pushType: APNsPushType?,
        user: String?, timeZone: String?, isTransactional: Bool
    ) {
        storage = Storage(
            Fields(
                id: id, app: app, token: token, tokenHex: token.hex, channel: nil, payload: payload, alerts: alerts, template: template,
                expiry: expiry, expiryIsStated: expiryIsStated, storagePolicy: nil, priority: priority, isTransactional: isTransactional,
                campaign: campaign, collapseID: collapseID, pushType: pushType,
                recipientNames: RecipientNames.make(user: user, timeZone: timeZone)))
    }

    /// A job for `recipient`: a device as `init(id:app:token:…)`, or every device subscribed to a
    /// broadcast channel (push type `liveactivity`, the only one a broadcast carries). `expiry` nil: the
    /// job gives none (`statedExpiry` nil; `expiry` then reads `defaultExpiry`); `storagePolicy`: a
    /// broadcast's channel's, when the job states it.
    public init(
        id: String, app: String, recipient: Recipient, payload: Payload, alerts: [String: Alert] = [:],
        expiry: UInt32?, defaultExpiry: UInt32 = 0, storagePolicy: APNsChannelStoragePolicy? = nil, priority: Priority = .immediate,
        campaign: String? = nil, collapseID: String? = nil, pushType: APNsPushType? = nil, user: String? = nil,
        timeZone: String? = nil, isTransactional: Bool = false
    ) {
        self.init(
            id: id, app: app, recipient: recipient, payload: payload, alerts: alerts, template: nil, expiry: expiry ?? defaultExpiry,
            expiryIsStated: expiry != nil, storagePolicy: storagePolicy, priority: priority, campaign: campaign, collapseID: collapseID,
            pushType: pushType, user: user, timeZone: timeZone, isTransactional: isTransactional)
    }

    init(
        id: String, app: String, recipient: Recipient, payload: Payload, alerts: [String: Alert], template: JobTemplate?,
        expiry: UInt32, expiryIsStated: Bool, storagePolicy: APNsChannelStoragePolicy?, priority: Priority, campaign: String?,
        collapseID: String?, pushType: APNsPushType?, user: String?, timeZone: String?, isTransactional: Bool
    ) {
        switch recipient {
        case .device(let token):
            self.init(
                id: id, app: app, token: token, payload: payload, alerts: alerts, template: template, expiry: expiry,
                expiryIsStated: expiryIsStated, priority: priority, campaign: campaign, collapseID: collapseID, pushType: pushType,
                user: user, timeZone: timeZone, isTransactional: isTransactional)
        case .channel(let channel):
            self.init(
                storage: Storage(
                    Fields(
                        id: id, app: app, token: Self.channelPlaceholderToken, tokenHex: "", channel: channel, payload: payload,
                        alerts: alerts, template: template, expiry: expiry, expiryIsStated: expiryIsStated, storagePolicy: storagePolicy,
                        priority: priority, isTransactional: isTransactional, campaign: campaign, collapseID: collapseID,
                        pushType: pushType ?? APNsBroadcast.pushType, recipientNames: RecipientNames.make(user: user, timeZone: timeZone))))
        }
    }

    private init(storage: Storage) { self.storage = storage }

    /// The alert for a device registered with `language`: `alerts[language]`, else the alert of its
    /// primary language subtag (`fr` for `fr-CA` or `fr_CA`), else nil (the payload's own alert applies).
    public func alert(for language: String) -> Alert? {
        alertKey(for: language).flatMap { alerts[$0] }
    }

    /// The `alerts` key `alert(for:)` picks for `language`, nil when none applies.
    func alertKey(for language: String) -> String? {
        if alerts.isEmpty { return nil }
        if alerts[language] != nil { return language }
        if let cut = language.utf8.firstIndex(where: { $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }) {
            let primary = String(language[..<cut])
            return alerts[primary] != nil ? primary : nil
        }
        return nil
    }

    /// The compact payload to send: with `language` the alert is replaced by alerts[language] when present,
    /// else the payload's own. `jobIDKey` non-nil adds that top-level key with the job id (dev/test only,
    /// so the simulator can record which job it received). Throws when it exceeds the encoder's limit.
    public func encodedPayload(language: String?, encoder: PayloadEncoder, jobIDKey: String? = nil) throws(JobError) -> [UInt8] {
        var out: [UInt8] = []
        try encodedPayload(language: language, encoder: encoder, jobIDKey: jobIDKey, into: &out)
        return out
    }

    /// As `encodedPayload(language:encoder:jobIDKey:)`, appending to `out` (reuse it to avoid an
    /// allocation per job). Nothing is appended when it throws.
    public func encodedPayload(
        language: String?, encoder: PayloadEncoder, jobIDKey: String? = nil, into out: inout [UInt8]
    ) throws(JobError) {
        if jobIDKey == nil, let template {
            // One encoding per variant, shared by every job of the template.
            let key = language.flatMap { alertKey(for: $0) }
            let bytes = try template.encodedPayload(alert: key, encoder: encoder) { () throws(JobError) in
                var fresh: [UInt8] = []
                try encodeFresh(language: language, encoder: encoder, jobIDKey: nil, into: &fresh)
                return fresh
            }
            if out.isEmpty { out = bytes } else { out.append(contentsOf: bytes) }
            return
        }
        try encodeFresh(language: language, encoder: encoder, jobIDKey: jobIDKey, into: &out)
    }

    private func encodeFresh(language: String?, encoder: PayloadEncoder, jobIDKey: String?, into out: inout [UInt8]) throws(JobError) {
        let localized = language.flatMap { alert(for: $0) }
        if localized == nil && jobIDKey == nil {
            try Self.encode(payload, encoder, into: &out)
            return
        }
        var p = payload
        if let localized { p.aps.alert = localized }
        if let jobIDKey {
            precondition(jobIDKey != "aps", "jobIDKey must not be the reserved key aps")
            if let i = p.custom.firstIndex(where: { $0.key == jobIDKey }) {
                p.custom[i].value = .string(id)
            } else {
                p.custom.append(Payload.CustomKey(jobIDKey, .string(id)))
            }
        }
        try Self.encode(p, encoder, into: &out)
    }

    private static func encode(_ payload: Payload, _ encoder: PayloadEncoder, into out: inout [UInt8]) throws(JobError) {
        do throws(PayloadError) {
            try encoder.encode(payload, into: &out)
        } catch {
            switch error {
            case .tooLarge: throw JobError(.payloadTooLarge, error.description)
            case .priority10WithContentAvailableOnly: throw JobError(.contentAvailableOnlyWithPriority10, error.description)
            case .invalid: throw JobError(.invalidPayload, error.description)
            }
        }
    }
}
