import APNsProtocol
import NIOCore
import NIOHPACK
import NIOHTTP2

/// One request stream: collects the header block and the body (bounded), hands them to the
/// connection, writes the answer (after the scripted delay, if any).
final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    /// More than any push type may carry (5120 for voip): a longer body is answered 413 from the
    /// bytes kept, and the rest is read and dropped, so a huge body costs no memory.
    static let bodyLimit = APNsPushType.voip.maxPayloadBytes + 1

    private let connection: HTTP2Connection
    private let streamID: Int
    private var headers: HPACKHeaders?
    private var payload: [UInt8] = []
    private var answered = false

    init(connection: HTTP2Connection, streamID: Int) {
        self.connection = connection
        self.streamID = streamID
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        switch unwrapInboundIn(data) {
        case .headers(let h):
            // The first header block is the request; a later one is trailers, which APNs does not use.
            if headers == nil { headers = h.headers }
            if h.endStream { answer(context: context) }
        case .data(let d):
            if case .byteBuffer(let b) = d.data, payload.count < Self.bodyLimit {
                let take = min(b.readableBytes, Self.bodyLimit - payload.count)
                b.withUnsafeReadableBytes { payload.append(contentsOf: $0.prefix(take)) }
            }
            if d.endStream { answer(context: context) }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.streamEnded()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream error (bad header block, flow-control violation …): NIO resets the stream.
        context.close(promise: nil)
    }

    private func answer(context: ChannelHandlerContext) {
        answered = true
        guard let headers else {
            context.close(promise: nil)
            return
        }
        let outcome = connection.process(headers: headers, payload: payload, streamID: streamID)
        payload = []
        let faults = connection.core.faults
        let delay = faults.responseDelayMillis + connection.core.drawMillis(upTo: faults.responseDelayMaxMillis)
        if delay > 0 {
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .milliseconds(Int64(delay))) {
                let (handler, context) = loopBound.value
                handler.write(outcome, context: context)
            }
        } else {
            write(outcome, context: context)
        }
    }

    private func write(_ outcome: HTTP2Connection.Outcome, context: ChannelHandlerContext) {
        switch outcome {
        case .refuse:
            context.writeAndFlush(wrapOutboundOut(.rstStream(.refusedStream)), promise: nil)
        case .accept(let apnsID, let after):
            if after == .drop {
                connection.drop()
                return
            }
            let head = HPACKHeaders([(":status", "200"), (APNsHeader.id, apnsID)])
            context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: head, endStream: true))), promise: nil)
            if after == .goAway { connection.goAway() }
        case .reject(let reason, let apnsID, let timestamp):
            let body = APNsErrorBody(reason: reason, timestamp: timestamp)
            var buffer = context.channel.allocator.buffer(capacity: 64)
            body.encode(into: &buffer)
            let head = HPACKHeaders([
                (":status", String(reason.status)), (APNsHeader.id, apnsID), ("content-type", "application/json"),
                ("content-length", String(buffer.readableBytes)),
            ])
            context.write(wrapOutboundOut(.headers(.init(headers: head, endStream: false))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        }
    }
}
