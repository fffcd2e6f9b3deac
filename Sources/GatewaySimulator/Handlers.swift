import APNsProtocol
import APNsTransport
import NIOCore
import NIOSSL
import NIOTLS

/// Feedback service connection: once TLS is up, stream the app's tuples and close; the list is
/// cleared once delivered (spec 003: "The feedback service's list is cleared after you read it").
final class FeedbackServiceHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let core: SimulatorCore

    init(core: SimulatorCore) { self.core = core }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let tls = event as? TLSUserEvent, case .handshakeCompleted = tls else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
        guard let app = (try? certificate?.toDERBytes()).flatMap({ CertificateTopic.topic(fromDER: $0) }) else {
            context.close(promise: nil)
            return
        }
        let tuples = core.takeFeedback(app: app)
        core.count {
            $0.feedbackConnections += 1
            $0.feedbackTuplesServed += tuples.count
        }
        var out = context.channel.allocator.buffer(capacity: tuples.count * 38)
        for t in tuples { FrameEncoder.writeFeedbackTuple(t, into: &out) }
        let core = self.core
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(out)).whenComplete { result in
            if case .failure = result {
                core.restoreFeedback(app: app, tuples)
                core.count { $0.feedbackTuplesServed -= tuples.count }
            }
            loopBound.value.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}  // the client has nothing to say

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOSSLError || error is BoringSSLError { core.count { $0.handshakeFailures += 1 } }
        context.close(promise: nil)
    }
}

/// Slow reader: delays each read the channel asks for, so with a small fixed receive buffer the
/// connection takes at most N bytes per interval and the sender's socket fills up (back-pressure).
package final class SlowReadHandler: ChannelOutboundHandler {
    package typealias OutboundIn = Any

    private let interval: TimeAmount
    private var readPending = false

    package init(interval: TimeAmount) { self.interval = interval }

    package func read(context: ChannelHandlerContext) {
        guard !readPending else { return }
        readPending = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: interval) {
            let (handler, context) = loopBound.value
            handler.readPending = false
            context.read()
        }
    }
}

/// Handshake delay: holds a new connection's first bytes (the ClientHello) for a while before letting
/// the TLS handler see them.
package final class HoldFirstBytesHandler: ChannelInboundHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer

    private let delay: TimeAmount
    private var held: [NIOAny] = []
    private var released = false

    package init(delay: TimeAmount) { self.delay = delay }

    package func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: delay) {
            let (handler, context) = loopBound.value
            handler.released = true
            for data in handler.held { context.fireChannelRead(data) }
            handler.held.removeAll()
            context.fireChannelReadComplete()
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if released { context.fireChannelRead(data) } else { held.append(data) }
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        if released { context.fireChannelReadComplete() }
    }
}
