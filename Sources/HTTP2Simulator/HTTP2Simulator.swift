import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// Apple's HTTP/2 provider API on loopback (Apple, "Sending notification requests to APNs"): TLS with
/// ALPN `h2`, `POST /3/device/<token>`, certificate or token (ES256 JWT) authentication, Apple's
/// statuses and reasons, Apple's connection behaviour (1 concurrent stream until the first request with
/// valid auth, then 1000; GOAWAY `{"reason":"Shutdown"}`), and scripted faults. Operators run it with
/// `apns-pipeline gateway-sim --protocol http2`; tests start it in-process.
public final class HTTP2Simulator: Sendable {
    public let configuration: HTTP2SimulatorConfiguration
    let core: HTTP2Core
    private let group: MultiThreadedEventLoopGroup
    private let listener: Mutex<(any Channel)?> = Mutex(nil)
    private let logger: Logger

    public init(configuration: HTTP2SimulatorConfiguration, logger: Logger = Logger(label: "apns.http2-sim")) throws {
        self.configuration = configuration
        self.logger = logger
        core = try HTTP2Core(configuration: configuration, logger: logger)
        group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, configuration.threads))
    }

    /// The port actually bound (useful when the configuration asked for port 0).
    public var port: Int { listener.withLock { $0?.localAddress?.port ?? 0 } }

    /// Binds the listener. Throws when the certificates cannot be read or the port is taken.
    public func start() async throws {
        let tls = configuration.tls
        var serverTLS = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(tls.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: tls.privateKeyPath, format: .pem)))
        // A client certificate is optional (token-based connections have none) but, when presented,
        // must chain to the configured CA.
        serverTLS.certificateVerification = .optionalVerification
        serverTLS.trustRoots = .file(tls.clientCAPath)
        serverTLS.minimumTLSVersion = .tlsv12
        serverTLS.applicationProtocols = ["h2"]
        let sslContext = try NIOSSLContext(configuration: serverTLS)

        let core = self.core
        let faults = configuration.faults
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 512)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if core.refusesConnectionsNow() {
                        core.count { $0.refusedConnections += 1 }
                        channel.close(promise: nil)
                        return
                    }
                    let sync = channel.pipeline.syncOperations
                    if let bytes = faults.slowReadBytes {
                        _ = channel.setOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: bytes))
                        _ = channel.setOption(.maxMessagesPerRead, value: 1)
                        try sync.addHandler(SlowReadHandler(interval: .milliseconds(Int64(faults.slowReadIntervalMillis))))
                    }
                    if faults.handshakeDelayMillis > 0 {
                        try sync.addHandler(HoldFirstBytesHandler(delay: .milliseconds(Int64(faults.handshakeDelayMillis))))
                    }
                    try sync.addHandler(NIOSSLServerHandler(context: sslContext))
                    try HTTP2Connection.configure(channel: channel, core: core)
                }
            }
            .bind(host: configuration.host, port: configuration.port).get()
        listener.withLock { $0 = channel }
        logger.info("HTTP/2 simulator listening", metadata: ["address": "\(configuration.host):\(channel.localAddress?.port ?? 0)"])
        if let interval = configuration.faults.shutdownIntervalSeconds, interval > 0 {
            let nanos = Int64(interval * 1e9)
            channel.eventLoop.scheduleRepeatedTask(initialDelay: .nanoseconds(nanos), delay: .nanoseconds(nanos)) { _ in
                core.goAwayAll()
            }
        }
    }

    /// GOAWAY `{"reason":"Shutdown"}` on every open connection, naming the last stream each will
    /// answer; each closes once those are answered. What a maintenance restart of APNs looks like.
    public func shutdownConnections() { core.goAwayAll() }

    /// Per token, when each of its requests was answered RST_STREAM (ms since 1970; with `keepRecordsInMemory`).
    public var resetTimes: [DeviceToken: [Int64]] { core.resetTimes.withLock { $0 } }

    /// Accepted notifications (with `keepRecordsInMemory`), after flushing what is pending.
    public var records: [HTTP2Record] { core.recorder.records }

    /// Flushes the records file.
    public func flushRecords() { core.recorder.flush() }

    public var totals: HTTP2SimulatorTotals { core.currentTotals() }

    /// An app's channels (channel management), oldest first, with their `message-storage-policy`.
    public func channels(app: String) -> [(id: String, storagePolicy: Int)] { core.channels.list(app: app) }

    /// Stops listening, closes every connection, flushes records.
    public func stop() async throws {
        if let l = listener.withLock({ $0 }) { try? await l.close() }
        core.closeAllConnections()
        try await group.shutdownGracefully()
        core.recorder.close()
    }
}

