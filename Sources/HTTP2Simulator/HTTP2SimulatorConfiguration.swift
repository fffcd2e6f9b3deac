import APNsProtocol
import APNsTransport
import GatewaySimulator

/// Everything the HTTP/2 provider API simulator needs to start: where to listen, which certificates and
/// token keys it trusts, how it limits streams, what to get wrong.
public struct HTTP2SimulatorConfiguration: Sendable {
    /// Listening address; loopback by default. Port 0 picks a free port (read it back from `port`).
    public var host: String = "127.0.0.1"
    public var port: Int = 0

    /// The simulator's certificate and the CA provider certificates must chain to (same files and
    /// meaning as the binary simulator's).
    public var tls: SimulatorConfiguration.TLS

    /// Token auth: key id → (team id, public key). Empty: certificate auth only, and a connection
    /// without a client certificate fails the TLS handshake. Not empty: the client certificate is
    /// optional, and a connection without one must send `authorization: bearer <JWT>`.
    public var tokenKeys: [String: ProviderTokenVerifier.Key] = [:]
    /// Apple: a token older than one hour is expired (403 ExpiredProviderToken).
    public var tokenMaxAgeSeconds: Int64 = 3600
    /// Apple: "Refresh your token no more than once every 20 minutes"; a connection that changes its
    /// token sooner is answered 429 TooManyProviderTokenUpdates.
    public var tokenRefreshIntervalSeconds: Double = 20 * 60

    /// SETTINGS_MAX_CONCURRENT_STREAMS before the first request with valid auth (Apple: 1) and after.
    public var initialMaxConcurrentStreams: Int = 1
    public var maxConcurrentStreams: Int = 1000

    public var faults = HTTP2FaultScript()

    /// NDJSON file of accepted notifications; nil keeps no records on disk.
    public var recordsPath: String?
    /// Also keep accepted notifications in memory (tests read them through `HTTP2Simulator.records`).
    public var keepRecordsInMemory = false
    /// Write each record as it is made, not every 50 ms (`--records-sync`: nothing answered is unrecorded after a `kill -9`).
    public var recordsSynchronous = false

    /// Event-loop threads serving connections.
    public var threads: Int = 1

    /// Answer as Apple's development (sandbox) environment does: every answer carries an
    /// `apns-unique-id` ("An identifier that is only available in the Development environment").
    public var sandbox = false

    public init(tls: SimulatorConfiguration.TLS) {
        self.tls = tls
    }
}

