import APNsProtocol
import APNsTransport
import Feedback
import Foundation
import GatewaySimulator
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Redis
import TestSupport
import Testing

extension TestCertificates {
    static func credentials(_ app: String) -> ProviderCredentials { .test(app: app, in: directory) }
}

let shop = "com.example.shop"
let news = "com.example.news"

/// Starts a simulator on free ports, runs `body`, stops it.
func withSimulator(_ body: (GatewaySimulator) async throws -> Void) async throws {
    let config = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
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

/// A throw-away redis-server and a store on it, for `body`.
func withStore(prefix: String = "apns", _ body: (PipelineStore, RedisServer) async throws -> Void) async throws {
    let server = try await RedisServer()
    defer { server.stop() }
    let client = try server.client()
    let store = PipelineStore(client: client, configuration: PipelineStoreConfiguration(keyPrefix: prefix))
    try await body(store, server)
    await client.close()
}

func feedbackApp(_ app: String, port: Int, host: String = "127.0.0.1", serverHostname: String? = "localhost") -> FeedbackApp {
    FeedbackApp(
        credentials: TestCertificates.credentials(app), endpoint: FeedbackEndpoint(host: host, port: port, serverHostname: serverHostname))
}

func quietLogger(_ label: String = "apns.feedback.test") -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = .error
    return logger
}

func token(_ n: Int, fill: UInt8 = 0xA0) -> DeviceToken {
    var bytes = [UInt8](repeating: fill, count: 32)
    bytes[28] = UInt8(truncatingIfNeeded: n >> 24)
    bytes[29] = UInt8(truncatingIfNeeded: n >> 16)
    bytes[30] = UInt8(truncatingIfNeeded: n >> 8)
    bytes[31] = UInt8(truncatingIfNeeded: n)
    return try! DeviceToken(bytes: bytes)
}

extension RedisConnection {
    /// HGETALL as a dictionary of strings.
    func hash(_ key: String) async throws -> [String: String] {
        let elements = try await send(RedisCommand("HGETALL", key)).array ?? []
        var result: [String: String] = [:]
        for index in stride(from: 0, to: elements.count, by: 2) {
            result[elements[index].string!] = elements[index + 1].string!
        }
        return result
    }

    /// Every suppression of `app`, over all its token tags (`{<p>:<app>:<n>}:suppressed`).
    func suppressions(_ app: String, prefix: String = "apns") async throws -> [String: String] {
        let keys = RedisKeys(prefix: prefix)
        var all: [String: String] = [:]
        for tag in keys.tokenTags(app: app) { all.merge(try await hash(keys.suppressed(tag: tag))) { a, _ in a } }
        return all
    }

    func exists(_ key: String) async throws -> Bool {
        try await send(RedisCommand("EXISTS", key)).integer == 1
    }
}

/// Waits until `condition` holds, failing after 300 s (a deadline against hangs, not a performance bound).
func eventually(
    _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async throws -> Bool
) async throws {
    // Generous: only a guard against a hang (the whole suite runs in parallel on 2 cores).
    let deadline = ContinuousClock.now + .seconds(300)
    while !(try await condition()) {
        if ContinuousClock.now > deadline {
            Issue.record("timed out waiting for: \(what)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

// MARK: - A scripted feedback service

/// A TLS feedback service that sends exactly the bytes it is given, then ends the connection either
/// cleanly (close_notify) or abruptly (TCP close with no TLS close, as a crash or a cut cable would):
/// for malformed tuples, half tuples and broken connections the simulator cannot produce.
final class ScriptedFeedbackService: Sendable {
    enum Ending: Sendable { case clean, abrupt, never }

    let channel: any Channel
    let group: MultiThreadedEventLoopGroup
    var port: Int { channel.localAddress?.port ?? 0 }

    init(bytes: [UInt8], ending: Ending = .clean) async throws {
        let dir = TestCertificates.directory
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile("\(dir)/server.pem").map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: "\(dir)/server.key", format: .pem)))
        tls.certificateVerification = .noHostnameVerification
        tls.trustRoots = .file("\(dir)/ca.pem")
        let context = try NIOSSLContext(configuration: tls)
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(RawCloser())
                    try sync.addHandler(NIOSSLServerHandler(context: context))
                    try sync.addHandler(Sender(bytes: bytes, ending: ending))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func stop() async throws {
        try? await channel.close()
        try await group.shutdownGracefully()
    }

    /// Head of the pipeline: closing from here bypasses the TLS handler, so no close_notify is sent.
    final class RawCloser: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
    }

    final class Sender: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let bytes: [UInt8]
        let ending: Ending
        init(bytes: [UInt8], ending: Ending) {
            self.bytes = bytes
            self.ending = ending
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            guard let tls = event as? TLSUserEvent, case .handshakeCompleted = tls else {
                context.fireUserInboundEventTriggered(event)
                return
            }
            let ending = self.ending
            let pipeline = NIOLoopBound(context.pipeline, eventLoop: context.eventLoop)
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: bytes))).whenComplete { _ in
                switch ending {
                case .clean: channel.close(promise: nil)
                case .abrupt: try? pipeline.value.syncOperations.context(handlerType: RawCloser.self).close(promise: nil)
                case .never: break
                }
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }
}

/// Wire bytes of one tuple with any token length.
func tupleBytes(time: UInt32, token: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    out += [UInt8(time >> 24), UInt8(time >> 16 & 0xFF), UInt8(time >> 8 & 0xFF), UInt8(time & 0xFF)]
    out += [UInt8(token.count >> 8), UInt8(token.count & 0xFF)]
    return out + token
}
