import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// A TLS handshake and nothing else, with the client's protocol versions chosen: shows which TLS
/// versions a server accepts (issue 28: every server and client of the project requires TLS 1.2).
public enum TLSProbe {
    public struct Refused: Error, CustomStringConvertible {
        public var description: String
    }

    /// Completes a handshake with a client offering TLS `minimum`…`maximum` (a client certificate from
    /// `TestCertificates` when `certificate` is given), then closes. Throws when the server refuses.
    public static func handshake(
        port: Int, minimum: TLSVersion = .tlsv1, maximum: TLSVersion, certificate: String? = nil, alpn: [String] = []
    ) async throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = minimum
        tls.maximumTLSVersion = maximum
        tls.trustRoots = .file(TestCertificates.pem("ca"))
        tls.applicationProtocols = alpn
        if let certificate {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(TestCertificates.pem(certificate)).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: TestCertificates.key(certificate), format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        let group = MultiThreadedEventLoopGroup.singleton
        let done = group.next().makePromise(of: Void.self)
        let channel = try await ClientBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    try channel.pipeline.syncOperations.addHandler(Watcher(done: done))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        defer { channel.close(promise: nil) }
        try await done.futureResult.get()
    }

    private final class Watcher: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let done: EventLoopPromise<Void>
        init(done: EventLoopPromise<Void>) { self.done = done }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls { done.succeed(()) }
            context.fireUserInboundEventTriggered(event)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            done.fail(error)
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            done.fail(Refused(description: "the server closed the connection during the handshake"))
        }
    }
}
