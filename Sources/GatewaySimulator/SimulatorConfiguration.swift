import APNsProtocol

/// Everything the simulator needs to start: where to listen, which certificates, what to get wrong.
public struct SimulatorConfiguration: Sendable {
    /// Listening address; loopback by default. Port 0 picks a free port (read it back from `ports`).
    public var host: String = "127.0.0.1"
    public var gatewayPort: Int = 0
    public var feedbackPort: Int = 0

    public var tls: TLS
    public var limits: PayloadLimits = .default
    public var faults: FaultScript = FaultScript()

    /// NDJSON file of accepted notifications; nil keeps no records on disk.
    public var recordsPath: String?
    /// Also keep accepted notifications in memory (tests read them through `GatewaySimulator.records`).
    public var keepRecordsInMemory = false
    /// Write each record as it is made, not every 50 ms (`--records-sync`: nothing answered is unrecorded after a `kill -9`).
    public var recordsSynchronous = false

    /// Event-loop threads serving connections.
    public var threads: Int = 1

    public struct TLS: Sendable {
        /// PEM files: the simulator's certificate and key, and the CA that provider certificates must
        /// chain to (no client certificate, or one from another CA, fails the handshake).
        public var certificatePath: String
        public var privateKeyPath: String
        public var clientCAPath: String

        public init(certificatePath: String, privateKeyPath: String, clientCAPath: String) {
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
            self.clientCAPath = clientCAPath
        }

        /// The files `ops/certs` makes in `directory`.
        public static func testCertificates(in directory: String) -> TLS {
            TLS(
                certificatePath: "\(directory)/server.pem", privateKeyPath: "\(directory)/server.key",
                clientCAPath: "\(directory)/ca.pem")
        }
    }

    public init(tls: TLS) {
        self.tls = tls
    }
}

/// The faults the simulator plays, to prove the sender against every way a gateway misbehaves.
/// Every random choice draws from one seeded generator, so a run can be repeated.
public struct FaultScript: Sendable, Codable, Equatable {
    /// Tokens answered with status 8 (invalid token).
    public var invalidTokens: Set<String> = []
    /// Tokens whose app is "uninstalled": the notification is accepted and a feedback entry with the
    /// current time is queued for its app.
    public var uninstalledTokens: Set<String> = []
    /// Chance (0…1) that a notification is answered with status 1 (processing error).
    public var processingErrorRate: Double = 0
    /// Notifications (counted from 1 over the whole simulator, in arrival order) answered with status 1.
    public var processingErrorAt: Set<Int> = []
    /// Every this many accepted notifications (counted over the whole simulator), the connection that
    /// accepted the last one writes status 10 (shutdown) naming it, and closes.
    public var shutdownEvery: Int?
    /// Every this many accepted notifications (over the whole simulator), the connection that accepted
    /// the last one closes abruptly: no error response.
    public var dropEvery: Int?
    /// Slow reader: read at most `slowReadBytes` every `slowReadIntervalMillis` on each connection.
    public var slowReadBytes: Int?
    public var slowReadIntervalMillis: Int = 10
    /// Refuse (accept and close at once) connections in this window, in seconds since the simulator started.
    public var refuseConnectionsFromSecond: Double?
    public var refuseConnectionsForSeconds: Double = 0
    /// Hold every new connection's first bytes this long before the TLS handshake proceeds.
    public var handshakeDelayMillis: Int = 0
    /// Seed of the random generator behind `processingErrorRate`.
    public var seed: UInt64 = 1

    public init() {}

    enum CodingKeys: String, CodingKey {
        case invalidTokens = "invalid_tokens"
        case uninstalledTokens = "uninstalled_tokens"
        case processingErrorRate = "processing_error_rate"
        case processingErrorAt = "processing_error_at"
        case shutdownEvery = "shutdown_every"
        case dropEvery = "drop_every"
        case slowReadBytes = "slow_read_bytes"
        case slowReadIntervalMillis = "slow_read_interval_ms"
        case refuseConnectionsFromSecond = "refuse_connections_from_s"
        case refuseConnectionsForSeconds = "refuse_connections_for_s"
        case handshakeDelayMillis = "handshake_delay_ms"
        case seed
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = FaultScript()
        invalidTokens = Set(try c.decodeIfPresent([String].self, forKey: .invalidTokens)?.map { $0.lowercased() } ?? [])
        uninstalledTokens = Set(
            try c.decodeIfPresent([String].self, forKey: .uninstalledTokens)?.map { $0.lowercased() } ?? [])
        processingErrorRate = try c.decodeIfPresent(Double.self, forKey: .processingErrorRate) ?? defaults.processingErrorRate
        processingErrorAt = try c.decodeIfPresent(Set<Int>.self, forKey: .processingErrorAt) ?? []
        shutdownEvery = try c.decodeIfPresent(Int.self, forKey: .shutdownEvery)
        dropEvery = try c.decodeIfPresent(Int.self, forKey: .dropEvery)
        slowReadBytes = try c.decodeIfPresent(Int.self, forKey: .slowReadBytes)
        slowReadIntervalMillis = try c.decodeIfPresent(Int.self, forKey: .slowReadIntervalMillis) ?? defaults.slowReadIntervalMillis
        refuseConnectionsFromSecond = try c.decodeIfPresent(Double.self, forKey: .refuseConnectionsFromSecond)
        refuseConnectionsForSeconds = try c.decodeIfPresent(Double.self, forKey: .refuseConnectionsForSeconds) ?? 0
        handshakeDelayMillis = try c.decodeIfPresent(Int.self, forKey: .handshakeDelayMillis) ?? 0
        seed = try c.decodeIfPresent(UInt64.self, forKey: .seed) ?? defaults.seed
    }
}
