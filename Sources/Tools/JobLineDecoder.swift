import APNsProtocol
import Jobs
import Pipeline
import Sender

/// `apns-pipeline send`'s input: one job line (`docs/design.md §3.1` JSON) → a notification for one
/// app's transport, or the reason it is refused before sending.
///
/// Lines are decoded through `JobTemplates`, as `run` decodes Kafka messages: the jobs of a campaign
/// carry the same `payload` bytes, so the payload is read, validated and size-checked once, and
/// encoded once, its bytes shared by every notification that sends it (decoding and encoding each
/// line's payload were ~14 % of `send --protocol http2`'s CPU). What comes out — notification or
/// refusal, reason and detail — is what the plain decoder gives for the same line.
///
/// One per reading task: not thread-safe (the templates are its own).
public final class JobLineDecoder {
    /// Why a line is not sent: a `JobError` reason (`docs/design.md §3.2`), or `app-mismatch`.
    public struct Refusal: Error, Equatable, Sendable {
        public var reason: String
        public var detail: String

        public init(reason: String, detail: String) {
            self.reason = reason
            self.detail = detail
        }
    }

    /// The app this pool sends for: jobs for any other are refused.
    public let app: String
    public let decoder: JobDecoder
    public let encoder: PayloadEncoder
    /// Non-nil: this top-level key is added to each payload with the job id (dev/test only). Such a
    /// payload differs per job, so it is encoded per job.
    public let jobIDKey: String?
    /// The pool is the binary interface's: a token that is not 32 bytes is refused
    /// (`token-size-needs-http2`), as `run` refuses it for a binary app.
    public let binary: Bool
    private let templates = JobTemplates()

    /// Whether the pool can send a broadcast (a job with `channel`): HTTP/2 with token authentication
    /// only (design §3.1); otherwise such a job is refused `push-type-needs-token-auth`, before sending.
    public let canBroadcast: Bool
    /// A broadcast's payload limit (Apple's 5120 bytes; at least `payloadLimit`).
    private let broadcastEncoder: PayloadEncoder?

    public init(app: String, payloadLimit: Int, jobIDKey: String? = nil, binary: Bool = false, canBroadcast: Bool = false) {
        self.app = app
        self.binary = binary
        self.canBroadcast = canBroadcast
        // The decoder refuses other apps itself, before building their names; a broadcast may
        // be larger than a device push, so the decoder lets its size through and each encoder checks its own.
        let broadcastLimit = max(payloadLimit, APNsBroadcast.maxPayloadBytes)
        self.decoder = JobDecoder(payloadLimit: canBroadcast ? broadcastLimit : payloadLimit, apps: KnownApps([app]))
        self.encoder = PayloadEncoder(limit: payloadLimit)
        self.broadcastEncoder = canBroadcast ? PayloadEncoder(limit: broadcastLimit) : nil
        self.jobIDKey = jobIDKey
    }

    /// A decoded line: the notification, and for a broadcast what its `apns-expiration` is made from
    /// (the notification's `expiry` is then the one its job's own word gives, ``BroadcastExpiryRequest``
    /// with no learned policy; `send` learns the channel's and sets it).
    public struct Line: Sendable {
        public var notification: PushNotification
        public var broadcast: BroadcastExpiryRequest?
    }

    /// One line (without its newline); `now` is epoch seconds.
    public func line(_ line: UnsafeRawBufferPointer, now: UInt32) -> Result<Line, Refusal> {
        do throws(JobError) {
            let job = try decoder.decode(line, now: now, templates: templates)
            if job.channel != nil && !canBroadcast {
                return .failure(
                    Refusal(
                        reason: JobErrorReason.pushTypeNeedsTokenAuth.rawValue,
                        detail: "a broadcast (a job with channel) needs --protocol http2 with token authentication (--token-key)"))
            }
            if binary && !job.token.fitsBinaryInterface { throw PipelineConfiguration.App.tokenSizeRefusal(app: app, token: job.token) }
            if job.channel != nil, let broadcastEncoder {
                let request = BroadcastExpiryRequest(job)
                let expiry = try request.expiration(learned: nil, now: now).get()
                let payload = try job.encodedPayload(language: nil, encoder: broadcastEncoder, jobIDKey: jobIDKey)
                let n = PushNotification(
                    jobID: job.id, app: job.app, recipient: job.recipient, payload: payload, expiry: expiry, priority: job.priority,
                    campaign: job.campaign, collapseID: job.collapseID, pushType: job.pushType, user: job.user, timeZone: job.timeZone,
                    isTransactional: job.isTransactional)
                return .success(Line(notification: n, broadcast: request))
            }
            let payload = try job.encodedPayload(language: nil, encoder: encoder, jobIDKey: jobIDKey)
            return .success(
                Line(
                    notification: PushNotification(
                        jobID: job.id, app: job.app, recipient: job.recipient, payload: payload, expiry: job.expiry, priority: job.priority,
                        campaign: job.campaign, collapseID: job.collapseID, pushType: job.pushType, user: job.user,
                        timeZone: job.timeZone, isTransactional: job.isTransactional)))
        } catch {
            return .failure(refusal(error))
        }
    }

    public func line(_ line: [UInt8], now: UInt32) -> Result<Line, Refusal> {
        line.withUnsafeBytes { self.line($0, now: now) }
    }

    /// The notification for one line (without its newline); `now` is epoch seconds. A broadcast's
    /// expiry is its job's own word (``Line``).
    public func notification(_ line: UnsafeRawBufferPointer, now: UInt32) -> Result<PushNotification, Refusal> {
        self.line(line, now: now).map(\.notification)
    }

    public func notification(_ line: [UInt8], now: UInt32) -> Result<PushNotification, Refusal> {
        line.withUnsafeBytes { notification($0, now: now) }
    }

    /// A job's refusal as `send` reports it.
    public func refusal(_ error: JobError) -> Refusal {
        if error.reason == .noCertificateForApp {
            return Refusal(reason: "app-mismatch", detail: "\(error.detail); this pool sends for \(app)")
        }
        return Refusal(reason: error.reason.rawValue, detail: error.detail)
    }
}