/// State shared by all connections of one simulator.
final class HTTP2Core: Sendable {
    let configuration: HTTP2SimulatorConfiguration
    let faults: HTTP2FaultScript
    let verifier: ProviderTokenVerifier
    let recorder: RecordWriter<HTTP2Record>
    let totals = Mutex(HTTP2SimulatorTotals())
    let logger: Logger
    let invalidTokens: Set<DeviceToken>
    let expiredTokens: Set<DeviceToken>
    /// Token → 410 timestamp (ms).
    let unregistered: [DeviceToken: Int64]
    let tokenTopics: [DeviceToken: String]
    let neverAnswerTokens: Set<DeviceToken>
    /// Token → the undocumented reason its requests are answered 400 with.
    let unlistedReasons: [DeviceToken: String]
    /// The apps' broadcast channels (channel management).
    let channels = ChannelRegistry()
    /// Times (ms since 1970) of the requests answered RST_STREAM, per token, when records are kept
    /// in memory: tests read the spacing of a client's resends from them.
    let resetTimes = Mutex<[DeviceToken: [Int64]]>([:])
    /// "GOAWAY" debug data: `{"reason":"Shutdown"}`.
    let shutdownBody: [UInt8] = APNsErrorBody(reason: .shutdown).encoded()
    private let startedAt = ContinuousClock.now
    /// Nanoseconds from `startedAt` to the first request that met `ratesApplyNow` (-1: none yet).
    private let firstRequestNanos = Atomic<Int64>(-1)
    private let acceptedCount = Atomic<Int>(0)
    private let connectionNumbers = Atomic<Int>(0)
    private let random: Mutex<SplitMix64>
    private let perToken = Mutex<[DeviceToken: (windowStart: Int64, count: Int)]>([:])
    private let connections = Mutex<[Int: Entry]>([:])

    struct Entry: Sendable {
        var channel: any Channel
        var connection: NIOLoopBound<HTTP2Connection>
    }

    init(configuration: HTTP2SimulatorConfiguration, logger: Logger) throws {
        self.configuration = configuration
        faults = configuration.faults
        self.logger = logger
        verifier = ProviderTokenVerifier(keys: configuration.tokenKeys, maxAge: configuration.tokenMaxAgeSeconds)
        func tokens(_ hexes: some Sequence<String>, _ name: String) throws -> [DeviceToken] {
            var out: [DeviceToken] = []
            for hex in hexes {
                do { out.append(try DeviceToken(hex: hex)) } catch {
                    throw SimulatorError.faultScript("\(name): \(hex): \(error)")
                }
            }
            return out
        }
        invalidTokens = Set(try tokens(faults.invalidTokens, "invalid_tokens"))
        expiredTokens = Set(try tokens(faults.expiredTokens, "expired_tokens"))
        let defaultStamp = faults.unregisteredTimestampMillis ?? Int64(Date().timeIntervalSince1970 * 1000)
        var unregistered: [DeviceToken: Int64] = [:]
        for t in try tokens(faults.uninstalledTokens, "uninstalled_tokens") { unregistered[t] = defaultStamp }
        for (hex, stamp) in faults.unregisteredTokens {
            unregistered[try tokens([hex], "unregistered_tokens")[0]] = stamp
        }
        self.unregistered = unregistered
        var topics: [DeviceToken: String] = [:]
        for (hex, topic) in faults.tokenTopics { topics[try tokens([hex], "token_topics")[0]] = topic }
        tokenTopics = topics
        neverAnswerTokens = Set(try tokens(faults.neverAnswerTokens, "never_answer_tokens"))
        var unlisted: [DeviceToken: String] = [:]
        for (hex, reason) in faults.unlistedReasonTokens { unlisted[try tokens([hex], "unlisted_reason_tokens")[0]] = reason }
        unlistedReasons = unlisted
        random = Mutex(SplitMix64(seed: faults.seed))
        recorder = try RecordWriter(
            path: configuration.recordsPath, keepInMemory: configuration.keepRecordsInMemory, synchronous: configuration.recordsSynchronous)
    }

