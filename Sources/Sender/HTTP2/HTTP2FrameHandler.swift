import APNsProtocol
import NIOCore
import NIOHTTP2
import NIOTLS

/// The thin NIO end of one HTTP/2 connection: sits after `NIOHTTP2Handler` (frame level, no stream
/// channels), assembles each stream's answer from its HEADERS and DATA frames, and hands everything
/// else (SETTINGS, GOAWAY, RST_STREAM, PING acks, the TLS handshake, the close) to its
/// `HTTP2Connection`, tagged with the connection's epoch so a late event from an old channel is ignored.
/// Complete answers are handed over together, once per read burst (or before any other event, so the
/// connection sees everything in the order it arrived): one state-machine step and one write of new
/// streams per burst rather than per answer.
final class HTTP2FrameHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let connection: HTTP2Connection
    private let epoch: Int
    /// Answers being assembled: `:status` from HEADERS, the body from DATA.
    private var answers: [HTTP2StreamID: (status: Int, body: ByteBuffer?)] = [:]
    /// Complete answers of this read burst not yet handed to the connection.
    private var complete: [HTTP2Connection.Machine.Answer] = []
    /// Response bytes read since the connection window was last topped up.
    private var unacknowledgedBytes = 0
    /// The TLS handshake is done: the user events that follow are NIO-HTTP2's per-stream ones (several
    /// per request), passed on without a dynamic cast each.
    private var handshakeSeen = false

    /// The connection window is not managed by `NIOHTTP2Handler` without a stream multiplexer, so this
    /// handler returns what it reads, in steps of this size.
    static let windowTopUp = 1 << 20

    init(connection: HTTP2Connection, epoch: Int) {
        self.connection = connection
        self.epoch = epoch
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if !handshakeSeen, let tls = event as? TLSUserEvent, case .handshakeCompleted(let proto) = tls {
            handshakeSeen = true
            if proto == "h2" {
                // A large connection window from the start: answers are small, but many.
                let frame = HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: 16 << 20))
                context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
                connection.channelReady(epoch: epoch, context: context)
            } else {
                connection.protocolMismatch(epoch: epoch, negotiated: proto)
                context.close(promise: nil)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            // `:status` is validated by NIOHTTP2Handler's header checks; a value that is not a number
            // (impossible there) is read as 0 and retried as a server error.
            let status = headers.headers.first(name: ":status").flatMap { Int($0) } ?? 0
            if headers.endStream {
                answers[frame.streamID] = nil
                completed(frame.streamID, status: status, body: nil)
            } else if answers[frame.streamID] == nil {
                answers[frame.streamID] = (status, nil)
            }
            // A second HEADERS (trailers) without END_STREAM changes nothing.
        case .data(let data):
            guard case .byteBuffer(var bytes) = data.data else { break }
            unacknowledgedBytes += bytes.readableBytes
            if var answer = answers[frame.streamID] {
                // Error bodies are about 50 bytes; anything past 4 KiB is not an APNs body.
                if (answer.body?.readableBytes ?? 0) < 4096 {
                    if answer.body == nil { answer.body = bytes } else { answer.body!.writeBuffer(&bytes) }
                }
                if data.endStream {
                    answers[frame.streamID] = nil
                    completed(frame.streamID, status: answer.status, body: answer.body)
                } else {
                    answers[frame.streamID] = answer
                }
            }
        case .rstStream(let code):
            answers[frame.streamID] = nil
            handOverAnswers()
            connection.reset(epoch: epoch, streamID: frame.streamID, code: code)
        case .goAway(let lastStreamID, let code, let debug):
            // NIOHTTP2Handler has already taken the GOAWAY in: a stream opened now would be refused
            // with an error. So the connection learns of it first (no new streams; the streams above
            // `lastStreamID` are resent, and this burst's answers are all at or below it), then the answers.
            connection.goAway(epoch: epoch, lastStreamID: lastStreamID, code: code, debug: debug)
            handOverAnswers()
        case .settings(.settings(let settings)):
            let max = settings.last { $0.parameter == .maxConcurrentStreams }?.value
            // Already in force in NIOHTTP2Handler: the streams the answers free are refilled within it.
            connection.settings(epoch: epoch, maxConcurrentStreams: max)
            handOverAnswers()
        case .ping(_, ack: true):
            handOverAnswers()
            connection.pingAnswered(epoch: epoch)
        default:
            break
        }
    }

    /// A stream's answer is complete; its error body (about 50 bytes, only for non-200s) is read here.
    private func completed(_ streamID: HTTP2StreamID, status: Int, body: ByteBuffer?) {
        var reason: String?
        var timestamp: Int64?
        if status != 200, let body, body.readableBytes > 0 {
            // A body that does not decode still settles the request, by its status alone.
            if let decoded = try? APNsErrorBody(decoding: body.readableBytesView) {
                reason = decoded.reasonText
                timestamp = decoded.timestamp
            }
        }
        complete.append(.init(streamID: UInt32(Int32(streamID)), status: status, reason: reason, timestamp: timestamp))
    }

    private func handOverAnswers(closing: Bool = false) {
        guard !complete.isEmpty else { return }
        let batch = complete
        complete.removeAll(keepingCapacity: true)
        connection.answers(epoch: epoch, batch, closing: closing)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        handOverAnswers()
        if unacknowledgedBytes >= Self.windowTopUp {
            let frame = HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledgedBytes))
            unacknowledgedBytes = 0
            context.write(wrapOutboundOut(frame), promise: nil)
        }
        connection.readComplete(epoch: epoch)
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