/// The HTTP/2 simulator's faults. Keys that mean the same thing as the binary simulator's keep its
/// names, so one fault file drives both: `invalid_tokens` (400 BadDeviceToken here, status 8 there),
/// `uninstalled_tokens` (410 Unregistered here, a feedback entry there), `processing_error_rate` (500
/// InternalServerError here when `internal_server_error_rate` is not given), `shutdown_every` (GOAWAY
/// here, status 10 there), `drop_every`, `slow_read_*`, `refuse_connections_*`, `handshake_delay_ms`,
/// `seed`. Every random choice draws from one seeded generator per connection (seed + connection number).
public struct HTTP2FaultScript: Sendable, Codable, Equatable {
    public var invalidTokens: Set<String> = []
    public var uninstalledTokens: Set<String> = []
    /// Tokens answered 410 Unregistered with their own `timestamp` (ms since 1970): "the time the token
    /// was marked", per token.
    public var unregisteredTokens: [String: Int64] = [:]
    /// Tokens answered 410 ExpiredToken.
    public var expiredTokens: Set<String> = []
    /// `timestamp` of the 410s for `uninstalled_tokens`; nil: the time the simulator started.
    public var unregisteredTimestampMillis: Int64?
    /// Token → the topic it was registered for; another topic gets 400 DeviceTokenNotForTopic.
    public var tokenTopics: [String: String] = [:]
    /// A token sent more than this many times within `tooManyRequestsWindowSeconds` gets 429 TooManyRequests.
    public var tooManyRequestsPerToken: Int?
    public var tooManyRequestsWindowSeconds: Double = 1
    /// Chances (0…1) of 429 TooManyRequests, 500 InternalServerError, 503 ServiceUnavailable.
    public var tooManyRequestsRate: Double = 0
    public var internalServerErrorRate: Double = 0
    public var serviceUnavailableRate: Double = 0
    /// Every this many accepted notifications (over the whole simulator), the connection that accepted
    /// the last one sends GOAWAY (reason Shutdown) and finishes the streams it already has.
    public var shutdownEvery: Int?
    /// Every this many accepted notifications, the connection that accepted the last one closes its
    /// socket at once: that notification is recorded but never answered (no GOAWAY).
    public var dropEvery: Int?
    /// GOAWAY (reason Shutdown) on every connection every this many seconds.
    public var shutdownIntervalSeconds: Double?
    /// Response delay (ms): `responseDelayMillis` plus a random part, uniform in 0…`responseDelayMaxMillis`.
    public var responseDelayMillis: Int = 0
    public var responseDelayMaxMillis: Int = 0
    /// Slow reader: read at most `slowReadBytes` every `slowReadIntervalMillis` on each connection.
    public var slowReadBytes: Int?
    public var slowReadIntervalMillis: Int = 10
    /// Refuse (accept and close at once) connections in this window, seconds since the simulator started.
    public var refuseConnectionsFromSecond: Double?
    public var refuseConnectionsForSeconds: Double = 0
    public var handshakeDelayMillis: Int = 0
    /// Tight flow control, to make a client wait for WINDOW_UPDATE: SETTINGS_INITIAL_WINDOW_SIZE of this
    /// many bytes (a stream's window, returned as each DATA frame is read), and the connection window
    /// left at HTTP/2's 65,535 bytes, returned in steps of half of it.
    public var flowControlWindow: Int?
    /// Chance (0…1) that a request is answered RST_STREAM INTERNAL_ERROR instead (not recorded: a
    /// server that resets every stream is `1`).
    public var resetStreamRate: Double = 0
    /// Tokens whose requests are never answered (the stream stays open until the client resets it or
    /// the connection closes), while the connection answers every other stream.
    public var neverAnswerTokens: Set<String> = []
    /// Tokens answered 400 with this `reason` text, which Apple does not document (a broken or hostile
    /// gateway, or a proxy in the way: what a client must count without trusting).
    public var unlistedReasonTokens: [String: String] = [:]
    /// When set, the chances above (429, 500, 503, resets) apply only in this window, seconds after
    /// the simulator's first request: a storm of `ratesForSeconds` that then ends (an Apple incident),
    /// timed from the traffic so it meets it however long the client took to start.
    public var ratesFromSecond: Double?
    public var ratesForSeconds: Double = 0
    public var seed: UInt64 = 1
    /// Channels one app may have (channel management); one more is answered 400
    /// CannotCreateChannelConfig. Apple: "up to 10,000 channels for your app in the development and
    /// production environment, respectively" (the simulator is one environment).
    public var channelLimit: Int = APNsChannelManagement.channelLimitPerEnvironment
    /// Token keys restricted to one environment: key id → `sandbox` or `production`. A token signed with
    /// one of them is answered 403 BadEnvironmentKeyIdInToken by a simulator of the other environment
    /// (`sandbox` in the configuration decides which the simulator is).
    public var keyEnvironments: [String: String] = [:]
    /// Devices subscribed to each channel created from now on (`channel_subscribers`): a broadcast on
    /// the channel is recorded as one request reaching that many devices. The simulator has no devices;
    /// this stands for the audience ActivityKit subscribes on a real channel.
    public var channelSubscribers: Int = HTTP2FaultScript.defaultChannelSubscribers
    /// The default of ``channelSubscribers``: a small audience, so a demo shows one request reaching several.
    public static let defaultChannelSubscribers = 3

    public init() {}

