import APNsProtocol

/// A validated notification job (`docs/design.md §3.1`), as decoded from one Kafka message by `JobDecoder`.
public struct Job: Sendable {
    /// Idempotency key (dedup): 1…128 UTF-8 bytes.
    public var id: String
    /// Bundle id = certificate topic: selects the pool. Non-empty.
    public var app: String
    public var token: DeviceToken
    public var payload: Payload {
        didSet { template = nil }
    }
    /// Language → alert (a string or an alert dictionary), used instead of the payload's own alert for
    /// devices registered with that language. May be empty.
    public var alerts: [String: Alert] {
        didSet { template = nil }
    }
    /// Where `payload` and `alerts` came from when the decoder shared them between jobs: their encoded
    /// variants are kept there, one per (alert, encoder). Dropped when either is changed.
    var template: JobTemplate?
    /// Epoch seconds after which APNs may discard the notification; 0 = do not store.
    public var expiry: UInt32
    public var priority: Priority
    public var campaign: String?
    /// HTTP/2 `apns-collapse-id`: notifications with the same id replace each other on the device.
    /// 1…64 UTF-8 bytes. The binary interface has no such field.
    public var collapseID: String?
    /// HTTP/2 `apns-push-type`; nil lets the transport infer it (background for a payload that shows
    /// nothing, else alert).
    public var pushType: APNsPushType?

    public init(
        id: String, app: String, token: DeviceToken, payload: Payload, alerts: [String: Alert] = [:],
        expiry: UInt32, priority: Priority = .immediate, campaign: String? = nil, collapseID: String? = nil,
        pushType: APNsPushType? = nil
    ) {
        self.id = id
        self.app = app
        self.token = token
        self.payload = payload
        self.alerts = alerts
        self.expiry = expiry
        self.priority = priority
        self.campaign = campaign
        self.collapseID = collapseID
        self.pushType = pushType
    }

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
