import APNsProtocol
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A binary APNs gateway and feedback service on loopback, faithful to Apple's "The Binary Interface
/// and Notification Format" and "The Feedback Service", and scriptable with faults. Operators run it with `apns-pipeline gateway-sim`; tests start it in-process.
///
/// Gateway: TLS with a required client certificate from the configured CA; the app topic comes from
/// the certificate (see `CertificateTopic`); commands 0, 1, 2 in any fragmentation; the first malformed
/// frame gets its error response and the connection is closed, nothing after it recorded.
/// Feedback: on connect, the app's (time, token) tuples are streamed, the connection closed, the list cleared.
public final class GatewaySimulator: Sendable {
    public let configuration: SimulatorConfiguration
    let core: SimulatorCore
    private let group: MultiThreadedEventLoopGroup
    private let channels: Mutex<[any Channel]> = Mutex([])
    private let logger: Logger

    /// The ports actually bound (useful when the configuration asked for port 0).
    public var ports: (gateway: Int, feedback: Int) {
        channels.withLock { ($0[0].localAddress?.port ?? 0, $0[1].localAddress?.port ?? 0) }
    }

    public init(configuration: SimulatorConfiguration, logger: Logger = Logger(label: "apns.gateway-sim")) throws {
        self.configuration = configuration
        self.logger = logger
        core = try SimulatorCore(configuration: configuration, logger: logger)
        group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, configuration.threads))
    }

    /// Binds both listeners. Throws when the certificates cannot be read or a port is taken.
    public func start() async throws {
        let tls = configuration.tls
        var serverTLS = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(tls.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: tls.privateKeyPath, format: .pem)))
        // Client certificates are required and must chain to the configured CA ("connection trust").
        serverTLS.certificateVerification = .noHostnameVerification
        serverTLS.trustRoots = .file(tls.clientCAPath)
        // As Apple's servers: TLS 1.2 or later (swift-nio-ssl allows 1.0 by default; RFC 8996).
        serverTLS.minimumTLSVersion = .tlsv12
        let sslContext = try NIOSSLContext(configuration: serverTLS)

        let gateway = try await bootstrap(sslContext: sslContext, role: .gateway)
            .bind(host: configuration.host, port: configuration.gatewayPort).get()
        let feedback = try await bootstrap(sslContext: sslContext, role: .feedback)
            .bind(host: configuration.host, port: configuration.feedbackPort).get()
        channels.withLock { $0 = [gateway, feedback] }
        logger.info(
            "gateway simulator listening",
            metadata: [
                "gateway": "\(configuration.host):\(gateway.localAddress?.port ?? 0)",
                "feedback": "\(configuration.host):\(feedback.localAddress?.port ?? 0)",
            ])
    }

    private enum Role { case gateway, feedback }

    private func bootstrap(sslContext: NIOSSLContext, role: Role) -> ServerBootstrap {
        let core = self.core
        let faults = configuration.faults
        return ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 512)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if role == .gateway && core.refusesConnectionsNow() {
                        core.count { $0.refusedConnections += 1 }
                        channel.close(promise: nil)
                        return
                    }
                    let sync = channel.pipeline.syncOperations
                    if role == .gateway, let bytes = faults.slowReadBytes {
                        _ = channel.setOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: bytes))
                        _ = channel.setOption(.maxMessagesPerRead, value: 1)
                        try sync.addHandler(SlowReadHandler(interval: .milliseconds(Int64(faults.slowReadIntervalMillis))))
                    }
                    if faults.handshakeDelayMillis > 0 {
                        try sync.addHandler(HoldFirstBytesHandler(delay: .milliseconds(Int64(faults.handshakeDelayMillis))))
                    }
                    try sync.addHandler(NIOSSLServerHandler(context: sslContext))
                    switch role {
                    case .gateway: try sync.addHandler(GatewayConnectionHandler(core: core, channel: channel))
                    case .feedback: try sync.addHandler(FeedbackServiceHandler(core: core))
                    }
                }
            }
    }

    /// Writes status 10 (shutdown) naming the last processed notification on every open gateway
    /// connection, and closes them: what a maintenance restart of Apple's gateway looks like.
    public func shutdownConnections() {
        core.shutdownAllConnections()
    }

    /// Queues a feedback tuple for `app`, as if APNs had found the app uninstalled at `time`.
    public func queueFeedback(app: String, token: DeviceToken, time: UInt32) {
        core.queueFeedback(app: app, token: token, time: time)
    }

    /// The feedback list of `app` as it stands (not cleared).
    public func pendingFeedback(app: String) -> [FeedbackTuple] { core.pendingFeedback(app: app) }

    /// Accepted notifications (with `keepRecordsInMemory`), after flushing what is pending.
    public var records: [AcceptedNotification] { core.recorder.records }

    /// Flushes the records file.
    public func flushRecords() { core.recorder.flush() }

    public var totals: SimulatorTotals { core.totals.withLock { $0 } }

    /// Stops listening, closes every connection, flushes records.
    public func stop() async throws {
        let listeners = channels.withLock { $0 }
        for c in listeners { try? await c.close() }
        core.closeAllConnections()
        try await group.shutdownGracefully()
        core.recorder.close()
    }
}

