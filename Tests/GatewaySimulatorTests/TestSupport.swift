import APNsProtocol
import Foundation
import GatewaySimulator
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import TestSupport
import Testing

let shop = "com.example.shop"
let news = "com.example.news"

/// A provider-side TLS connection for tests: writes raw bytes, collects everything the server sends
/// until it closes.
final class RawTLSClient: Sendable {
    let channel: any Channel
    private let collector: NIOLoopBound<Collector>
    private let closed: EventLoopFuture<[UInt8]>

    static let group = MultiThreadedEventLoopGroup.singleton

    /// `certificate` nil connects without a client certificate.
    static func connect(port: Int, certificate: String?, caName: String = "ca") async throws -> RawTLSClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(TestCertificates.pem(caName))
        if let certificate {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(TestCertificates.pem(certificate)).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: TestCertificates.key(certificate), format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        // The collector is kept when the pipeline is built: a server that refuses the handshake may
        // have closed the channel (and emptied its pipeline) before `connect` returns, so looking the
        // handler up afterwards would race with that.
        let built = Built()
        let channel = try await ClientBootstrap(group: group)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let collector = Collector(promise: channel.eventLoop.makePromise())
                    try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    try channel.pipeline.syncOperations.addHandler(collector)
                    built.value.withLock { $0 = (NIOLoopBound(collector, eventLoop: channel.eventLoop), collector.promise.futureResult) }
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        guard let (collector, closed) = built.value.withLock({ $0 }) else { throw ChannelError.inappropriateOperationForState }
        return RawTLSClient(channel: channel, collector: collector, closed: closed)
    }

    private final class Built: Sendable {
        let value = Mutex<(collector: NIOLoopBound<Collector>, closed: EventLoopFuture<[UInt8]>)?>(nil)
    }

    private init(channel: any Channel, collector: NIOLoopBound<Collector>, closed: EventLoopFuture<[UInt8]>) {
        self.channel = channel
        self.collector = collector
        self.closed = closed
    }

    func send(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(channel.allocator.buffer(bytes: bytes)).get()
    }

    /// Sends in pieces of `piece` bytes, each flushed on its own: TLS records split the stream there.
    func send(_ bytes: [UInt8], inPiecesOf piece: Int) async throws {
        var i = 0
        while i < bytes.count {
            let end = min(i + piece, bytes.count)
            try await channel.writeAndFlush(channel.allocator.buffer(bytes: bytes[i..<end])).get()
            i = end
        }
    }

    /// Everything the server sent, once it has closed the connection (or `timeout` passed: then the
    /// connection is closed by us and what arrived is returned).
    func receiveUntilClosed(timeout: Duration = .seconds(300)) async throws -> [UInt8] {
        let channel = self.channel
        let timer = Task {
            try await Task.sleep(for: timeout)
            try await channel.close()
        }
        defer { timer.cancel() }
        return try await closed.get()
    }

    var handshakeError: (any Error)? {
        get async { try? await channel.eventLoop.submit { [collector] in collector.value.error }.get() }
    }

    func close() async { try? await channel.close() }

    /// Closes the TCP connection under TLS, without close_notify (what a killed process does): the close
    /// is issued by a handler nearer the socket than the TLS handler, so TLS never sees it.
    func closeWithoutCloseNotify() async throws {
        let channel = self.channel
        try await channel.eventLoop.submit {
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(SocketCloser(), position: .first)
            try sync.context(handlerType: SocketCloser.self).close(promise: nil)
        }.get()
    }

    private final class SocketCloser: ChannelOutboundHandler {
        typealias OutboundIn = Any
    }

    final class Collector: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        var received: [UInt8] = []
        var error: (any Error)?
        let promise: EventLoopPromise<[UInt8]>

        init(promise: EventLoopPromise<[UInt8]>) { self.promise = promise }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            received.append(contentsOf: unwrapInboundIn(data).readableBytesView)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            self.error = self.error ?? error
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            promise.succeed(received)
        }
    }
}

/// Starts a simulator on free ports with in-memory records, runs `body`, stops it.
func withSimulator(
    faults: FaultScript = FaultScript(), limits: PayloadLimits = .default,
    _ body: (GatewaySimulator) async throws -> Void
) async throws {
    var config = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
    config.faults = faults
    config.limits = limits
    config.keepRecordsInMemory = true
    let simulator = try GatewaySimulator(configuration: config)
    try await simulator.start()
    do {
        try await body(simulator)
    } catch {
        try await simulator.stop()
        throw error
    }
    try await simulator.stop()
}

/// Waits until `condition` holds (the simulator processes on its own threads), failing after 300 s (a
/// guard against a hang, not a timing assertion).
func eventually(
    _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () -> Bool
) async throws {
    let deadline = ContinuousClock.now + .seconds(300)
    while !condition() {
        if ContinuousClock.now > deadline {
            Issue.record("timed out waiting for: \(what)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(5))
    }
}

func token(_ n: Int) -> DeviceToken {
    var bytes = [UInt8](repeating: 0xA0, count: 32)
    bytes[28] = UInt8(truncatingIfNeeded: n >> 24)
    bytes[29] = UInt8(truncatingIfNeeded: n >> 16)
    bytes[30] = UInt8(truncatingIfNeeded: n >> 8)
    bytes[31] = UInt8(truncatingIfNeeded: n)
    return try! DeviceToken(bytes: bytes)
}

func frame(_ n: Int, token t: DeviceToken? = nil, job: String? = nil) -> [UInt8] {
    let payload = Array(#"{"aps":{"alert":"n\#(n)"},"jid":"\#(job ?? "job-\(n)")"}"#.utf8)
    var out: [UInt8] = []
    payload.withUnsafeBytes {
        FrameEncoder.writeCommand2(
            token: t ?? token(n), payload: $0, identifier: UInt32(n), expiry: 0, priority: .immediate, into: &out)
    }
    return out
}
