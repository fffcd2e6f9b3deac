import NIOCore
import NIOTLS

/// The thin NIO end of one HTTP/2 connection, right after TLS: feeds what is read to its
/// `HTTP2ClientFrameCodec` and hands the events to its `HTTP2Connection`, tagged with the
/// connection's epoch so a late event from an old channel is ignored; writes what the codec
/// produced, one buffer per flush. Complete answers are handed over together, once per read burst
/// (or before any other event, so the connection sees everything in the order it arrived): one
/// state-machine step and one write of new streams per burst rather than per answer.
final class HTTP2ClientHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let connection: HTTP2Connection
    private let epoch: Int
    private var codec: HTTP2ClientFrameCodec
    private var context: ChannelHandlerContext?
    private var events: [HTTP2ClientFrameCodec.Event] = []
    /// Complete answers of this read burst not yet handed to the connection.
    private var complete: [HTTP2Connection.Machine.Answer] = []
    private var handshakeSeen = false

    init(connection: HTTP2Connection, epoch: Int, allocator: ByteBufferAllocator) {
        self.connection = connection
        self.epoch = epoch
        self.codec = HTTP2ClientFrameCodec(allocator: allocator)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    // MARK: from the connection

    /// Encodes one request into this flush's buffer; returns the bytes it added.
    func write(streamID: UInt32, job: HTTP2Job, authority: String, authorization: String?) -> Int {
        let before = codec.pendingOutboundBytes
        codec.writeRequest(
            streamID: streamID, head: job.head, authority: authority, authorization: authorization,
            payload: job.notification.payload)
        return codec.pendingOutboundBytes - before
    }

    /// RST_STREAM CANCEL for a stream given up on (it leaves with the next flush).
    func cancel(streamID: UInt32) {
        codec.writeReset(streamID: streamID, code: .cancel)
    }

    func ping() {
        codec.writePing()
        flush()
    }

    /// Everything written since the last flush, as one write: TLS seals it as a few 16 KiB records.
    func flush() {
        guard let context, let bytes = codec.takeOutbound() else { return }
        context.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
    }

    // MARK: from the channel

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if !handshakeSeen, let tls = event as? TLSUserEvent, case .handshakeCompleted(let proto) = tls {
            handshakeSeen = true
            if proto == "h2" {
                codec.writePreface()
                flush()
                connection.channelReady(epoch: epoch, handler: self)
            } else {
                connection.protocolMismatch(epoch: epoch, negotiated: proto)
                context.close(promise: nil)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        codec.receive(unwrapInboundIn(data), into: &events)
        for event in events {
            switch event {
            case .answer(let answer):
                complete.append(answer)
            case .reset(let streamID, let code):
                handOverAnswers()
                connection.reset(epoch: epoch, streamID: streamID, code: code)
            case .goAway(let lastStreamID, let code, let debug):
                // The connection learns of it first (no new streams; the streams above
                // `lastStreamID` are resent, and this burst's answers are all at or below it), then the answers.
                connection.goAway(epoch: epoch, lastStreamID: lastStreamID, code: code, debug: debug)
                handOverAnswers()
            case .settings(let maxConcurrentStreams):
                connection.settings(epoch: epoch, maxConcurrentStreams: maxConcurrentStreams)
                handOverAnswers()
            case .pingAck:
                handOverAnswers()
                connection.pingAnswered(epoch: epoch)
            }
        }
        events.removeAll(keepingCapacity: true)
        if let error = codec.failed {
            // GOAWAY with the error is in the codec's buffer: it leaves before the close.
            handOverAnswers()
            flush()
            connection.channelError(epoch: epoch, error: error)
            context.close(promise: nil)
        }
    }

    private func handOverAnswers(closing: Bool = false) {
        guard !complete.isEmpty else { return }
        let batch = complete
        complete.removeAll(keepingCapacity: true)
        connection.answers(epoch: epoch, batch, closing: closing)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        handOverAnswers()
        codec.returnReceivedWindow()
        // Writes the streams this burst freed (and flushes them with ours: SETTINGS and PING acks,
        // WINDOW_UPDATE, DATA a window update released).
        connection.readComplete(epoch: epoch)
        flush()
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        // Answers read before the close settle their requests; only the rest are unanswered. Nothing
        // new is written on the closed channel (a request written there would count as unanswered).
        handOverAnswers(closing: true)
        connection.channelClosed(epoch: epoch)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        connection.channelError(epoch: epoch, error: error)
        context.close(promise: nil)
    }
}
