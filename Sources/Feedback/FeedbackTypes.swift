import APNsTransport
import TimeUnits

/// Where a feedback service listens (Apple's "The Feedback Service": `feedback.push.apple.com:2196`, sandbox
/// `feedback.sandbox.push.apple.com:2196`; tests use the gateway simulator on loopback).
public struct FeedbackEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// The name the service's certificate must carry; defaults to `host`. Set it when connecting by
    /// address (e.g. `127.0.0.1` to a certificate issued for `localhost`).
    public var serverHostname: String

    public init(host: String, port: Int = 2196, serverHostname: String? = nil) {
        self.host = host
        self.port = port
        self.serverHostname = serverHostname ?? host
    }

    public static let production = FeedbackEndpoint(host: "feedback.push.apple.com", port: 2196)

    public var description: String { "\(host):\(port)" }
}

/// One app to poll: its provider credentials (which name the app's topic) and the service to ask.
/// The feedback service keeps one list per topic, so each app is polled with its own certificate.
public struct FeedbackApp: Sendable, Hashable {
    public var credentials: ProviderCredentials
    public var endpoint: FeedbackEndpoint

    public init(credentials: ProviderCredentials, endpoint: FeedbackEndpoint) {
        self.credentials = credentials
        self.endpoint = endpoint
    }

    /// From file paths (PEM): the app's client certificate and key, and the CA the service's certificate
    /// must chain to (nil: the system's roots).
    public init(app: String, certificatePath: String, privateKeyPath: String, trustRootsPath: String?, endpoint: FeedbackEndpoint) {
        self.init(
            credentials: ProviderCredentials(
                app: app, certificatePath: certificatePath, privateKeyPath: privateKeyPath, trustRootsPath: trustRootsPath),
            endpoint: endpoint)
    }

    /// The bundle id (= certificate topic): the app of `<p>:suppressed:<app>`.
    public var app: String { credentials.app }
}

/// Tuning of ``FeedbackPoller``.
public struct FeedbackPollerConfiguration: Sendable, Hashable {
    /// Suppressions written per Redis round trip at most. A batch is also written at the end of every
    /// TLS read, so a slow trickle is never held back waiting for a full batch.
    public var batchSize: Int
    /// TCP connect timeout.
    public var connectTimeout: Duration
    /// How long to wait for bytes (handshake included) while the poller is ready to read; then the
    /// connection is closed and the poll ends with an error (what was read is kept).
    public var readTimeout: Duration
    /// Refuse to poll when the certificate names another topic than the configured app: the
    /// suppressions would land in the wrong app's hash.
    public var requireMatchingTopic: Bool
    /// Inbound TLS reads buffered ahead of the Redis writes (back-pressure: beyond this, the socket is
    /// not read until Redis has caught up).
    public var readAhead: Int

    public init(
        batchSize: Int = 500,
        connectTimeout: Duration = .seconds(10),
        readTimeout: Duration = .seconds(60),
        requireMatchingTopic: Bool = true,
        readAhead: Int = 4
    ) {
        self.batchSize = batchSize
        self.connectTimeout = connectTimeout
        self.readTimeout = readTimeout
        self.requireMatchingTopic = requireMatchingTopic
        self.readAhead = readAhead
    }
}

/// What one poll of one app did.
public struct FeedbackPollSummary: Sendable, Hashable, CustomStringConvertible {
    public var app: String
    public var endpoint: String
    /// Tuples decoded from the stream, malformed ones included.
    public var tuplesRead = 0
    /// Suppressions written to Redis (one per well-formed tuple, once its batch is written).
    public var suppressed = 0
    /// Tuples whose token was not 32 bytes: logged and skipped.
    public var malformed = 0
    /// The stream ended inside a tuple (a truncated last tuple, logged and dropped).
    public var endedMidTuple = false
    /// Redis round trips that wrote suppressions.
    public var batches = 0
    /// Oldest and newest feedback timestamps seen (epoch seconds).
    public var oldestTimestamp: Int64?
    public var newestTimestamp: Int64?
    public var duration: Duration = .zero

    public init(app: String, endpoint: String) {
        self.app = app
        self.endpoint = endpoint
    }

    public var description: String {
        var text = "\(app) @ \(endpoint): \(tuplesRead) tuples read, \(suppressed) suppressed, \(malformed) malformed"
        if endedMidTuple { text += ", stream ended mid-tuple" }
        text += ", \(batches) Redis batches, \(duration.milliseconds) ms"
        return text
    }
}

/// A poll that did not finish. ``summary`` tells what was read and written before it stopped:
/// every suppression counted there is in Redis.
public struct FeedbackPollError: Error, CustomStringConvertible {
    public enum Stage: String, Sendable, Hashable {
        /// Certificate, key or CA could not be loaded, or the certificate names another topic.
        case configuration
        /// Redis did not answer before the service was contacted: nothing was read, nothing lost.
        case redisUnavailable = "redis-unavailable"
        /// TCP connect failed or timed out: nothing was read, nothing lost.
        case connect
        /// The stream failed (TLS handshake, reset, read timeout) before the service closed it.
        case stream
        /// A Redis write failed mid-read.
        case redisWrite = "redis-write"
        /// The polling task was cancelled; everything decoded up to then was written first.
        case cancelled
    }

    public var stage: Stage
    public var underlying: String
    public var summary: FeedbackPollSummary

    public init(stage: Stage, underlying: String, summary: FeedbackPollSummary) {
        self.stage = stage
        self.underlying = underlying
        self.summary = summary
    }

    /// What an operator should do about it (logged with the error).
    public var advice: String {
        switch stage {
        case .configuration:
            return "fix the app's certificate, key or CA files (or its bundle id); nothing was read from the service"
        case .redisUnavailable:
            return "check Redis; the feedback service was not contacted, so its list is intact for the next poll"
        case .connect:
            return "check the feedback host, port and network; the service keeps its list until it is read"
        case .stream:
            if summary.tuplesRead == 0 {
                return "check the certificate (production vs sandbox, expiry, CA) and the network; nothing was read"
            }
            return
                "the connection broke mid-read: what was read is in Redis; tuples the service sent after that may be lost (it clears its list once sent)"
        case .redisWrite:
            return
                "check Redis; the tuples of the failed batch were logged (feedback.unwritten) and must be re-applied by hand; the rest of the stream was not read"
        case .cancelled:
            return "stopped on request; everything read was written to Redis"
        }
    }

    public var description: String { "feedback poll \(stage.rawValue): \(underlying) (\(summary))" }
}

/// No bytes arrived within ``FeedbackPollerConfiguration/readTimeout`` while the poller was reading.
public struct FeedbackReadTimeout: Error, CustomStringConvertible {
    public var timeout: Duration
    public var description: String { "no data from the feedback service for \(timeout.milliseconds) ms" }
}
