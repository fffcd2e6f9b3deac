import APNsProtocol

/// Decodes and validates job messages (`docs/design.md §3.1`, reasons §3.2): one pass of `JSONParser` over the message, then
/// typed reading of each key; no Foundation.
///
/// Rules, checked in this order (the first failure is reported):
/// - the message is JSON (`invalid-json`) and an object (`not-an-object`); a known top-level key given
///   twice is `invalid-json` (ambiguous). Unknown top-level keys are ignored (forward compatible:
///   producers may add keys before the pipeline knows them). `null` counts as absent.
/// - `id`: a string of 1…128 UTF-8 bytes (`missing-id`, `invalid-id`);
/// - `app`: a non-empty string (`missing-app`);
/// - `token`: 64 hex characters, any case (`invalid-token`, also when missing);
/// - `payload`: an object with an `aps` object whose Table 3-1/3-2 keys have their types
///   (`missing-payload`, `invalid-payload`);
/// - `alerts` (optional): an object of language → alert string or alert dictionary (`invalid-alerts`);
/// - `priority` (optional, default 10): the number 10 or 5 (`invalid-priority`);
/// - `expiry` (optional, default `now + defaultTimeToLive`): a whole number in 0…2³²−1
///   (`invalid-expiry`), 0 = do not store, otherwise not before `now` (`expired`);
/// - `campaign` (optional): a string of 1…128 UTF-8 bytes (`invalid-campaign`);
/// - priority 10 with an `aps` holding only `content-available` (`priority-10-content-available-only`;
///   the default priority is 10, so such a job must say `"priority": 5`);
/// - the compact payload, and the payload with each `alerts` variant in place of its alert, fit
///   `payloadLimit` (`payload-too-large`).
public struct JobDecoder: Sendable {
    /// Checked on the compact encoding of the payload (2048 for the binary interface, 4096 for HTTP/2).
    public var payloadLimit: Int = PayloadLimits.default.command2
    /// Expiry of a job that gives none: `now` plus this.
    public var defaultTimeToLive: UInt32 = 86_400

    public static let maxIDBytes = 128
    public static let maxCampaignBytes = 128

    public init(payloadLimit: Int = PayloadLimits.default.command2, defaultTimeToLive: UInt32 = 86_400) {
        self.payloadLimit = payloadLimit
        self.defaultTimeToLive = defaultTimeToLive
    }

    /// Decodes and validates one job message; `now` is epoch seconds.
    public func decode(_ bytes: UnsafeRawBufferPointer, now: UInt32) throws(JobError) -> Job {
        try decode(json: try Self.parse(bytes), now: now)
    }

    public func decode(_ bytes: [UInt8], now: UInt32) throws(JobError) -> Job {
        try bytes.withUnsafeBytes { raw in Result { () throws(JobError) in try decode(raw, now: now) } }.get()
    }

