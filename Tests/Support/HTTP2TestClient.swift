import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// A small HTTP/2 client over real TLS (ALPN h2) for tests of the HTTP/2 simulator and of HTTP/2
/// senders' peers: requests on streams of one connection, with what the server said at connection
/// level (SETTINGS_MAX_CONCURRENT_STREAMS values, GOAWAY) kept for assertions.
///
/// `ignoreStreamLimit`: the client pretends the server allows many concurrent streams, to provoke
/// REFUSED_STREAM (the values the server really advertised are still recorded).
public final class HTTP2TestClient: Sendable {
    public struct Response: Sendable {
        public var streamID: Int
        /// nil when the stream was reset before a response.
        public var status: Int?
        public var headers: [(String, String)]
        public var body: [UInt8]
        /// RST_STREAM error code from the server, if the stream was reset.
        public var resetCode: HTTP2ErrorCode?

        public func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
        public var bodyText: String { String(decoding: body, as: UTF8.self) }
    }

    public struct GoAway: Sendable, Equatable {
        public var lastStreamID: Int
        public var errorCode: HTTP2ErrorCode
        public var data: String
    }

    public struct Observed: Sendable {
        /// SETTINGS_MAX_CONCURRENT_STREAMS values the server sent, in order.
        public var maxConcurrentStreams: [UInt32] = []
        public var goAway: GoAway?
        public var pingAcks = 0
        public var closed = false
        /// Requests whose frames were written to the connection (the server may not have read them yet).
        public var requestsWritten = 0
    }

    public let channel: any Channel
    let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    let box: ObservedBox

    init(channel: any Channel, multiplexer: NIOHTTP2Handler.StreamMultiplexer, box: ObservedBox) {
        self.channel = channel
        self.multiplexer = multiplexer
        self.box = box
    }

    public var seen: Observed { box.observed.withLock { $0 } }

    /// Connects to 127.0.0.1:`port`. `certificate`/`key`: PEM files of a client certificate (nil: none,
    /// token auth). `trustRoots`: the CA PEM the server's certificate must chain to.
    public static func connect(
        port: Int, group: any EventLoopGroup, trustRoots: String, certificate: String? = nil, key: String? = nil,
        ignoreStreamLimit: Bool = false
    ) async throws -> HTTP2TestClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(trustRoots)
        tls.applicationProtocols = ["h2"]
        if let certificate, let key {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        let state = ObservedBox()
        let (channel, multiplexer) = try await ClientBootstrap(group: group)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    try sync.addHandler(InboundSettingsObserver(box: state, override: ignoreStreamLimit ? 1 << 20 : nil))
                    let multiplexer = try sync.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init()
                    ) { $0.eventLoop.makeSucceededVoidFuture() }
                    try sync.addHandler(RootFrameObserver(box: state))
                    return (channel, multiplexer)
                }
            }
        return HTTP2TestClient(channel: channel, multiplexer: multiplexer, box: state)
    }

    /// One request on a new stream; returns when the response (or a reset, or the close) arrives.
    public func request(
        method: String = "POST", path: String, headers: [(String, String)] = [], body: [UInt8] = []
    ) async throws -> Response {
        let promise = channel.eventLoop.makePromise(of: Response.self)
        // A stream that cannot be opened or written (the server closed the connection meanwhile) must
        // still complete the promise: NIO traps on a promise that is dropped uncompleted.
        let stream: any Channel
        do {
            stream = try await multiplexer.createStreamChannel { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandler(ResponseCollector(promise: promise))
                }
            }.get()
            var head = HPACKHeaders([
                (":method", method), (":scheme", "https"), (":path", path), (":authority", "localhost"),
            ])
            for (n, v) in headers { head.add(name: n, value: v) }
            let headFrame = HTTP2Frame.FramePayload.headers(.init(headers: head, endStream: body.isEmpty))
            if body.isEmpty {
                try await stream.writeAndFlush(headFrame)
            } else {
                stream.write(headFrame, promise: nil)
                var buffer = stream.allocator.buffer(capacity: body.count)
                buffer.writeBytes(body)
                try await stream.writeAndFlush(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(buffer), endStream: true)))
            }
        } catch {
            promise.fail(error)
            throw error
        }
        box.update { $0.requestsWritten += 1 }
        // NIO numbers an outbound stream when its first frame is written.
        let streamID = try? await stream.getOption(HTTP2StreamChannelOptions.streamID).get()
        var response = try await promise.futureResult.get()
        response.streamID = streamID.map { Int($0) } ?? 0
        return response
    }

    /// Sends PING and returns once the ACK is counted.
    public func ping() async throws {
        let before = seen.pingAcks
        try await channel.writeAndFlush(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 42), ack: false)))
        for _ in 0..<500 where seen.pingAcks == before {
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Waits (up to ~5 s) until `condition` holds on what the server sent.
    public func wait(for condition: (Observed) -> Bool) async throws {
        for _ in 0..<500 where !condition(seen) { try await Task.sleep(for: .milliseconds(10)) }
    }

    public func close() async {
        try? await channel.close()
    }
}