    enum CodingKeys: String, CodingKey {
        case invalidTokens = "invalid_tokens"
        case uninstalledTokens = "uninstalled_tokens"
        case unregisteredTokens = "unregistered_tokens"
        case expiredTokens = "expired_tokens"
        case shutdownIntervalSeconds = "shutdown_interval_s"
        case unregisteredTimestampMillis = "unregistered_timestamp_ms"
        case tokenTopics = "token_topics"
        case tooManyRequestsPerToken = "too_many_requests_per_token"
        case tooManyRequestsWindowSeconds = "too_many_requests_window_s"
        case tooManyRequestsRate = "too_many_requests_rate"
        case internalServerErrorRate = "internal_server_error_rate"
        case processingErrorRate = "processing_error_rate"
        case serviceUnavailableRate = "service_unavailable_rate"
        case shutdownEvery = "shutdown_every"
        case dropEvery = "drop_every"
        case responseDelayMillis = "response_delay_ms"
        case responseDelayMaxMillis = "response_delay_max_ms"
        case slowReadBytes = "slow_read_bytes"
        case slowReadIntervalMillis = "slow_read_interval_ms"
        case refuseConnectionsFromSecond = "refuse_connections_from_s"
        case refuseConnectionsForSeconds = "refuse_connections_for_s"
        case handshakeDelayMillis = "handshake_delay_ms"
        case flowControlWindow = "flow_control_window"
        case resetStreamRate = "reset_stream_rate"
        case neverAnswerTokens = "never_answer_tokens"
        case unlistedReasonTokens = "unlisted_reason_tokens"
        case ratesFromSecond = "rates_from_s"
        case ratesForSeconds = "rates_for_s"
        case seed
        case channelLimit = "channel_limit"
        case keyEnvironments = "key_environments"
        case channelSubscribers = "channel_subscribers"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = HTTP2FaultScript()
        func lower(_ list: [String]?) -> Set<String> { Set((list ?? []).map { $0.lowercased() }) }
        invalidTokens = lower(try c.decodeIfPresent([String].self, forKey: .invalidTokens))
        uninstalledTokens = lower(try c.decodeIfPresent([String].self, forKey: .uninstalledTokens))
        let stamps = try c.decodeIfPresent([String: Int64].self, forKey: .unregisteredTokens) ?? [:]
        unregisteredTokens = Dictionary(stamps.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        expiredTokens = lower(try c.decodeIfPresent([String].self, forKey: .expiredTokens))
        shutdownIntervalSeconds = try c.decodeIfPresent(Double.self, forKey: .shutdownIntervalSeconds)
        unregisteredTimestampMillis = try c.decodeIfPresent(Int64.self, forKey: .unregisteredTimestampMillis)
        let topics = try c.decodeIfPresent([String: String].self, forKey: .tokenTopics) ?? [:]
        tokenTopics = Dictionary(topics.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        tooManyRequestsPerToken = try c.decodeIfPresent(Int.self, forKey: .tooManyRequestsPerToken)
        tooManyRequestsWindowSeconds =
            try c.decodeIfPresent(Double.self, forKey: .tooManyRequestsWindowSeconds) ?? d.tooManyRequestsWindowSeconds
        tooManyRequestsRate = try c.decodeIfPresent(Double.self, forKey: .tooManyRequestsRate) ?? 0
        internalServerErrorRate =
            try c.decodeIfPresent(Double.self, forKey: .internalServerErrorRate)
            ?? c.decodeIfPresent(Double.self, forKey: .processingErrorRate) ?? 0
        serviceUnavailableRate = try c.decodeIfPresent(Double.self, forKey: .serviceUnavailableRate) ?? 0
        shutdownEvery = try c.decodeIfPresent(Int.self, forKey: .shutdownEvery)
        dropEvery = try c.decodeIfPresent(Int.self, forKey: .dropEvery)
        responseDelayMillis = try c.decodeIfPresent(Int.self, forKey: .responseDelayMillis) ?? 0
        responseDelayMaxMillis = try c.decodeIfPresent(Int.self, forKey: .responseDelayMaxMillis) ?? 0
        slowReadBytes = try c.decodeIfPresent(Int.self, forKey: .slowReadBytes)
        slowReadIntervalMillis = try c.decodeIfPresent(Int.self, forKey: .slowReadIntervalMillis) ?? d.slowReadIntervalMillis
        refuseConnectionsFromSecond = try c.decodeIfPresent(Double.self, forKey: .refuseConnectionsFromSecond)
        refuseConnectionsForSeconds = try c.decodeIfPresent(Double.self, forKey: .refuseConnectionsForSeconds) ?? 0
        handshakeDelayMillis = try c.decodeIfPresent(Int.self, forKey: .handshakeDelayMillis) ?? 0
        flowControlWindow = try c.decodeIfPresent(Int.self, forKey: .flowControlWindow)
        resetStreamRate = try c.decodeIfPresent(Double.self, forKey: .resetStreamRate) ?? 0
        neverAnswerTokens = lower(try c.decodeIfPresent([String].self, forKey: .neverAnswerTokens))
        let unlisted = try c.decodeIfPresent([String: String].self, forKey: .unlistedReasonTokens) ?? [:]
        unlistedReasonTokens = Dictionary(unlisted.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        ratesFromSecond = try c.decodeIfPresent(Double.self, forKey: .ratesFromSecond)
        ratesForSeconds = try c.decodeIfPresent(Double.self, forKey: .ratesForSeconds) ?? 0
        seed = try c.decodeIfPresent(UInt64.self, forKey: .seed) ?? d.seed
        channelLimit = try c.decodeIfPresent(Int.self, forKey: .channelLimit) ?? d.channelLimit
        keyEnvironments = try c.decodeIfPresent([String: String].self, forKey: .keyEnvironments) ?? [:]
        channelSubscribers = try c.decodeIfPresent(Int.self, forKey: .channelSubscribers) ?? d.channelSubscribers
        guard channelSubscribers >= 0 else {
            throw DecodingError.dataCorruptedError(
                forKey: .channelSubscribers, in: c, debugDescription: "expected a whole number ≥ 0, found \(channelSubscribers)")
        }
        for (key, environment) in keyEnvironments where environment != "sandbox" && environment != "production" {
            throw DecodingError.dataCorruptedError(
                forKey: .keyEnvironments, in: c, debugDescription: "key \(key): expected sandbox or production, found \(environment)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(invalidTokens.sorted(), forKey: .invalidTokens)
        try c.encode(uninstalledTokens.sorted(), forKey: .uninstalledTokens)
        try c.encode(unregisteredTokens, forKey: .unregisteredTokens)
        try c.encode(expiredTokens.sorted(), forKey: .expiredTokens)
        try c.encodeIfPresent(shutdownIntervalSeconds, forKey: .shutdownIntervalSeconds)
        try c.encodeIfPresent(unregisteredTimestampMillis, forKey: .unregisteredTimestampMillis)
        try c.encode(tokenTopics, forKey: .tokenTopics)
        try c.encodeIfPresent(tooManyRequestsPerToken, forKey: .tooManyRequestsPerToken)
        try c.encode(tooManyRequestsWindowSeconds, forKey: .tooManyRequestsWindowSeconds)
        try c.encode(tooManyRequestsRate, forKey: .tooManyRequestsRate)
        try c.encode(internalServerErrorRate, forKey: .internalServerErrorRate)
        try c.encode(serviceUnavailableRate, forKey: .serviceUnavailableRate)
        try c.encodeIfPresent(shutdownEvery, forKey: .shutdownEvery)
        try c.encodeIfPresent(dropEvery, forKey: .dropEvery)
        try c.encode(responseDelayMillis, forKey: .responseDelayMillis)
        try c.encode(responseDelayMaxMillis, forKey: .responseDelayMaxMillis)
        try c.encodeIfPresent(slowReadBytes, forKey: .slowReadBytes)
        try c.encode(slowReadIntervalMillis, forKey: .slowReadIntervalMillis)
        try c.encodeIfPresent(refuseConnectionsFromSecond, forKey: .refuseConnectionsFromSecond)
        try c.encode(refuseConnectionsForSeconds, forKey: .refuseConnectionsForSeconds)
        try c.encode(handshakeDelayMillis, forKey: .handshakeDelayMillis)
        try c.encodeIfPresent(flowControlWindow, forKey: .flowControlWindow)
        try c.encode(resetStreamRate, forKey: .resetStreamRate)
        try c.encode(neverAnswerTokens.sorted(), forKey: .neverAnswerTokens)
        try c.encodeIfPresent(ratesFromSecond, forKey: .ratesFromSecond)
        try c.encode(ratesForSeconds, forKey: .ratesForSeconds)
        try c.encode(seed, forKey: .seed)
        try c.encode(channelLimit, forKey: .channelLimit)
        try c.encode(keyEnvironments, forKey: .keyEnvironments)
        try c.encode(channelSubscribers, forKey: .channelSubscribers)
    }
}