    func count(_ update: (inout HTTP2SimulatorTotals) -> Void) { totals.withLock { update(&$0) } }

    /// The totals, with the 200s from their atomic (counted without the lock, once per request).
    func currentTotals() -> HTTP2SimulatorTotals {
        var t = totals.withLock { $0 }
        let accepted = acceptedCount.load(ordering: .relaxed)
        if accepted > 0 { t.byStatus[200] = accepted }
        return t
    }

    func nextConnectionNumber() -> Int { connectionNumbers.add(1, ordering: .relaxed).newValue }

    /// Number of the request just accepted, over the whole simulator, from 1.
    func nextAccepted() -> Int { acceptedCount.add(1, ordering: .relaxed).newValue }

    /// True with probability `rate`, from the seeded generator (no draw, no lock when the rate is 0).
    func draw(_ rate: Double) -> Bool {
        guard rate > 0 else { return false }
        return random.withLock { $0.nextUnit() } < rate
    }

    /// Uniform 0…max from the seeded generator.
    func drawMillis(upTo max: Int) -> Int {
        guard max > 0 else { return 0 }
        return Int(random.withLock { $0.next() } % UInt64(max + 1))
    }

    /// Counts a request to `token` and says whether it is over the per-token rate.
    func overTokenRate(_ token: DeviceToken, nowMillis: Int64) -> Bool {
        guard let limit = faults.tooManyRequestsPerToken else { return false }
        let window = Int64(faults.tooManyRequestsWindowSeconds * 1000)
        return perToken.withLock { map in
            var entry = map[token] ?? (windowStart: nowMillis, count: 0)
            if nowMillis - entry.windowStart >= window { entry = (windowStart: nowMillis, count: 0) }
            entry.count += 1
            map[token] = entry
            return entry.count > limit
        }
    }

    /// Whether the scripted rates (429, 500, 503, resets) apply now: always, or within their window,
    /// timed from the first request (so a storm meets the traffic however long the client took to come).
    func ratesApplyNow() -> Bool {
        guard let from = faults.ratesFromSecond else { return true }
        let sinceStart = startedAt.duration(to: ContinuousClock.now).components
        let now = sinceStart.seconds * 1_000_000_000 + sinceStart.attoseconds / 1_000_000_000
        var first = firstRequestNanos.load(ordering: .relaxed)
        if first < 0 {
            first =
                firstRequestNanos.compareExchange(expected: -1, desired: now, ordering: .relaxed).exchanged
                ? now : firstRequestNanos.load(ordering: .relaxed)
        }
        let elapsed = Double(now - first) / 1e9
        return elapsed >= from && elapsed < from + faults.ratesForSeconds
    }

    func refusesConnectionsNow() -> Bool {
        isWithinRefusalWindow(from: faults.refuseConnectionsFromSecond, length: faults.refuseConnectionsForSeconds, startedAt: startedAt)
    }

    func register(_ id: Int, channel: any Channel, connection: HTTP2Connection) {
        let entry = Entry(channel: channel, connection: NIOLoopBound(connection, eventLoop: channel.eventLoop))
        connections.withLock { $0[id] = entry }
    }

    func unregister(_ id: Int) { _ = connections.withLock { $0.removeValue(forKey: id) } }

    func goAwayAll() {
        for entry in connections.withLock({ Array($0.values) }) {
            entry.channel.eventLoop.execute { entry.connection.value.goAway() }
        }
    }

    func closeAllConnections() {
        for entry in connections.withLock({ Array($0.values) }) { entry.channel.close(promise: nil) }
    }
}
