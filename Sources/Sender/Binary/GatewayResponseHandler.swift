import APNsProtocol
import NIOCore
import NIOTLS

/// Reads what a gateway sends on a notification connection: nothing, or one error-response packet
/// before it closes. Hands both to the shard, tagged with the connection's epoch so that late events of
/// an old connection are ignored.
final class GatewayResponseHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let shard: Shard
    private let epoch: Int
    private var decoder = ErrorResponseDecoder()

    init(shard: Shard, epoch: Int) {
        self.shard = shard
        self.epoch = epoch
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        buffer.withUnsafeReadableBytes { decoder.append($0) }
        do {
            while let response = try decoder.next() {
                shard.errorResponse(response, epoch: epoch)
            }
        } catch {
            shard.protocolViolation("\(error)", epoch: epoch)
            context.close(promise: nil)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            shard.handshakeCompleted(epoch: epoch)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { shard.writable(epoch: epoch) }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        shard.connectionClosed(epoch: epoch)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        shard.connectionError(error, epoch: epoch)
        context.close(promise: nil)
    }
}
