import APNsProtocol
import Synchronization

/// A job's `payload` and `alerts` as read once for every job that carries the same bytes: a campaign's
/// jobs share them (`campaign publish` writes one template into every job), so the decoder reads,
/// validates and size-checks them once, and each (alert, encoder) variant of the payload is encoded
/// once and shared by every notification that sends it (one buffer, not one per job: less CPU and far
/// less memory in the sender's replay buffers).
///
/// What it holds is exactly what the decoder would conclude from the same bytes — results and errors
/// alike — so a job decoded through a template is the job decoded without one.
public final class JobTemplate: Sendable {
    /// The raw bytes of the job's `payload` value, and of its `alerts` value (nil: absent or null).
    let payloadBytes: [UInt8]
    let alertsBytes: [UInt8]?
    let payload: Result<Payload, JobError>
    let alerts: Result<[String: Alert], JobError>
    /// The size check (`JobDecoder.checkSize`) for `payloadLimit`, nil when it passes.
    let sizeError: JobError?
    let payloadLimit: Int

    struct EncodingKey: Hashable {
        /// The `alerts` key whose alert replaces the payload's (nil: the payload's own).
        var alert: String?
        var limit: Int
        var truncatesAlertBody: Bool
    }

    /// Encoded variants, built on first use (bounded: one per alerts key, plus one, per encoder).
    private let encoded = Mutex<[EncodingKey: Result<[UInt8], JobError>]>([:])

    init(
        payloadBytes: [UInt8], alertsBytes: [UInt8]?, payload: Result<Payload, JobError>, alerts: Result<[String: Alert], JobError>,
        sizeError: JobError?, payloadLimit: Int
    ) {
        self.payloadBytes = payloadBytes
        self.alertsBytes = alertsBytes
        self.payload = payload
        self.alerts = alerts
        self.sizeError = sizeError
        self.payloadLimit = payloadLimit
    }

    /// The payload with the `alert` key's alert (nil: its own), encoded by `encoder`: once per variant.
    func encodedPayload(alert: String?, encoder: PayloadEncoder, make: () throws(JobError) -> [UInt8]) throws(JobError) -> [UInt8] {
        let key = EncodingKey(alert: alert, limit: encoder.limit, truncatesAlertBody: encoder.truncatesAlertBody)
        if let known = encoded.withLock({ $0[key] }) { return try known.get() }
        let result = Result { () throws(JobError) in try make() }
        encoded.withLock { $0[key] = result }
        return try result.get()
    }

    func matches(payload: UnsafeRawBufferPointer, alerts: UnsafeRawBufferPointer?) -> Bool {
        guard payloadBytes.count == payload.count, (alertsBytes == nil) == (alerts == nil) else { return false }
        if let alerts, let own = alertsBytes {
            guard own.count == alerts.count, Self.equal(own, alerts) else { return false }
        }
        return Self.equal(payloadBytes, payload)
    }

    private static func equal(_ a: [UInt8], _ b: UnsafeRawBufferPointer) -> Bool {
        a.withUnsafeBytes { a in a.count == b.count && (a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0) }
    }
}

/// The templates a decoding stage has seen lately (most recent first), and the app names it has read,
/// so jobs that repeat them share one copy. One per decoding task: not thread-safe.
public final class JobTemplates {
    /// How many distinct payload/alerts pairs are remembered: enough for campaigns decoded side by side
    /// (a batch mixes partitions), small enough that a miss costs a short scan.
    public static let capacity = 16
    /// Values larger than this are not remembered (a template is a few hundred bytes; APNs' limit is 4 KiB).
    static let maxBytes = 16 * 1024
    static let maxApps = 64

    var recent: [JobTemplate] = []
    var apps: [String] = []

    public init() {}

    func find(payload: UnsafeRawBufferPointer, alerts: UnsafeRawBufferPointer?, payloadLimit: Int) -> JobTemplate? {
        for (i, t) in recent.enumerated() where t.payloadLimit == payloadLimit && t.matches(payload: payload, alerts: alerts) {
            if i > 0 {
                recent.remove(at: i)
                recent.insert(t, at: 0)
            }
            return t
        }
        return nil
    }

    /// The length of a remembered payload that `rest` begins with (nil: none). Its bytes were checked
    /// by the parser as a job's member value when the template was made, so they are valid JSON there.
    func knownPayload(at rest: UnsafeRawBufferPointer) -> Int? {
        for t in recent where Self.begins(rest, with: t.payloadBytes) { return t.payloadBytes.count }
        return nil
    }

    /// As ``knownPayload(at:)``, for the alerts.
    func knownAlerts(at rest: UnsafeRawBufferPointer) -> Int? {
        for t in recent {
            if let alerts = t.alertsBytes, Self.begins(rest, with: alerts) { return alerts.count }
        }
        return nil
    }

    private static func begins(_ rest: UnsafeRawBufferPointer, with known: [UInt8]) -> Bool {
        known.withUnsafeBytes { k in
            k.count > 0 && k.count <= rest.count && memcmp(k.baseAddress!, rest.baseAddress!, k.count) == 0
        }
    }

    func remember(_ template: JobTemplate) {
        recent.insert(template, at: 0)
        if recent.count > Self.capacity { recent.removeLast() }
    }

    /// The app name spelled by `bytes` (a JSON string's contents without escapes), one String per name.
    func app(_ bytes: UnsafeRawBufferPointer) -> String {
        for a in apps {
            var name = a
            let same = name.withUTF8 { u in
                u.count == bytes.count && (u.count == 0 || memcmp(u.baseAddress!, bytes.baseAddress!, u.count) == 0)
            }
            if same { return a }
        }
        let name = String(decoding: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self)
        if apps.count < Self.maxApps { apps.append(name) }
        return name
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#elseif canImport(Musl)
import Musl
#endif