/// Counts a test or an operator can read: on exit, on SIGUSR1, or through `GatewaySimulator.totals`.
public struct SimulatorTotals: Sendable, Equatable, Encodable {
    public var accepted = 0
    /// Error responses written, by status code (status 10 included).
    public var rejectedByStatus: [UInt8: Int] = [:]
    /// Command-0 frames refused by closing without a response.
    public var silentlyClosed = 0
    public var abruptDrops = 0
    public var connections = 0
    public var refusedConnections = 0
    /// TLS errors before the handshake completed (no certificate, an untrusted one…).
    public var handshakeFailures = 0
    /// Clients that closed without close_notify after a good handshake (e.g. a killed process).
    public var uncleanCloses = 0
    public var feedbackConnections = 0
    public var feedbackTuplesServed = 0

    enum CodingKeys: String, CodingKey {
        case accepted
        case rejectedByStatus = "error_responses_by_status"
        case silentlyClosed = "silently_closed"
        case abruptDrops = "abrupt_drops"
        case connections
        case refusedConnections = "refused_connections"
        case handshakeFailures = "handshake_failures"
        case uncleanCloses = "unclean_closes"
        case feedbackConnections = "feedback_connections"
        case feedbackTuplesServed = "feedback_tuples_served"
    }

    /// Status codes as JSON object keys (`{"8": 12}`), not Swift's default array of pairs.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(accepted, forKey: .accepted)
        try c.encode(
            Dictionary(uniqueKeysWithValues: rejectedByStatus.map { (String($0.key), $0.value) }), forKey: .rejectedByStatus)
        try c.encode(silentlyClosed, forKey: .silentlyClosed)
        try c.encode(abruptDrops, forKey: .abruptDrops)
        try c.encode(connections, forKey: .connections)
        try c.encode(refusedConnections, forKey: .refusedConnections)
        try c.encode(handshakeFailures, forKey: .handshakeFailures)
        try c.encode(uncleanCloses, forKey: .uncleanCloses)
        try c.encode(feedbackConnections, forKey: .feedbackConnections)
        try c.encode(feedbackTuplesServed, forKey: .feedbackTuplesServed)
    }
}

/// State shared by all connections of one simulator.
final class SimulatorCore: Sendable {
    let limits: PayloadLimits
    let faults: FaultScript
    let invalidTokens: Set<DeviceToken>
    let uninstalledTokens: Set<DeviceToken>
    let recorder: RecordWriter<AcceptedNotification>
    let totals = Mutex(SimulatorTotals())
    let logger: Logger
    private let startedAt = ContinuousClock.now
    private let arrivals = Atomic<Int>(0)
    private let acceptedCount = Atomic<Int>(0)
    private let connectionNumbers = Atomic<Int>(0)
    private let random: Mutex<SplitMix64>
    private let feedback = Mutex<[String: FeedbackList]>([:])
    private let connections = Mutex<[Int: ConnectionEntry]>([:])

    struct ConnectionEntry: Sendable {
        var channel: any Channel
        var handler: NIOLoopBound<GatewayConnectionHandler>
    }

