import APNsProtocol

/// A device (re-)registration (`docs/design.md §3.3`, topic `…registrations`): lifts a suppression older than
/// `registeredAt` and records the device's language and its recipient (user and time zone).
public struct RegistrationEvent: Sendable, Equatable {
    public var app: String
    public var token: DeviceToken
    /// Epoch seconds.
    public var registeredAt: UInt32
    /// The device's language (e.g. `fr`, `pt-BR`), nil when not given (absent, `null` or empty).
    public var language: String?
    /// The producer's id of the device's user (`user`, 1…128 UTF-8 bytes), nil when not given.
    public var user: String?
    /// The device's IANA time zone name (`time_zone`, ``JobDecoder/knownTimeZone(_:)``), nil when not given.
    public var timeZone: String?

    public init(
        app: String, token: DeviceToken, registeredAt: UInt32, language: String? = nil, user: String? = nil, timeZone: String? = nil
    ) {
        self.app = app
        self.token = token
        self.registeredAt = registeredAt
        self.language = language
        self.user = user
        self.timeZone = timeZone
    }
}

/// Decodes `{"app": "…", "token": "<hex>", "registered_at": <epoch s>, "language": "fr", "user": "u-81",
/// "time_zone": "Europe/Paris"}` (the token of any size a job may name, `JobDecoder.tokenRule`; `user` and
/// `time_zone` as a job's, `invalid-user` and `invalid-time-zone`).
/// Unknown keys are ignored, known keys given twice are `invalid-json`, and `null` is absent, like jobs.
///
/// Pure: the clock is passed in. `registered_at` may be at most `maxAhead` seconds after `now`
/// (`invalid-registered-at`): a registration from the future would lift every later suppression of its
/// token until then, so a bad clock or a hostile producer could make a token impossible to suppress.
/// With `apps` given, `app` must be one of them (`no-certificate-for-app`), checked last like jobs.
public enum RegistrationDecoder {
    public static let maxLanguageBytes = JobDecoder.maxLanguageBytes
    /// How far ahead of the clock `registered_at` may be: a day, far beyond any clock skew.
    public static let maxAhead: UInt32 = 86_400

    public static func decode(_ bytes: [UInt8], now: UInt32, apps: KnownApps? = nil) throws(JobError) -> RegistrationEvent {
        try bytes.withUnsafeBytes { raw in Result { () throws(JobError) in try decode(raw, now: now, apps: apps) } }.get()
    }

    public static func decode(_ bytes: UnsafeRawBufferPointer, now: UInt32, apps: KnownApps? = nil) throws(JobError) -> RegistrationEvent {
        let json = try JobDecoder.parse(bytes)
        guard case .object(let members) = json else {
            throw JobError(.notAnObject, "a registration is a JSON object, got \(JobDecoder.kind(json))")
        }
        var app: JSONValue?
        var token: JSONValue?
        var registeredAt: JSONValue?
        var language: JSONValue?
        var user: JSONValue?
        var timeZone: JSONValue?
        for (key, value) in members {
            switch key {
            case "app": try JobDecoder.take(&app, value, key)
            case "token": try JobDecoder.take(&token, value, key)
            case "registered_at": try JobDecoder.take(&registeredAt, value, key)
            case "language": try JobDecoder.take(&language, value, key)
            case "user": try JobDecoder.take(&user, value, key)
            case "time_zone": try JobDecoder.take(&timeZone, value, key)
            default: continue
            }
        }
        guard let appValue = app.flatMap(JobDecoder.nonNull) else {
            throw JobError(.missingApp, "the registration has no app")
        }
        guard case .string(let appName) = appValue, !appName.isEmpty else {
            throw JobError(.missingApp, "app must be a non-empty string (the bundle id), got \(JobDecoder.kind(appValue))")
        }
        guard appName.utf8.count <= JobDecoder.maxAppBytes else {
            throw JobError(
                .invalidApp, "app must be at most \(JobDecoder.maxAppBytes) UTF-8 bytes (a bundle id), got \(appName.utf8.count)")
        }
        guard let tokenValue = token.flatMap(JobDecoder.nonNull) else {
            throw JobError(.invalidToken, "the registration has no token")
        }
        guard case .string(let hex) = tokenValue else {
            throw JobError(.invalidToken, "token must be a string of \(JobDecoder.tokenRule), got \(JobDecoder.kind(tokenValue))")
        }
        let deviceToken: DeviceToken
        do throws(DeviceToken.ParseError) {
            deviceToken = try DeviceToken(hex: hex)
        } catch {
            throw JobError(.invalidToken, "token: \(error.description)")
        }
        guard let atValue = registeredAt.flatMap(JobDecoder.nonNull) else {
            throw JobError(.invalidRegisteredAt, "the registration has no registered_at")
        }
        guard case .number(let literal) = atValue, let at = UInt32(literal) else {
            throw JobError(
                .invalidRegisteredAt,
                "registered_at must be a whole number of epoch seconds in 0…\(UInt32.max), got \(JobDecoder.text(atValue))")
        }
        let (latest, overflow) = now.addingReportingOverflow(maxAhead)
        if !overflow, at > latest {
            throw JobError(
                .invalidRegisteredAt,
                "registered_at \(at) is \(at - now) s ahead of the clock (now \(now)); at most \(maxAhead) s is allowed")
        }
        var lang: String?
        if let languageValue = language.flatMap(JobDecoder.nonNull) {
            guard case .string(let s) = languageValue, s.utf8.count <= maxLanguageBytes else {
                throw JobError(
                    .invalidLanguage,
                    "language must be a string of at most \(maxLanguageBytes) bytes, got \(JobDecoder.text(languageValue))")
            }
            lang = s.isEmpty ? nil : s
        }
        let userID = try JobDecoder.readUser(user, oversize: nil)
        let zone = try JobDecoder.readTimeZone(timeZone, oversize: nil)
        if let apps, !apps.contains(appName) {
            throw JobError(.noCertificateForApp, "no app entry in the pipeline file has the bundle id \"\(appName)\"")
        }
        return RegistrationEvent(app: appName, token: deviceToken, registeredAt: at, language: lang, user: userID, timeZone: zone)
    }
}
