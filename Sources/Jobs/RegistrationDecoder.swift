import APNsProtocol

/// A device (re-)registration (`docs/design.md §3.3`, topic `…registrations`): lifts a suppression older than
/// `registeredAt` and records the device's language.
public struct RegistrationEvent: Sendable, Equatable {
    public var app: String
    public var token: DeviceToken
    /// Epoch seconds.
    public var registeredAt: UInt32
    /// The device's language (e.g. `fr`, `pt-BR`), nil when not given (absent, `null` or empty).
    public var language: String?

    public init(app: String, token: DeviceToken, registeredAt: UInt32, language: String? = nil) {
        self.app = app
        self.token = token
        self.registeredAt = registeredAt
        self.language = language
    }
}

/// Decodes `{"app": "…", "token": "<64 hex>", "registered_at": <epoch s>, "language": "fr"}`.
/// Unknown keys are ignored, known keys given twice are `invalid-json`, like jobs.
public enum RegistrationDecoder {
    public static let maxLanguageBytes = 64

    public static func decode(_ bytes: [UInt8]) throws(JobError) -> RegistrationEvent {
        try bytes.withUnsafeBytes { raw in Result { () throws(JobError) in try decode(raw) } }.get()
    }

    public static func decode(_ bytes: UnsafeRawBufferPointer) throws(JobError) -> RegistrationEvent {
        let json = try JobDecoder.parse(bytes)
        guard case .object(let members) = json else {
            throw JobError(.notAnObject, "a registration is a JSON object, got \(JobDecoder.kind(json))")
        }
        var app: JSONValue?
        var token: JSONValue?
        var registeredAt: JSONValue?
        var language: JSONValue?
        for (key, value) in members {
            switch key {
            case "app": try JobDecoder.take(&app, value, key)
            case "token": try JobDecoder.take(&token, value, key)
            case "registered_at": try JobDecoder.take(&registeredAt, value, key)
            case "language": try JobDecoder.take(&language, value, key)
            default: continue
            }
        }
        guard let appValue = app.flatMap(JobDecoder.nonNull) else {
            throw JobError(.missingApp, "the registration has no app")
        }
        guard case .string(let appName) = appValue, !appName.isEmpty else {
            throw JobError(.missingApp, "app must be a non-empty string (the bundle id), got \(JobDecoder.kind(appValue))")
        }
        guard let tokenValue = token.flatMap(JobDecoder.nonNull) else {
            throw JobError(.invalidToken, "the registration has no token")
        }
        guard case .string(let hex) = tokenValue else {
            throw JobError(.invalidToken, "token must be a string of 64 hex characters, got \(JobDecoder.kind(tokenValue))")
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
        var lang: String?
        if let languageValue = language.flatMap(JobDecoder.nonNull) {
            guard case .string(let s) = languageValue, s.utf8.count <= maxLanguageBytes else {
                throw JobError(
                    .invalidLanguage, "language must be a string of at most \(maxLanguageBytes) bytes, got \(JobDecoder.text(languageValue))")
            }
            lang = s.isEmpty ? nil : s
        }
        return RegistrationEvent(app: appName, token: deviceToken, registeredAt: at, language: lang)
    }
}