/// Joins the bytes `NIOHTTP2Handler` writes between two flushes into one buffer before TLS. The
/// HTTP/2 handler emits every frame (and a DATA frame's header apart from its payload) as its own
/// write, and `NIOSSLHandler` seals each write as its own TLS record: three records per request, each
/// with its own encryption call and 29 bytes of overhead on both ends. Copying the ~250 bytes of a
/// request once is cheaper; the records are then as large as TLS allows (16 KiB).
final class HTTP2WriteCoalescer: ChannelOutboundHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private var pending: ByteBuffer?
    private var promises: [EventLoopPromise<Void>] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .byteBuffer(var bytes):
            if pending == nil {
                pending = context.channel.allocator.buffer(capacity: max(bytes.readableBytes, 16 << 10))
            }
            pending!.writeBuffer(&bytes)
            if let promise { promises.append(promise) }
        case .fileRegion:
            // Never written by NIOHTTP2Handler on its own; kept in order behind what is pending.
            writePending(context: context)
            context.write(data, promise: promise)
        }
    }

    func flush(context: ChannelHandlerContext) {
        writePending(context: context)
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // Unflushed writes fail on close, as they would in the channel itself.
        if mode != .input { failPending() }
        context.close(mode: mode, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // The channel is gone (this handler is never removed from a live one): nothing unflushed
        // will be written, and no promise is left unfulfilled.
        failPending()
    }

    private func failPending() {
        pending = nil
        let failed = promises
        promises.removeAll()
        for p in failed { p.fail(ChannelError.ioOnClosedChannel) }
    }

    private func writePending(context: ChannelHandlerContext) {
        guard let bytes = pending else { return }
        pending = nil
        let promise: EventLoopPromise<Void>?
        switch promises.count {
        case 0: promise = nil
        case 1: promise = promises[0]
        default:
            let all = promises
            let joined = context.eventLoop.makePromise(of: Void.self)
            joined.futureResult.whenComplete { result in
                switch result {
                case .success: for p in all { p.succeed() }
                case .failure(let e): for p in all { p.fail(e) }
                }
            }
            promise = joined
        }
        promises.removeAll(keepingCapacity: true)
        context.write(wrapOutboundOut(.byteBuffer(bytes)), promise: promise)
    }
}
