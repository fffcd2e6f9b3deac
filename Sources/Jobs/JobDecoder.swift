import APNsProtocol

/// Decodes and validates job messages (`docs/design.md §3.1`, reasons §3.2): one pass of `JSONParser` over the message, then
/// typed reading of each key; no Foundation.
///
/// Rules, checked in this order (the first failure is reported):
/// - the message is JSON (`invalid-json`) and an object (`not-an-object`); a known top-level key given
///   twice is `invalid-json` (ambiguous). Unknown top-level keys are ignored (forward compatible:
///   producers may add keys before the pipeline knows them). `null` counts as absent.
/// - `id`: a string of 1…128 UTF-8 bytes (`missing-id`, `invalid-id`);
/// - `app`: a non-empty string (`missing-app`) of at most 255 UTF-8 bytes (`invalid-app`);
/// - `token`: hex digits, any case, an even count in 16…200 (8…100 bytes: Apple, "APNs device tokens are of
///   variable length. Do not hard-code their size"; 64 digits today), `invalid-token`, also when missing.
///   A binary app takes only 32-byte tokens: that is decided when the job reaches its app
///   (`token-size-needs-http2`, `PipelineConfiguration.App.checkCanSend(tokenOf:)`); or instead of a token
///   `channel`, a broadcast channel id (base64, `invalid-channel`); both is `token-and-channel`. A channel
///   job is a Live Activity (push type `liveactivity`, given or inferred; another is `invalid-push-type`);
///   it may state its channel's `storage_policy` (`"no-storage"` or `"most-recent"`, as `channel create`
///   prints it; another value, or on a job without `channel`, is `invalid-storage-policy`);
/// - `payload`: an object with an `aps` object whose Table 3-1/3-2 keys have their types
///   (`missing-payload`, `invalid-payload`);
/// - `alerts` (optional): an object of language (1…64 bytes) → alert string or alert dictionary
///   (`invalid-alerts`);
/// - `priority` (optional, default 10): the number 10, 5 or 1 (`invalid-priority`); the push type's
///   rules (`checkPushTypeRules`: a Live Activity's payload per event, `invalid-live-activity`; its
///   priority 10 or 5 to a device, 10, 5 or 1 as a broadcast; priority 1 never for a payload that shows
///   nothing);
/// - `expiry` (optional, default `now + defaultTimeToLive`): a whole number in 0…2³²−1
///   (`invalid-expiry`), 0 = do not store, otherwise not before `now` (`expired`). A broadcast's
///   `apns-expiration` is made from its own `expiry` (`Job.statedExpiry`) and its channel's policy, not
///   from the default (docs/design.md §5.5); with `storage_policy` `"no-storage"` a nonzero `expiry` is
///   `expiry-on-no-storage-channel`;
/// - `campaign` (optional): a string of 1…128 UTF-8 bytes (`invalid-campaign`);
/// - `collapse_id` (optional): a string of 1…64 UTF-8 bytes (`invalid-collapse-id`);
/// - `user` (optional): the producer's id of the recipient, a string of 1…128 UTF-8 bytes (`invalid-user`);
/// - `time_zone` (optional): the recipient's IANA time zone name, at most 64 UTF-8 bytes, that
///   ``knownTimeZone(_:)`` knows (`invalid-time-zone`);
/// - `transactional` (optional, default false): a JSON boolean (`invalid-transactional`);
/// - `push_type` (optional): one of Apple's `apns-push-type` values (`invalid-push-type`); `background`
///   makes the default priority 5, and must come with priority 5 and an `aps` holding only
///   `content-available` (`invalid-push-type`);
/// - priority 10 with an `aps` holding only `content-available` (`priority-10-content-available-only`;
///   the default priority is 10, so such a job must say `"priority": 5`);
/// - the compact payload, and the payload with each `alerts` variant in place of its alert, fit
///   `payloadLimit` (`payload-too-large`);
/// - with `apps` given (as `run` and `send` do), `app` is one of them (`no-certificate-for-app`).
///
/// Every string field has a byte limit (`docs/design.md §3.2`). Through `decode(_:now:templates:)` (the
/// path `run` and `send` take) a string key's value is measured in the message before it is copied:
/// one far over its limit is refused without being built (a 400 kB `app` became key names,
/// cache entries and metric labels), and the values of unknown keys are checked as JSON but never built.
public struct JobDecoder: Sendable {
    /// Checked on the compact encoding of the payload (2048 for the binary interface, 4096 for HTTP/2).
    public var payloadLimit: Int = PayloadLimits.default.command2
    /// Expiry of a job that gives none: `now` plus this.
    public var defaultTimeToLive: UInt32 = 86_400

    /// The apps jobs may name (the pipeline file's); nil: any (a tool that only checks jobs).
    public var apps: KnownApps?

