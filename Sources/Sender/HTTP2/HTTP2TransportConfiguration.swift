import APNsProtocol
import APNsTransport
import Logging
import NIOCore
import NIOSSL

/// How an HTTP/2 transport proves who it is.
public enum HTTP2Authentication: Sendable {
    /// A client certificate for the app's topic (as the binary transport's).
    case certificate(ProviderCredentials)
    /// A provider token (JWT ES256) from the team's `.p8` key, shared by every connection using the key.
    /// `trustRootsPath`: PEM roots for the server certificate; nil uses the system's (Apple's hosts).
    case token(ProviderTokenCache, trustRootsPath: String?)

    /// Token authentication with the process-wide token of this key (read from `keyFile`).
    public static func token(
        keyFile: String, keyID: String, teamID: String, trustRootsPath: String? = nil
    ) throws
        -> HTTP2Authentication
    {
        .token(try ProviderTokenCache.shared(keyFile: keyFile, keyID: keyID, teamID: teamID), trustRootsPath: trustRootsPath)
    }

    /// TLS 1.2+ with ALPN `h2` only: APNs speaks nothing else on these ports.
    func makeClientContext() throws -> NIOSSLContext {
        switch self {
        case .certificate(let credentials):
            return try credentials.makeClientContext(applicationProtocols: ["h2"])
        case .token(_, let trustRootsPath):
            var tls = TLSConfiguration.makeClientConfiguration()
            // swift-nio-ssl allows TLS 1.0 by default; Apple: "Use HTTP/2 and TLS 1.2 or later to
            // establish a connection" ("Sending Notification Requests to APNs").
            tls.minimumTLSVersion = .tlsv12
            tls.certificateVerification = .fullVerification
            tls.applicationProtocols = ["h2"]
            if let trustRootsPath { tls.trustRoots = .file(trustRootsPath) }
            return try NIOSSLContext(configuration: tls)
        }
    }
}

/// One app's HTTP/2 transport: `connections` TLS connections spread over `hosts`.
public struct HTTP2TransportConfiguration: Sendable {
    /// The app's bundle id: `apns-topic` (with a push type's suffix where one is required).
    public var app: String
    public var authentication: HTTP2Authentication
    public var hosts: [GatewayAddress]
    public var connections = 4
    /// Streams one connection keeps open at most; the server's SETTINGS may lower it. NIO-HTTP2 keeps
    /// a connection's open streams in sorted arrays, so an answer that is not for the oldest stream
    /// costs time in proportion to the streams open: 1000 streams made a request ~2.5× as costly as 100
    /// (`ops/bench http2`). For a far server (rate per connection = streams ÷ round trip), add
    /// connections before streams.
    public var streamCap = defaultStreamCap
    public static let defaultStreamCap = 100
    /// Flush when the written frames reach this many bytes…
    public var batchBytes = 64 * 1024
    /// …or when the oldest unflushed frame has waited this long.
    public var linger = Duration.milliseconds(2)
    /// At most this many notifications wait per connection; `send` waits sooner, once a connection
    /// holds a few windows of streams' worth (`HTTP2ConnectionStateMachine.roomLead`).
    public var queueCapacity = 8192
    /// Streams open and nothing read for this long (or a PING unanswered as long) means the connection
    /// is stuck: it is closed and its requests resent (as ambiguous).
    public var requestTimeout = Duration.seconds(10)
    /// A connection with nothing read for this long is pinged (an unanswered PING counts as stuck).
    public var pingInterval = Duration.seconds(30)
    /// 500 / 503 / 429, resets, lost connections and timed-out streams are resent after `retry`'s
    /// back-off until this long after the job's first failure (never past its
    /// `apns-expiration`), then dead-lettered `gateway-gave-up` (docs/design.md §5.6).
    public var giveUpAfter = RetryBudget.defaultGiveUpAfter
    /// The back-off between a job's attempts (exponential, with jitter, capped).
    public var retry = RetryBudget.defaultBackoff
    /// When a connection's answers are mostly 5xx it pauses (its work goes to the others), then probes.
    public var breaker = CircuitBreaker.Settings()
    public var reconnect = ReconnectPolicy()
    /// How long a connection whose credentials were refused waits before trying again (also after a
    /// refused connect: `HTTP2ConnectRefusal`).
    public var authFailureDelay = Duration.seconds(60)
    public var connectTimeout = Duration.seconds(10)
    /// Name checked against the server's certificate (and sent as `:authority`); nil uses each host's.
    public var serverHostname: String?
    /// Resolves each host at every connect; the connections to a host spread over its addresses.
    /// Not used for a host reached through `proxy`: the proxy resolves it.
    public var resolver: any HostResolver = SystemHostResolver()
    /// An HTTPS proxy (HTTP CONNECT) to reach the hosts through, but those its `noProxy` lists.
    public var proxy: HTTPSProxySettings?
    /// Cancelled campaigns (`campaign cancel`, design §2.10): a queued request of one settles
    /// ``Delivery/cancelled`` instead of being written. nil: nothing is cancelled.
    public var cancellations: CampaignCancellations?
    /// Called (on a connection's event loop) with every connect refused in a way that retrying cannot
    /// fix (`HTTP2ConnectRefusal`), instead of logging it: `send` stops at the first. nil: each is
    /// logged, at most once a minute per transport, and the connections keep trying every
    /// `authFailureDelay` with their jobs held (`run`).
    public var onConnectRefused: (@Sendable (HTTP2ConnectRefusal) -> Void)?

