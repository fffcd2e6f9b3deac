import NIOCore
import NIOPosix
import NIOSSL

/// How every TLS connection to an APNs host is opened, whatever it then carries: the provider API's
/// connections (`HTTP2Connection`, our own frame codec) and channel management's one-shot connection
/// (`ChannelManagementClient`, NIO's stream multiplexer). One place, so what applies to one applies to
/// the other: the host resolved at each connect, the connect timeout, TCP_NODELAY, TLS with the
/// server name and the app's trust roots (a pipeline file may point an app at a simulator with its own
/// CA), and the HTTPS proxy (`http2.proxy`, HTTP CONNECT) when one applies to the host.
struct APNsConnector: Sendable {
    /// TLS 1.2+, ALPN `h2` (`HTTP2Authentication.makeClientContext`).
    var sslContext: NIOSSLContext
    var connectTimeout: TimeAmount
    var resolver: any HostResolver
    /// The HTTPS proxy the host is reached through (nil: directly, or the host is in NO_PROXY).
    var proxy: HTTPSProxy? = nil

    /// Resolves `host`, lets `choose` pick one of its addresses, connects, adds TLS for `serverHostname`
    /// and then the caller's handlers (`handlers` runs on the channel's event loop, in the initializer).
    /// The future fails with the resolver's, the connect's or the initializer's error.
    func connect(
        to host: GatewayAddress, serverHostname: String, on eventLoop: any EventLoop,
        choose: @escaping @Sendable ([SocketAddress]) -> SocketAddress?,
        handlers: @escaping @Sendable (any Channel) throws -> Void
    ) -> EventLoopFuture<any Channel> {
        let sslContext = self.sslContext
        let timeout = connectTimeout
        if let proxy {
            // Through a proxy, the proxy resolves Apple's name: there is no spread over Apple's addresses
            // (nor a move to the next one after a failure) on this side. A refusal (403, 407), a dead
            // proxy or one that never answers fails the connect like a refused TCP connection: back-off.
            return proxy.connectTunnel(to: host.host, port: host.port, on: eventLoop, timeout: timeout) { channel in
                try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                try handlers(channel)
            }
        }
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