    public static let maxIDBytes = 128
    /// A bundle id is a reverse-DNS name: a DNS name is at most 255 bytes (RFC 1035 §2.3.4), and no
    /// app id is near that. Far above any real one, far below what hurts a key name or a label.
    public static let maxAppBytes = 255
    public static let maxCampaignBytes = 128
    /// Apple: "The value of this key must not exceed 64 bytes."
    public static let maxCollapseIDBytes = 64
    /// A language tag (`alerts` keys; registrations use the same limit): BCP 47 tags in use are far shorter.
    public static let maxLanguageBytes = 64
    /// `push_type` must be one of Apple's names (the longest has 12 bytes): anything longer is refused
    /// unread.
    public static let maxPushTypeBytes = 32
    /// `token`: at most 200 hex digits (`DeviceToken.maxHexCount`, 100 bytes), usually 64.
    public static let maxTokenBytes = DeviceToken.maxHexCount
    /// What a `token` must be, for the refusals that name it.
    static let tokenRule =
        "hex digits (an even count, \(DeviceToken.minHexCount)…\(DeviceToken.maxHexCount); 64 for a 32-byte token)"
    /// `channel`: a base64 channel id (``APNsChannelManagement/maxChannelIDLength``).
    public static let maxChannelBytes = APNsChannelManagement.maxChannelIDLength
    /// `storage_policy`: one of two short names; anything longer is refused unread.
    public static let maxStoragePolicyBytes = 32
    /// `user`: the producer's id of the recipient (as `id`, an opaque key).
    public static let maxUserBytes = 128
    /// `time_zone`: an IANA name (the longest in use has 32 bytes).
    public static let maxTimeZoneBytes = 64

    public init(payloadLimit: Int = PayloadLimits.default.command2, defaultTimeToLive: UInt32 = 86_400, apps: KnownApps? = nil) {
        self.payloadLimit = payloadLimit
        self.defaultTimeToLive = defaultTimeToLive
        self.apps = apps
    }

    /// A job's known top-level keys. A message's key is matched against the names once; what follows for
    /// it dispatches on this.
    enum Key: UInt8 {
        case id, app, token, payload, alerts, expiry, priority, campaign, collapseID, pushType, channel, storagePolicy
        case user, timeZone, transactional

        /// The key as a message spells it.
        var name: String {
            switch self {
            case .id: "id"
            case .app: "app"
            case .token: "token"
            case .payload: "payload"
            case .alerts: "alerts"
            case .expiry: "expiry"
            case .priority: "priority"
            case .campaign: "campaign"
            case .collapseID: "collapse_id"
            case .pushType: "push_type"
            case .channel: "channel"
            case .storagePolicy: "storage_policy"
            case .user: "user"
            case .timeZone: "time_zone"
            case .transactional: "transactional"
            }
        }

        init?(_ name: String) {
            var name = name
            guard let key = name.withUTF8({ Key(bytes: UnsafeRawBufferPointer($0)) }) else { return nil }
            self = key
        }

        /// The key whose name is `bytes` (UTF-8), from the bytes: by length first, then at most two
        /// comparisons (a switch over all the names compared a key with each name before its own), and
        /// no String made for the key.
        init?(bytes: UnsafeRawBufferPointer) {
            func named(_ text: StaticString) -> Bool {
                text.utf8CodeUnitCount == bytes.count && memcmp(text.utf8Start, bytes.baseAddress!, bytes.count) == 0
            }
            let key: Key? =
                switch bytes.count {
                case 2: named("id") ? .id : nil
                case 3: named("app") ? .app : nil
                case 4: named("user") ? .user : nil
                case 5: named("token") ? .token : nil
                case 6: named("alerts") ? .alerts : named("expiry") ? .expiry : nil
                case 7: named("payload") ? .payload : named("channel") ? .channel : nil
                case 8: named("campaign") ? .campaign : named("priority") ? .priority : nil
                case 9: named("push_type") ? .pushType : named("time_zone") ? .timeZone : nil
                case 11: named("collapse_id") ? .collapseID : nil
                case 13: named("transactional") ? .transactional : nil
                case 14: named("storage_policy") ? .storagePolicy : nil
                default: nil
                }
            guard let key else { return nil }
            self = key
        }

        /// Whether `decode(_:now:templates:)` reads the value from its bytes: all but the two numbers
        /// and the boolean.
        var isRaw: Bool {
            switch self {
            case .expiry, .priority, .transactional: false
            default: true
            }
        }

        /// The byte limit of a string key read from its bytes, nil for the others.
        var stringLimit: Int? {
            switch self {
            case .id: maxIDBytes
            case .app: maxAppBytes
            case .token: maxTokenBytes
            case .campaign: maxCampaignBytes
            case .collapseID: maxCollapseIDBytes
            case .pushType: maxPushTypeBytes
            case .channel: maxChannelBytes
            case .storagePolicy: maxStoragePolicyBytes
            case .user: maxUserBytes
            case .timeZone: maxTimeZoneBytes
            case .payload, .alerts, .expiry, .priority, .transactional: nil
            }
        }
    }

    /// Decodes and validates one job message; `now` is epoch seconds.
    public func decode(_ bytes: UnsafeRawBufferPointer, now: UInt32) throws(JobError) -> Job {
        try decode(json: try Self.parse(bytes), now: now)
    }

    public func decode(_ bytes: [UInt8], now: UInt32) throws(JobError) -> Job {
        try bytes.withUnsafeBytes { raw in Result { () throws(JobError) in try decode(raw, now: now) } }.get()
    }