/// Boxes the observed state so the handlers (event loop) and the test (any thread) share it.
final class ObservedBox: Sendable {
    let observed = Mutex(HTTP2TestClient.Observed())
    func update(_ body: (inout HTTP2TestClient.Observed) -> Void) { observed.withLock { body(&$0) } }
}

/// Records SETTINGS_MAX_CONCURRENT_STREAMS as the server sent it, optionally replacing it before NIO's
/// client sees it (NIO's client would otherwise queue streams beyond the limit instead of sending them).
/// Follows frame boundaries over the inbound bytes, holding back a SETTINGS frame until it is complete.
final class InboundSettingsObserver: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let box: ObservedBox
    private let override: UInt32?
    private var skip = 0
    private var held: [UInt8] = []

    init(box: ObservedBox, override: UInt32?) {
        self.box = box
        self.override = override
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let input = unwrapInboundIn(data)
        var out = context.channel.allocator.buffer(capacity: input.readableBytes)
        var bytes = Array(input.readableBytesView)
        var i = 0
        if !held.isEmpty {
            bytes = held + bytes
            held = []
        }
        while i < bytes.count {
            if skip > 0 {
                let n = min(skip, bytes.count - i)
                out.writeBytes(bytes[i..<(i + n)])
                skip -= n
                i += n
                continue
            }
            guard bytes.count - i >= 9 else {
                held = Array(bytes[i...])
                break
            }
            let length = Int(bytes[i]) << 16 | Int(bytes[i + 1]) << 8 | Int(bytes[i + 2])
            if bytes[i + 3] == 0x4 && bytes[i + 4] & 1 == 0 {
                guard bytes.count - i >= 9 + length else {
                    held = Array(bytes[i...])
                    break
                }
                var p = i + 9
                while p + 6 <= i + 9 + length {
                    if bytes[p] == 0, bytes[p + 1] == 3 {
                        let value =
                            UInt32(bytes[p + 2]) << 24 | UInt32(bytes[p + 3]) << 16 | UInt32(bytes[p + 4]) << 8 | UInt32(bytes[p + 5])
                        box.update { $0.maxConcurrentStreams.append(value) }
                        if let override {
                            bytes[p + 2] = UInt8(override >> 24)
                            bytes[p + 3] = UInt8(override >> 16 & 0xFF)
                            bytes[p + 4] = UInt8(override >> 8 & 0xFF)
                            bytes[p + 5] = UInt8(override & 0xFF)
                        }
                    }
                    p += 6
                }
                out.writeBytes(bytes[i..<(i + 9 + length)])
                i += 9 + length
                continue
            }
            out.writeBytes(bytes[i..<(i + 9)])
            i += 9
            skip = length
        }
        if out.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(out)) }
    }
}

/// Stream-0 frames after NIO's HTTP/2 handler: GOAWAY, PING ACKs.
final class RootFrameObserver: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    private let box: ObservedBox
    init(box: ObservedBox) { self.box = box }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .goAway(let last, let code, let opaque):
            let text = opaque.map { String(buffer: $0) } ?? ""
            box.update { $0.goAway = .init(lastStreamID: Int(last), errorCode: code, data: text) }
        case .ping(_, ack: true):
            box.update { $0.pingAcks += 1 }
        default: break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        box.update { $0.closed = true }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}

/// Collects one stream's response.
final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    private let promise: EventLoopPromise<HTTP2TestClient.Response>
    private var response = HTTP2TestClient.Response(streamID: 0, status: nil, headers: [], body: [], resetCode: nil)
    private var done = false

    init(promise: EventLoopPromise<HTTP2TestClient.Response>) { self.promise = promise }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let h):
            for (name, value, _) in h.headers {
                if name == ":status" { response.status = Int(value) } else { response.headers.append((name, value)) }
            }
            if h.endStream { finish() }
        case .data(let d):
            if case .byteBuffer(let b) = d.data { response.body += Array(b.readableBytesView) }
            if d.endStream { finish() }
        case .rstStream(let code):
            response.resetCode = code
            finish()
        default: break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let reset = error as? NIOHTTP2Errors.StreamClosed { response.resetCode = reset.errorCode }
        finish()
    }

    private func finish() {
        guard !done else { return }
        done = true
        promise.succeed(response)
    }
}
