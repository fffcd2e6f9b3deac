import NIOCore
import NIOPosix
import NIOSSL

/// How every TLS connection to an APNs host is opened, whatever it then carries: the provider API's
/// connections (`HTTP2Connection`, our own frame codec) and channel management's one-shot connection
/// (`ChannelManagementClient`, NIO's stream multiplexer). One place, so what applies to one applies to
/// the other: the host resolved at each connect, the connect timeout, TCP_NODELAY, TLS with the
/// server name and the app's trust roots (a pipeline file may point an app at a simulator with its own
/// CA), and whatever is added here later (an HTTPS proxy goes here, not into each caller).
struct APNsConnector: Sendable {
    /// TLS 1.2+, ALPN `h2` (`HTTP2Authentication.makeClientContext`).
    var sslContext: NIOSSLContext
    var connectTimeout: Double
    var resolver: any HostResolver

    /// Resolves `host`, lets `choose` pick one of its addresses, connects, adds TLS for `serverHostname`
    /// and then the caller's handlers (`handlers` runs on the channel's event loop, in the initializer).
    /// The future fails with the resolver's, the connect's or the initializer's error.
    func connect(
        to host: GatewayAddress, serverHostname: String, on eventLoop: any EventLoop,
        choose: @escaping @Sendable ([SocketAddress]) -> SocketAddress?,
        handlers: @escaping @Sendable (any Channel) throws -> Void
    ) -> EventLoopFuture<any Channel> {
        let sslContext = self.sslContext
        let timeout = TimeAmount.nanoseconds(Int64(connectTimeout * 1e9))
        return resolver.resolve(host: host.host, port: host.port, on: eventLoop).flatMap { addresses -> EventLoopFuture<any Channel> in
            guard let address = choose(addresses) else {
                return eventLoop.makeFailedFuture(SystemHostResolver.Failure(host: host.host, message: "no address"))
            }
            return ClientBootstrap(group: eventLoop)
                .connectTimeout(timeout)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                        try handlers(channel)
                    }
                }
                .connect(to: address)
        }
    }
}