    public init(app: String, authentication: HTTP2Authentication, hosts: [GatewayAddress]) {
        precondition(!hosts.isEmpty)
        self.app = app
        self.authentication = authentication
        self.hosts = hosts
    }

    public static let production = [GatewayAddress(host: "api.push.apple.com", port: 443)]
    public static let sandbox = [GatewayAddress(host: "api.sandbox.push.apple.com", port: 443)]

    func machineConfiguration<Job>() -> HTTP2ConnectionStateMachine<Job>.Configuration {
        var c = HTTP2ConnectionStateMachine<Job>.Configuration()
        c.streamCap = streamCap
        c.queueCapacity = queueCapacity
        c.requestTimeout = TimeAmount(requestTimeout)
        c.pingInterval = TimeAmount(pingInterval)
        c.budget.giveUpAfter = giveUpAfter
        c.budget.backoff = retry
        c.breaker = breaker
        c.reconnect = reconnect
        c.authFailureDelay = TimeAmount(authFailureDelay)
        return c
    }
}

extension HTTP2TransportConfiguration: TransportConfiguration {
    public var attemptsPerSecondPerGateway: Double { reconnect.attemptsPerSecondPerGateway }

    public static var protocolName: String { "http2" }
    public static var interfaceDescription: String { "HTTP/2" }
    public static var hasTokenAuthentication: Bool { true }
    /// The token's hex is the request path, of any length.
    public static var carriesAnyTokenSize: Bool { true }
    public static var addressesTokensByHex: Bool { true }
    public static var requestsHaveIDs: Bool { true }
    public static var hasFeedbackService: Bool { false }
    public static var keepsWrittenNotifications: Bool { false }
    /// A request is settled by its answer; until then it is a stream open on the connection.
    public static var unsettledHolding: UnsettledHolding { .openStreams }
    /// Apple's per push type (4096 bytes, 5120 for voip) and for a broadcast (5120).
    public static func payloadLimit(pushType: APNsPushType?, broadcast: Bool) -> Int? {
        broadcast ? APNsBroadcast.maxPayloadBytes : (pushType ?? .alert).maxPayloadBytes
    }

    public func makeTransport(
        group: any EventLoopGroup, limiter: ConnectionLimiter, logger: Logger, onOutcomes: @escaping OutcomeHandler
    ) throws -> any NotificationTransport {
        try HTTP2Transport(configuration: self, group: group, limiter: limiter, logger: logger, onOutcomes: onOutcomes)
    }
}