    init(configuration: SimulatorConfiguration, logger: Logger) throws {
        limits = configuration.limits
        faults = configuration.faults
        self.logger = logger
        func tokens(_ set: Set<String>, _ name: String) throws -> Set<DeviceToken> {
            var out = Set<DeviceToken>()
            for hex in set {
                do { out.insert(try DeviceToken(hex: hex)) } catch {
                    throw SimulatorError.faultScript("\(name): \(hex): \(error)")
                }
            }
            return out
        }
        invalidTokens = try tokens(configuration.faults.invalidTokens, "invalid_tokens")
        uninstalledTokens = try tokens(configuration.faults.uninstalledTokens, "uninstalled_tokens")
        random = Mutex(SplitMix64(seed: configuration.faults.seed))
        recorder = try RecordWriter(
            path: configuration.recordsPath, keepInMemory: configuration.keepRecordsInMemory, synchronous: configuration.recordsSynchronous)
    }

    func count(_ update: (inout SimulatorTotals) -> Void) { totals.withLock { update(&$0) } }

    func nextConnectionNumber() -> Int { connectionNumbers.add(1, ordering: .relaxed).newValue }

    /// Position of the next notification in arrival order over the whole simulator, from 1.
    func nextArrival() -> Int { arrivals.add(1, ordering: .relaxed).newValue }

    /// Number of the notification just accepted, over the whole simulator, from 1.
    func nextAccepted() -> Int { acceptedCount.add(1, ordering: .relaxed).newValue }

    func drawProcessingError() -> Bool {
        guard faults.processingErrorRate > 0 else { return false }
        return random.withLock { $0.nextUnit() } < faults.processingErrorRate
    }

    func refusesConnectionsNow() -> Bool {
        isWithinRefusalWindow(from: faults.refuseConnectionsFromSecond, length: faults.refuseConnectionsForSeconds, startedAt: startedAt)
    }

    // MARK: connections

    func register(_ id: Int, channel: any Channel, handler: GatewayConnectionHandler) {
        let entry = ConnectionEntry(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
        connections.withLock { $0[id] = entry }
    }

    func unregister(_ id: Int) { _ = connections.withLock { $0.removeValue(forKey: id) } }

    func shutdownAllConnections() {
        for entry in connections.withLock({ Array($0.values) }) {
            entry.channel.eventLoop.execute { entry.handler.value.shutdown() }
        }
    }

    func closeAllConnections() {
        for entry in connections.withLock({ Array($0.values) }) { entry.channel.close(promise: nil) }
    }

    // MARK: feedback

    struct FeedbackList: Sendable {
        var order: [DeviceToken] = []
        var times: [DeviceToken: UInt32] = [:]
    }

    func queueFeedback(app: String, token: DeviceToken, time: UInt32) {
        feedback.withLock { lists in
            var list = lists[app, default: FeedbackList()]
            if list.times.updateValue(time, forKey: token) == nil { list.order.append(token) }
            lists[app] = list
        }
    }

    func pendingFeedback(app: String) -> [FeedbackTuple] {
        feedback.withLock { lists in
            guard let list = lists[app] else { return [] }
            return list.order.map { FeedbackTuple(timestamp: list.times[$0]!, token: $0) }
        }
    }

    /// Takes the app's list away; `restoreFeedback` puts it back if it could not be delivered.
    func takeFeedback(app: String) -> [FeedbackTuple] {
        let tuples = pendingFeedback(app: app)
        feedback.withLock { $0[app] = nil }
        return tuples
    }

    func restoreFeedback(app: String, _ tuples: [FeedbackTuple]) {
        for t in tuples { if let token = t.deviceToken { queueFeedback(app: app, token: token, time: t.timestamp) } }
    }
}

/// A small, fast, seedable generator (SplitMix64): fault runs must be repeatable from their seed (and the
/// state machines' tests draw their back-off jitter from it).
package struct SplitMix64: RandomNumberGenerator, Sendable {
    var state: UInt64
    package init(seed: UInt64) { state = seed }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    package mutating func nextUnit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