    /// As `decode(_:now:)`, sharing what repeats between jobs through `templates`: a payload and alerts
    /// seen before (by their bytes) are not read, validated or size-checked again, and the job keeps a
    /// reference to them so its payload is encoded once per variant (`Job.encodedPayload`); app names
    /// are one String each; the token is read from the message's bytes. The result, and every error, is
    /// the one `decode(_:now:)` gives for the same bytes.
    public func decode(_ bytes: UnsafeRawBufferPointer, now: UInt32, templates: JobTemplates) throws(JobError) -> Job {
        let parsed: [(key: UInt8, value: JSONParser.Member)]?
        do throws(JSONParser.Error) {
            // A payload or alerts seen before: compared, not checked again.
            let known = { (key: UInt8, rest: UnsafeRawBufferPointer) -> Int? in
                switch Key(rawValue: key) {
                case .payload: templates.knownPayload(at: rest)
                case .alerts: templates.knownAlerts(at: rest)
                default: nil
                }
            }
            parsed = try JSONParser.parseObject(
                bytes, key: { Key(bytes: $0)?.rawValue }, keepingRaw: { Key(rawValue: $0)?.isRaw ?? true }, knownValue: known)
        } catch {
            throw JobError(.invalidJSON, error.description)
        }
        // Not an object: the general path says what it is.
        guard let parsed else { return try decode(bytes, now: now) }
        func slice(_ r: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[r]) }
        var f = Fields()
        var rawPayload: Range<Int>?
        var rawAlerts: Range<Int>?
        // Unknown keys were checked as JSON by the parser, and left out.
        for (code, member) in parsed {
            guard let key = Key(rawValue: code) else { continue }
            let name = key.name
            let value: JSONValue
            switch member {
            case .value(let v): value = v
            case .raw(let r):
                // Known keys given twice are refused before anything is read.
                let seen =
                    switch key {
                    case .payload: rawPayload != nil
                    case .alerts: rawAlerts != nil
                    default: f.has(key)
                    }
                if seen { throw JobError(.invalidJSON, "the key \"\(name)\" appears more than once") }
                switch key {
                case .payload:
                    rawPayload = r
                    continue
                case .alerts:
                    rawAlerts = r
                    continue
                default: break
                }
                guard let limit = key.stringLimit else { continue }
                let raw = slice(r)
                if try takeString(key, name: name, raw: raw, limit: limit, into: &f, templates: templates) { continue }
                value = Self.materialize(raw)
            }
            try f.take(key, value, name)
        }
        takePayload(rawPayload, alerts: rawAlerts, of: bytes, into: &f, templates: templates)
        return try validate(f, now: now)
    }

    /// A known key's string member, from its raw bytes (quotes and all): read in place when it holds no
    /// escape, and refused past `limit` without being built. False: a value to build from the bytes.
    private func takeString(
        _ key: Key, name: String, raw: UnsafeRawBufferPointer, limit: Int, into f: inout Fields, templates: JobTemplates
    ) throws(JobError) -> Bool {
        guard raw.count >= 2, raw[0] == UInt8(ascii: "\"") else { return false }
        let inner = UnsafeRawBufferPointer(rebasing: raw[1..<(raw.count - 1)])
        let plain = !inner.contains(UInt8(ascii: "\\"))
        // Unescaped, the bytes are the string; with escapes its size is counted from them.
        // Past the limit: refused without building it.
        if inner.count > limit, case let n = plain ? inner.count : Self.unescapedCount(inner), n > limit {
            try f.take(key, .string(""), name)  // present; the validation reports its size
            f.oversized.append((key, n))
            return true
        }
        guard plain else { return false }
        switch key {
        case .token:
            f.token = .string("")  // marks it present; the token itself is read from the bytes
            f.tokenBytes = inner
        case .app:
            if let apps {
                if let known = apps.find(inner) {
                    f.app = .string(known)
                    f.appIsKnown = true
                } else {
                    f.app = .string(String(decoding: inner.assumingMemoryBound(to: UInt8.self), as: UTF8.self))
                }
            } else {
                f.app = .string(inner.isEmpty ? "" : templates.app(inner))
            }
        default:
            try f.take(key, .string(String(decoding: inner.assumingMemoryBound(to: UInt8.self), as: UTF8.self)), name)
        }
        return true
    }

    /// The payload and alerts: through a template when the payload is an object (null, or another
    /// kind, is refused or reported by the general rules of the validation).
    private func takePayload(
        _ rawPayload: Range<Int>?, alerts rawAlerts: Range<Int>?, of bytes: UnsafeRawBufferPointer, into f: inout Fields,
        templates: JobTemplates
    ) {
        func slice(_ r: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[r]) }
        guard let p = rawPayload, bytes[p.lowerBound] == UInt8(ascii: "{"), p.count <= JobTemplates.maxBytes,
            (rawAlerts?.count ?? 0) <= JobTemplates.maxBytes
        else {
            if let p = rawPayload { f.payload = Self.materialize(slice(p)) }
            if let a = rawAlerts { f.alerts = Self.materialize(slice(a)) }
            return
        }
        let alertsSlice = rawAlerts.flatMap { a in bytes[a.lowerBound] == UInt8(ascii: "n") ? nil : slice(a) }
        if let known = templates.find(payload: slice(p), alerts: alertsSlice, payloadLimit: payloadLimit) {
            f.template = known
        } else {
            let t = makeTemplate(payload: slice(p), alerts: alertsSlice)
            templates.remember(t)
            f.template = t
        }
        f.payload = .object([])  // present; read from the template
        if rawAlerts != nil { f.alerts = .null }
    }

    /// The UTF-8 bytes of the string whose JSON contents (between the quotes, escapes and all) are
    /// `inner`, counted without building it. `inner` was checked by the parser: escapes are whole,
    /// surrogates paired.
    static func unescapedCount(_ inner: UnsafeRawBufferPointer) -> Int {
        func hex(_ at: Int) -> UInt32 {
            var v: UInt32 = 0
            for k in at..<(at + 4) {
                let c = UInt32(inner[k])
                v = v << 4 | (c <= 57 ? c - 48 : (c | 0x20) - 87)
            }
            return v
        }
        var n = 0
        var i = 0
        while i < inner.count {
            guard inner[i] == UInt8(ascii: "\\") else {
                n += 1
                i += 1
                continue
            }
            guard inner[i + 1] == UInt8(ascii: "u") else {
                n += 1
                i += 2
                continue
            }
            let v = hex(i + 2)
            if (0xD800...0xDBFF).contains(v) {
                n += 4  // with its low surrogate: one scalar beyond the BMP
                i += 12
            } else {
                n += v < 0x80 ? 1 : v < 0x800 ? 2 : 3
                i += 6
            }
        }
        return n
    }

    /// A value the parser already checked, built.
    static func materialize(_ raw: UnsafeRawBufferPointer) -> JSONValue {
        do throws(JSONParser.Error) {
            return try JSONParser.parse(raw)
        } catch {
            preconditionFailure("a value JSONParser checked does not parse: \(error)")
        }
    }

    /// Reads a payload and its alerts as `validate` does, keeping each result (or error).
    private func makeTemplate(payload: UnsafeRawBufferPointer, alerts: UnsafeRawBufferPointer?) -> JobTemplate {
        let typed = Result { () throws(JobError) in try Self.readPayload(Self.materialize(payload)) }
        let localized = Result { () throws(JobError) -> [String: Alert] in
            guard let alerts else { return [:] }
            return try Self.readAlerts(Self.materialize(alerts))
        }
        var sizeError: JobError?
        if case .success(let p) = typed, case .success(let a) = localized {
            do throws(JobError) { try checkSize(p, a) } catch { sizeError = error }
        }
        return JobTemplate(
            payloadBytes: Array(payload), alertsBytes: alerts.map { Array($0) }, payload: typed, alerts: localized,
            sizeError: sizeError, payloadLimit: payloadLimit)
    }

    /// The known keys of a job as found in its message.
    struct Fields {
        var id: JSONValue?
        var app: JSONValue?
        var token: JSONValue?
        /// The token's hex, when read from the message's bytes (then `token` only marks it present).
        var tokenBytes: UnsafeRawBufferPointer?
        var payload: JSONValue?
        var alerts: JSONValue?
        var expiry: JSONValue?
        var priority: JSONValue?
        var campaign: JSONValue?
        var collapseID: JSONValue?
        var pushType: JSONValue?
        /// A broadcast's channel id (instead of `token`).
        var channel: JSONValue?
        /// A broadcast's channel's storage policy, as the job states it.
        var storagePolicy: JSONValue?
        /// The recipient (audience rules): the producer's user id, the IANA time zone, and whether the job
        /// is exempt from caps and quiet hours.
        var user: JSONValue?
        var timeZone: JSONValue?
        var transactional: JSONValue?
        /// Payload and alerts already read (then `payload` only marks the payload present).
        var template: JobTemplate?
        /// String keys whose value was too long to build, with its size in the message (the key itself
        /// holds an empty string, marking it present).
        var oversized: [(key: Key, bytes: Int)] = []
        /// `app` was found among the decoder's `apps` while reading it.
        var appIsKnown = false

        /// The size in the message of `key`'s value, when it was too long to build.
        func oversize(_ key: Key) -> Int? {
            if oversized.isEmpty { return nil }
            return oversized.first { $0.key == key }?.bytes
        }

        /// Whether a known key was given (the raw path tracks `payload`/`alerts` by their byte ranges).
        func has(_ key: Key) -> Bool {
            switch key {
            case .id: id != nil
            case .app: app != nil
            case .token: token != nil
            case .expiry: expiry != nil
            case .priority: priority != nil
            case .campaign: campaign != nil
            case .collapseID: collapseID != nil
            case .pushType: pushType != nil
            case .channel: channel != nil
            case .storagePolicy: storagePolicy != nil
            case .user: user != nil
            case .timeZone: timeZone != nil
            case .transactional: transactional != nil
            case .payload: payload != nil
            case .alerts: alerts != nil
            }
        }

        /// `name`: the key as the message spells it, for the error.
        mutating func take(_ key: Key, _ value: JSONValue, _ name: String) throws(JobError) {
            switch key {
            case .id: try JobDecoder.take(&id, value, name)
            case .app: try JobDecoder.take(&app, value, name)
            case .token: try JobDecoder.take(&token, value, name)
            case .payload: try JobDecoder.take(&payload, value, name)
            case .alerts: try JobDecoder.take(&alerts, value, name)
            case .expiry: try JobDecoder.take(&expiry, value, name)
            case .priority: try JobDecoder.take(&priority, value, name)
            case .campaign: try JobDecoder.take(&campaign, value, name)
            case .collapseID: try JobDecoder.take(&collapseID, value, name)
            case .pushType: try JobDecoder.take(&pushType, value, name)
            case .channel: try JobDecoder.take(&channel, value, name)
            case .storagePolicy: try JobDecoder.take(&storagePolicy, value, name)
            case .user: try JobDecoder.take(&user, value, name)
            case .timeZone: try JobDecoder.take(&timeZone, value, name)
            case .transactional: try JobDecoder.take(&transactional, value, name)
            }
        }
    }

    /// Validates a job already parsed (e.g. by a tool that reads NDJSON).
    public func decode(json: JSONValue, now: UInt32) throws(JobError) -> Job {
        guard case .object(let members) = json else {
            throw JobError(.notAnObject, "a job is a JSON object, got \(Self.kind(json))")
        }
        var f = Fields()
        for (name, value) in members {
            // Unknown keys: ignored (forward compatible).
            if let key = Key(name) { try f.take(key, value, name) }
        }
        return try validate(f, now: now)
    }

    /// The job the fields make, checked in a fixed order (the first fault found is the one reported):
    /// each field on its own, then the fields against each other, the size, and last the app against
    /// the pipeline file.
    private func validate(_ f: Fields, now: UInt32) throws(JobError) -> Job {
        let jobID = try Self.readID(f)
        let appName = try Self.readApp(f)
        // recipient: a broadcast channel instead of a token (exactly one of the two)
        let broadcastChannel = try Self.readChannel(f)
        let deviceToken = broadcastChannel == nil ? try Self.readToken(f) : Job.channelPlaceholderToken
        let (typedPayload, localized) = try Self.readPayloadAndAlerts(f)
        // push type before priority: a background push defaults to priority 5
        let jobPushType = try Self.readPushType(f, broadcast: broadcastChannel != nil)
        let jobPriority = try Self.readPriority(f, pushType: jobPushType)
        let expiryIsStated = f.expiry.flatMap(Self.nonNull) != nil
        let jobExpiry = try readExpiry(f, now: now)
        // a broadcast's channel's storage policy, and its expiry against it
        let storagePolicy = try Self.readStoragePolicy(f, broadcast: broadcastChannel != nil)
        if storagePolicy == .noStorage, expiryIsStated,
            case .failure(let refusal) = APNsBroadcastExpiration.expiration(requested: jobExpiry, policy: storagePolicy, now: now)
        {
            throw JobError(.expiryOnNoStorageChannel, refusal.description)
        }
        let campaignName = try Self.readCampaign(f)
        let jobCollapseID = try Self.readCollapseID(f)
        // the recipient, for the audience rules
        let jobUser = try Self.readUser(f.user, oversize: f.oversize(.user))
        let jobTimeZone = try Self.readTimeZone(f.timeZone, oversize: f.oversize(.timeZone))
        let isTransactional = try Self.readTransactional(f.transactional)
        try Self.checkCombination(
            typedPayload, pushType: jobPushType, priority: jobPriority, priorityIsStated: f.priority.flatMap(Self.nonNull) != nil,
            broadcast: broadcastChannel != nil)
        // size
        if let template = f.template {
            if let error = template.sizeError { throw error }
        } else {
            try checkSize(typedPayload, localized)
        }
        // app against the pipeline file: last, so a job with another fault reports that one (the job is
        // otherwise valid: it names an app this pipeline has no certificate for).
        if let apps, !f.appIsKnown, !apps.contains(appName) {
            var refusal = JobError(.noCertificateForApp, "no app entry in the pipeline file has the bundle id \"\(appName)\"")
            refusal.jobID = jobID
            refusal.campaign = campaignName
            throw refusal
        }
        return Job(
            id: jobID, app: appName, recipient: broadcastChannel.map(Recipient.channel) ?? .device(deviceToken), payload: typedPayload,
            alerts: localized, template: f.template, expiry: jobExpiry, expiryIsStated: expiryIsStated, storagePolicy: storagePolicy,
            priority: jobPriority, campaign: campaignName, collapseID: jobCollapseID, pushType: jobPushType, user: jobUser,
            timeZone: jobTimeZone, isTransactional: isTransactional)
    }

    private static func readID(_ f: Fields) throws(JobError) -> String {
        if let n = f.oversize(.id) {
            throw JobError(.invalidID, "id must be 1…\(Self.maxIDBytes) UTF-8 bytes, got \(n)")
        }
        guard let idValue = f.id.flatMap(Self.nonNull) else { throw JobError(.missingID, "the job has no id") }
        guard case .string(let jobID) = idValue else {
            throw JobError(.invalidID, "id must be a string, got \(Self.kind(idValue))")
        }
        let idBytes = jobID.utf8.count
        guard idBytes >= 1, idBytes <= Self.maxIDBytes else {
            throw JobError(.invalidID, "id must be 1…\(Self.maxIDBytes) UTF-8 bytes, got \(idBytes)")
        }
        return jobID
    }

    private static func readApp(_ f: Fields) throws(JobError) -> String {
        if let n = f.oversize(.app) {
            throw JobError(.invalidApp, "app must be at most \(Self.maxAppBytes) UTF-8 bytes (a bundle id), got \(n)")
        }
        guard let appValue = f.app.flatMap(Self.nonNull) else { throw JobError(.missingApp, "the job has no app") }
        guard case .string(let appName) = appValue, !appName.isEmpty else {
            throw JobError(.missingApp, "app must be a non-empty string (the bundle id), got \(Self.kind(appValue))")
        }
        let appBytes = appName.utf8.count
        guard appBytes <= Self.maxAppBytes else {
            throw JobError(.invalidApp, "app must be at most \(Self.maxAppBytes) UTF-8 bytes (a bundle id), got \(appBytes)")
        }
        return appName
    }

    /// A device job's token (a broadcast has a channel instead).
    private static func readToken(_ f: Fields) throws(JobError) -> DeviceToken {
        if let n = f.oversize(.token) {
            throw JobError(.invalidToken, "token: \(DeviceToken.ParseError.wrongHexLength(n).description)")
        }
        guard let tokenValue = f.token.flatMap(Self.nonNull) else {
            throw JobError(.invalidToken, "the job has no token (nor a broadcast channel)")
        }
        guard case .string(let tokenHex) = tokenValue else {
            throw JobError(.invalidToken, "token must be a string of \(Self.tokenRule), got \(Self.kind(tokenValue))")
        }
        do throws(DeviceToken.ParseError) {
            if let hex = f.tokenBytes { return try DeviceToken(hexBytes: hex) }
            return try DeviceToken(hex: tokenHex)
        } catch {
            throw JobError(.invalidToken, "token: \(error.description)")
        }
    }

    /// The payload and its localized alerts: the template's, or the job's own.
    private static func readPayloadAndAlerts(_ f: Fields) throws(JobError) -> (Payload, [String: Alert]) {
        if let template = f.template { return (try template.payload.get(), try template.alerts.get()) }
        let payload = try Self.readPayload(f.payload)
        guard let alertsValue = f.alerts.flatMap(Self.nonNull) else { return (payload, [:]) }
        return (payload, try Self.readAlerts(alertsValue))
    }

    private static func readPushType(_ f: Fields, broadcast: Bool) throws(JobError) -> APNsPushType? {
        var jobPushType: APNsPushType?
        if f.oversize(.pushType) != nil {
            // As `text` renders a string this long: by its kind.
            throw JobError(
                .invalidPushType,
                "push_type must be one of \(APNsPushType.allCases.map(\.rawValue).joined(separator: ", ")), got \(Self.kind(.string("")))")
        }
        if let pushTypeValue = f.pushType.flatMap(Self.nonNull) {
            guard case .string(let name) = pushTypeValue, let known = APNsPushType(rawValue: name) else {
                throw JobError(
                    .invalidPushType,
                    "push_type must be one of \(APNsPushType.allCases.map(\.rawValue).joined(separator: ", ")), got \(Self.text(pushTypeValue))"
                )
            }
            jobPushType = known
        }
        guard broadcast else { return jobPushType }
        // A broadcast carries a Live Activity and nothing else (Apple: "devices can subscribe on
        // channels to receive updates for Live Activities"); absent, the push type is that one.
        if let jobPushType, jobPushType != APNsBroadcast.pushType {
            throw JobError(
                .invalidPushType, "a broadcast (channel) job must have push_type \"liveactivity\", got \"\(jobPushType.rawValue)\"")
        }
        return APNsBroadcast.pushType
    }

    private static func readPriority(_ f: Fields, pushType: APNsPushType?) throws(JobError) -> Priority {
        guard let priorityValue = f.priority.flatMap(Self.nonNull) else {
            return pushType == .background ? .conservePower : .immediate
        }
        switch priorityValue {
        case .number("10"): return .immediate
        case .number("5"): return .conservePower
        case .number("1"): return .powerFirst
        default: throw JobError(.invalidPriority, "priority must be the number 10, 5 or 1, got \(Self.text(priorityValue))")
        }
    }

    /// The stated expiry (0: do not store), or now + the default time to live.
    private func readExpiry(_ f: Fields, now: UInt32) throws(JobError) -> UInt32 {
        guard let expiryValue = f.expiry.flatMap(Self.nonNull) else {
            let (sum, overflow) = now.addingReportingOverflow(defaultTimeToLive)
            return overflow ? UInt32.max : sum
        }
        guard case .number(let literal) = expiryValue, let seconds = UInt32(literal) else {
            throw JobError(
                .invalidExpiry,
                "expiry must be a whole number of epoch seconds in 0…\(UInt32.max) (0 = do not store), got \(Self.text(expiryValue))")
        }
        if seconds != 0 && seconds < now {
            throw JobError(.expired, "expiry \(seconds) is \(now - seconds) s in the past (now \(now))")
        }
        return seconds
    }

    private static func readCampaign(_ f: Fields) throws(JobError) -> String? {
        try readBoundedString(f.campaign, oversize: f.oversize(.campaign), named: "campaign", max: maxCampaignBytes, .invalidCampaign)
    }

    private static func readCollapseID(_ f: Fields) throws(JobError) -> String? {
        try readBoundedString(
            f.collapseID, oversize: f.oversize(.collapseID), named: "collapse_id", max: maxCollapseIDBytes, .invalidCollapseID)
    }

    /// `user` (a job's or a registration's): nil when absent or null. `oversize`: the bytes of a value the
    /// scanner found too long to keep.
    static func readUser(_ value: JSONValue?, oversize: Int?) throws(JobError) -> String? {
        // Made once: an interpolated text built per job was ~1 % of a binary `run` (`perf`).
        let expected = userExpected
        if let n = oversize { throw JobError(.invalidUser, "user must be \(expected), got \(n)") }
        guard let value = value.flatMap(Self.nonNull) else { return nil }
        guard case .string(let id) = value else { throw JobError(.invalidUser, "user must be \(expected), got \(Self.kind(value))") }
        let n = id.utf8.count
        guard n >= 1, n <= maxUserBytes else { throw JobError(.invalidUser, "user must be \(expected), got \(n)") }
        return id
    }

    private static let userExpected = "the recipient's user id, a string of 1…\(maxUserBytes) UTF-8 bytes"

    /// `time_zone` (a job's or a registration's): an IANA name ``knownTimeZone(_:)`` knows, nil when absent
    /// or null. `oversize`: as ``readBoundedString``.
    static func readTimeZone(_ value: JSONValue?, oversize: Int?) throws(JobError) -> String? {
        let expected = "an IANA time zone name (e.g. \"Europe/Paris\")"
        if let n = oversize {
            throw JobError(.invalidTimeZone, "time_zone must be \(expected) of at most \(maxTimeZoneBytes) UTF-8 bytes, got \(n)")
        }
        guard let value = value.flatMap(Self.nonNull) else { return nil }
        guard case .string(let name) = value else {
            throw JobError(.invalidTimeZone, "time_zone must be a string, \(expected), got \(Self.kind(value))")
        }
        let n = name.utf8.count
        guard n <= maxTimeZoneBytes else {
            throw JobError(.invalidTimeZone, "time_zone must be \(expected) of at most \(maxTimeZoneBytes) UTF-8 bytes, got \(n)")
        }
        guard knownTimeZone(name) else { throw JobError(.invalidTimeZone, "time_zone \"\(name)\" is not \(expected)") }
        return name
    }

    /// `transactional`: false when absent or null.
    private static func readTransactional(_ value: JSONValue?) throws(JobError) -> Bool {
        guard let value = value.flatMap(Self.nonNull) else { return false }
        guard case .bool(let flag) = value else {
            throw JobError(.invalidTransactional, "transactional must be true or false (a JSON boolean), got \(Self.text(value))")
        }
        return flag
    }

    /// An optional string of 1…`max` UTF-8 bytes (nil when absent or null); `oversize`: the bytes of a value
    /// the scanner found too long to keep.
    private static func readBoundedString(
        _ value: JSONValue?, oversize: Int?, named key: String, max: Int, _ reason: JobErrorReason
    ) throws(JobError) -> String? {
        if let n = oversize { throw JobError(reason, "\(key) must be 1…\(max) UTF-8 bytes, got \(n)") }
        guard let value = value.flatMap(Self.nonNull) else { return nil }
        guard case .string(let text) = value else { throw JobError(reason, "\(key) must be a string, got \(Self.kind(value))") }
        let n = text.utf8.count
        guard n >= 1, n <= max else { throw JobError(reason, "\(key) must be 1…\(max) UTF-8 bytes, got \(n)") }
        return text
    }

    /// The push type against the priority and the payload (Apple refuses a background push otherwise),
    /// what the push type asks of them (Live Activities, ranges, priority 1), and the priority against
    /// the payload.
    private static func checkCombination(
        _ payload: Payload, pushType: APNsPushType?, priority: Priority, priorityIsStated: Bool, broadcast: Bool
    ) throws(JobError) {
        if pushType == .background {
            if priority != .conservePower {
                throw JobError(.invalidPushType, "a background push (push_type \"background\") must have priority 5")
            }
            if !payload.isContentAvailableOnly {
                throw JobError(
                    .invalidPushType, "a background push (push_type \"background\") must have an aps holding only content-available")
            }
        }
        try Self.checkPushTypeRules(payload, pushType: pushType, priority: priority, broadcast: broadcast)
        if priority == .immediate && payload.isContentAvailableOnly {
            throw JobError(
                .contentAvailableOnlyWithPriority10,
                "priority 10\(priorityIsStated ? "" : " (the default)") is invalid for a payload whose aps holds only content-available: send it with \"priority\": 5"
            )
        }
    }

    /// A broadcast's `storage_policy`, nil when the job gives none. Only a broadcast may give one: on a
    /// device job it means the producer mixed the two up, so it is refused rather than ignored.
    private static func readStoragePolicy(_ f: Fields, broadcast: Bool) throws(JobError) -> APNsChannelStoragePolicy? {
        guard let value = f.storagePolicy.flatMap(Self.nonNull) else { return nil }
        guard broadcast else {
            throw JobError(
                .invalidStoragePolicy, "storage_policy is a broadcast channel's storage policy: give it with channel, not with token")
        }
        let names = APNsChannelStoragePolicy.allCases.map { "\"\($0.name)\"" }.joined(separator: " or ")
        // Past its limit the value was not built: described by its kind, as `text` describes a string that long.
        let got = f.oversize(.storagePolicy) != nil ? Self.kind(.string("")) : Self.text(value)
        guard f.oversize(.storagePolicy) == nil, case .string(let name) = value, let policy = APNsChannelStoragePolicy(name: name) else {
            throw JobError(
                .invalidStoragePolicy, "storage_policy must be \(names) (as `apns-pipeline channel create` prints it), got \(got)")
        }
        return policy
    }

    /// The job's broadcast channel, nil when it has none (then it must have a token). Both a token and a
    /// channel is `token-and-channel`: which one was meant cannot be guessed, and sending to either could
    /// reach the wrong audience.
    private static func readChannel(_ f: Fields) throws(JobError) -> BroadcastChannelID? {
        let oversize = f.oversize(.channel)
        guard oversize != nil || f.channel.flatMap(Self.nonNull) != nil else { return nil }
        if f.token.flatMap(Self.nonNull) != nil {
            throw JobError(
                .tokenAndChannel, "the job has both a token and a channel: give one (token for a device, channel for a broadcast)")
        }
        if let n = oversize {
            throw JobError(.invalidChannel, "channel must be a base64 channel id of at most \(maxChannelBytes) characters, got \(n) bytes")
        }
        guard case .string(let text) = f.channel.flatMap(Self.nonNull) else {
            throw JobError(
                .invalidChannel, "channel must be a string (a base64 channel id), got \(Self.kind(f.channel.flatMap(Self.nonNull)!))")
        }
        if text.utf8.count > maxChannelBytes {
            throw JobError(
                .invalidChannel,
                "channel must be a base64 channel id of at most \(maxChannelBytes) characters, got \(text.utf8.count) bytes")
        }
        guard let channel = BroadcastChannelID(text) else {
            throw JobError(
                .invalidChannel,
                "channel must be a base64 channel id (as `apns-pipeline channel create` prints) of 1…\(maxChannelBytes) characters; got \(text.utf8.count) bytes that are not"
            )
        }
        return channel
    }

    private static func readPayload(_ payload: JSONValue?) throws(JobError) -> Payload {
        guard let payloadValue = payload.flatMap(Self.nonNull) else {
            throw JobError(.missingPayload, "the job has no payload")
        }
        guard case .object(let payloadMembers) = payloadValue else {
            throw JobError(.invalidPayload, "payload must be a JSON object, got \(Self.kind(payloadValue))")
        }
        guard payloadMembers.contains(where: { $0.key == "aps" }) else {
            throw JobError(.invalidPayload, "payload has no aps dictionary")
        }
        do throws(PayloadError) {
            return try Payload(json: payloadValue)
        } catch {
            throw JobError(.invalidPayload, Self.describe(error, prefix: "payload."))
        }
    }

    /// The compact payload and its largest alerts variant must fit the limit. Sizes are counted, not
    /// written: the payload with another alert differs only by the alert's own bytes.
    private func checkSize(_ payload: Payload, _ alerts: [String: Alert]) throws(JobError) {
        let size = PayloadSize.of(payload)
        if size > payloadLimit {
            throw JobError(.payloadTooLarge, "payload is \(size) bytes compact, over the limit of \(payloadLimit)")
        }
        guard !alerts.isEmpty else { return }
        var largest: (language: String, alert: Alert, size: Int)?
        for (language, alert) in alerts {
            let n = PayloadSize.of(alert)
            if largest == nil || n > largest!.size || (n == largest!.size && language < largest!.language) {
                largest = (language, alert, n)
            }
        }
        let variant = largest!
        let variantSize: Int
        if let own = payload.aps.alert {
            variantSize = size - PayloadSize.of(own) + variant.size
        } else {
            var p = payload
            p.aps.alert = variant.alert
            variantSize = PayloadSize.of(p)
        }
        if variantSize > payloadLimit {
            throw JobError(
                .payloadTooLarge,
                "payload with the alerts[\"\(variant.language)\"] alert is \(variantSize) bytes compact, over the limit of \(payloadLimit)")
        }
    }

    private static func readAlerts(_ value: JSONValue) throws(JobError) -> [String: Alert] {
        guard case .object(let members) = value else {
            throw JobError(.invalidAlerts, "alerts must be an object of language → alert, got \(kind(value))")
        }
        var alerts: [String: Alert] = [:]
        alerts.reserveCapacity(members.count)
        for (language, alertValue) in members {
            guard !language.isEmpty else { throw JobError(.invalidAlerts, "alerts has an empty language key") }
            guard language.utf8.count <= maxLanguageBytes else {
                throw JobError(.invalidAlerts, "alerts has a language key of \(language.utf8.count) bytes, over \(maxLanguageBytes)")
            }
            let alert: Alert
            switch alertValue {
            case .string(let s):
                alert = .text(s)
            case .object:
                // Read through Payload(json:) so alert dictionaries follow exactly the payload's rules.
                let wrapped: JSONValue = .object([(key: "aps", value: .object([(key: "alert", value: alertValue)]))])
                let read: Alert?
                do throws(PayloadError) {
                    read = try Payload(json: wrapped).aps.alert
                } catch {
                    throw JobError(.invalidAlerts, describe(error, prefix: "alerts[\"\(language)\"]", dropping: "aps.alert"))
                }
                guard let read else { throw JobError(.invalidAlerts, "alerts[\"\(language)\"] is not an alert") }
                alert = read
            default:
                throw JobError(
                    .invalidAlerts, "alerts[\"\(language)\"] must be a string or an alert dictionary, got \(kind(alertValue))")
            }
            guard alerts.updateValue(alert, forKey: language) == nil else {
                throw JobError(.invalidAlerts, "alerts has the language \"\(language)\" twice")
            }
        }
        return alerts
    }

    // MARK: Helpers

    static func parse(_ bytes: UnsafeRawBufferPointer) throws(JobError) -> JSONValue {
        do throws(JSONParser.Error) {
            return try JSONParser.parse(bytes)
        } catch {
            throw JobError(.invalidJSON, error.description)
        }
    }

    /// Records the value of a known key; a second occurrence is refused as ambiguous.
    static func take(_ slot: inout JSONValue?, _ value: JSONValue, _ key: String) throws(JobError) {
        guard slot == nil else { throw JobError(.invalidJSON, "the key \"\(key)\" appears more than once") }
        slot = value
    }

    static func nonNull(_ value: JSONValue) -> JSONValue? {
        if case .null = value { return nil }
        return value
    }

    static func kind(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// A short rendering of a scalar for error details (never the whole of a large value).
    static func text(_ value: JSONValue) -> String {
        switch value {
        case .number(let n): n.utf8.count <= 32 ? n : "a number"
        case .string(let s) where s.utf8.count <= 32: "the string \"\(s)\""
        default: kind(value)
        }
    }

    static func describe(_ error: PayloadError, prefix: String, dropping: String = "") -> String {
        switch error {
        case .invalid(var path, let expected):
            if !dropping.isEmpty, path.hasPrefix(dropping) { path.removeFirst(dropping.count) }
            return "\(prefix)\(path): expected \(expected)"
        default:
            return error.description
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#elseif canImport(Musl)
import Musl
#endif