    /// Validates a job already parsed (e.g. by a tool that reads NDJSON).
    public func decode(json: JSONValue, now: UInt32) throws(JobError) -> Job {
        guard case .object(let members) = json else {
            throw JobError(.notAnObject, "a job is a JSON object, got \(Self.kind(json))")
        }
        var id: JSONValue?
        var app: JSONValue?
        var token: JSONValue?
        var payload: JSONValue?
        var alerts: JSONValue?
        var expiry: JSONValue?
        var priority: JSONValue?
        var campaign: JSONValue?
        for (key, value) in members {
            switch key {
            case "id": try Self.take(&id, value, key)
            case "app": try Self.take(&app, value, key)
            case "token": try Self.take(&token, value, key)
            case "payload": try Self.take(&payload, value, key)
            case "alerts": try Self.take(&alerts, value, key)
            case "expiry": try Self.take(&expiry, value, key)
            case "priority": try Self.take(&priority, value, key)
            case "campaign": try Self.take(&campaign, value, key)
            default: continue  // unknown keys: ignored (forward compatible)
            }
        }

        // id
        guard let idValue = id.flatMap(Self.nonNull) else { throw JobError(.missingID, "the job has no id") }
        guard case .string(let jobID) = idValue else {
            throw JobError(.invalidID, "id must be a string, got \(Self.kind(idValue))")
        }
        let idBytes = jobID.utf8.count
        guard idBytes >= 1, idBytes <= Self.maxIDBytes else {
            throw JobError(.invalidID, "id must be 1…\(Self.maxIDBytes) UTF-8 bytes, got \(idBytes)")
        }

        // app
        guard let appValue = app.flatMap(Self.nonNull) else { throw JobError(.missingApp, "the job has no app") }
        guard case .string(let appName) = appValue, !appName.isEmpty else {
            throw JobError(.missingApp, "app must be a non-empty string (the bundle id), got \(Self.kind(appValue))")
        }

        // token
        guard let tokenValue = token.flatMap(Self.nonNull) else { throw JobError(.invalidToken, "the job has no token") }
        guard case .string(let tokenHex) = tokenValue else {
            throw JobError(.invalidToken, "token must be a string of 64 hex characters, got \(Self.kind(tokenValue))")
        }
        let deviceToken: DeviceToken
        do throws(DeviceToken.ParseError) {
            deviceToken = try DeviceToken(hex: tokenHex)
        } catch {
            throw JobError(.invalidToken, "token: \(error.description)")
        }

        // payload
        guard let payloadValue = payload.flatMap(Self.nonNull) else {
            throw JobError(.missingPayload, "the job has no payload")
        }
        guard case .object(let payloadMembers) = payloadValue else {
            throw JobError(.invalidPayload, "payload must be a JSON object, got \(Self.kind(payloadValue))")
        }
        guard payloadMembers.contains(where: { $0.key == "aps" }) else {
            throw JobError(.invalidPayload, "payload has no aps dictionary")
        }
        let typedPayload: Payload
        do throws(PayloadError) {
            typedPayload = try Payload(json: payloadValue)
        } catch {
            throw JobError(.invalidPayload, Self.describe(error, prefix: "payload."))
        }

        // alerts
        var localized: [String: Alert] = [:]
        if let alertsValue = alerts.flatMap(Self.nonNull) {
            localized = try Self.readAlerts(alertsValue)
        }

        // priority
        var jobPriority = Priority.immediate
        if let priorityValue = priority.flatMap(Self.nonNull) {
            switch priorityValue {
            case .number("10"): jobPriority = .immediate
            case .number("5"): jobPriority = .conservePower
            default: throw JobError(.invalidPriority, "priority must be the number 10 or 5, got \(Self.text(priorityValue))")
            }
        }

        // expiry
        let jobExpiry: UInt32
        if let expiryValue = expiry.flatMap(Self.nonNull) {
            guard case .number(let literal) = expiryValue, let seconds = UInt32(literal) else {
                throw JobError(
                    .invalidExpiry,
                    "expiry must be a whole number of epoch seconds in 0…\(UInt32.max) (0 = do not store), got \(Self.text(expiryValue))")
            }
            if seconds != 0 && seconds < now {
                throw JobError(.expired, "expiry \(seconds) is \(now - seconds) s in the past (now \(now))")
            }
            jobExpiry = seconds
        } else {
            let (sum, overflow) = now.addingReportingOverflow(defaultTimeToLive)
            jobExpiry = overflow ? UInt32.max : sum
        }

        // campaign
        var campaignName: String?
        if let campaignValue = campaign.flatMap(Self.nonNull) {
            guard case .string(let name) = campaignValue else {
                throw JobError(.invalidCampaign, "campaign must be a string, got \(Self.kind(campaignValue))")
            }
            let n = name.utf8.count
            guard n >= 1, n <= Self.maxCampaignBytes else {
                throw JobError(.invalidCampaign, "campaign must be 1…\(Self.maxCampaignBytes) UTF-8 bytes, got \(n)")
            }
            campaignName = name
        }

        // priority against payload
        if jobPriority == .immediate && typedPayload.isContentAvailableOnly {
            throw JobError(
                .contentAvailableOnlyWithPriority10,
                "priority 10\(priority.flatMap(Self.nonNull) == nil ? " (the default)" : "") is invalid for a payload whose aps holds only content-available: send it with \"priority\": 5")
        }

        // size
        try checkSize(typedPayload, localized)

        return Job(
            id: jobID, app: appName, token: deviceToken, payload: typedPayload, alerts: localized, expiry: jobExpiry,
            priority: jobPriority, campaign: campaignName)
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
