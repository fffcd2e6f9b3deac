import CHiredis
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// What ``RedisClient`` writes into its channel: `count` commands, already in RESP in `bytes`, and the
/// promise of their `count` replies.
struct RedisRequest: Sendable {
    var bytes: ByteBuffer
    var count: Int
    var promise: EventLoopPromise<[RedisReply]>
}

/// One Redis connection's protocol end: writes requests as they come (so calls pipeline on the channel),
/// parses replies with hiredis's `redisReader` and hands them out to the waiting requests in order (a
/// FIFO of promises: Redis answers in the order it was asked).
///
/// A connection that breaks (closed, reset, a timeout, a reply that is not RESP) fails every request
/// still waiting with ``RedisError/connection(_:)`` — the error a dropped hiredis connection gave —
/// and fails every later one at once: the client then opens a new channel and sends again.
final class RedisChannelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = RedisRequest
    typealias OutboundOut = ByteBuffer

    private struct Waiting {
        var count: Int
        var promise: EventLoopPromise<[RedisReply]>
        var timeout: Scheduled<Void>?
        var id: UInt64
    }

    private let reader: UnsafeMutablePointer<redisReader>
    private var waiting = CircularBuffer<Waiting>(initialCapacity: 8)
    /// The replies of `waiting.first` so far.
    private var replies: [RedisReply] = []
    private var nextID: UInt64 = 0
    /// Set once the connection broke: the error every request fails with from then on.
    private var failure: RedisError?
    private let commandTimeout: TimeAmount
    /// Completed when the connection can carry commands: at once for TCP, after the handshake for TLS.
    private let ready: EventLoopPromise<Void>
    private let tls: Bool
    /// `host:port`, for error messages.
    private let endpoint: String
    private var context: ChannelHandlerContext?

    init(commandTimeout: TimeAmount, ready: EventLoopPromise<Void>, tls: Bool, endpoint: String) {
        guard let reader = redisReaderCreate() else { fatalError("hiredis could not allocate a reader") }
        self.reader = reader
        self.commandTimeout = commandTimeout
        self.ready = ready
        self.tls = tls
        self.endpoint = endpoint
    }

    deinit {
        redisReaderFree(reader)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive, !tls { ready.succeed(()) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        fail(RedisError.connection("Server closed the connection"))
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        if !tls { ready.succeed(()) }
        context.fireChannelActive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event { ready.succeed(()) }
        context.fireUserInboundEventTriggered(event)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        if let failure {
            request.promise.fail(failure)
            promise?.fail(failure)
            return
        }
        nextID &+= 1
        let id = nextID
        // A round trip that takes longer than the command timeout counts as a dropped connection, as a
        // hiredis socket timeout did: the client reconnects and sends again.
        let timeout = context.eventLoop.assumeIsolated().scheduleTask(in: commandTimeout) { [self] in
            guard waiting.contains(where: { $0.id == id }) else { return }
            let seconds = Double(commandTimeout.nanoseconds) / 1e9
            fail(RedisError.connection("no reply within \(seconds) s (redis.command timeout)"))
        }
        if waiting.isEmpty { replies.reserveCapacity(request.count) }
        waiting.append(Waiting(count: request.count, promise: request.promise, timeout: timeout, id: id))
        context.write(wrapOutboundOut(request.bytes), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        guard failure == nil else { return }
        let status = buffer.withUnsafeReadableBytes { bytes in
            redisReaderFeed(reader, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
        }
        guard status == REDIS_OK else { return fail(RedisError.connection(readerError())) }
        while failure == nil {
            var raw: UnsafeMutableRawPointer?
            guard redisReaderGetReply(reader, &raw) == REDIS_OK else { return fail(RedisError.connection(readerError())) }
            guard let raw else { return }
            let reply = RedisReply(raw.assumingMemoryBound(to: redisReply.self))
            freeReplyObject(raw)
            deliver(reply)
        }
    }

    private func deliver(_ reply: RedisReply) {
        guard let first = waiting.first else {
            // Nothing asked for it: the stream is out of step, and no later reply can be trusted.
            return fail(RedisError.connection("Protocol error: a reply no command waited for"))
        }
        replies.append(reply)
        guard replies.count == first.count else { return }
        waiting.removeFirst()
        first.timeout?.cancel()
        let done = replies
        replies = []
        if let next = waiting.first { replies.reserveCapacity(next.count) }
        first.promise.succeed(done)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(RedisError.connection("Server closed the connection"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(Self.redisError(error, endpoint: endpoint))
    }

    /// Fails the connection: every waiting request and every later one, and closes the channel.
    private func fail(_ error: RedisError) {
        if failure == nil { failure = error }
        let error = failure!
        ready.fail(error)
        let failed = waiting
        waiting.removeAll()
        replies = []
        for request in failed {
            request.timeout?.cancel()
            request.promise.fail(error)
        }
        context?.close(promise: nil)
    }

    private func readerError() -> String {
        let text = withUnsafeBytes(of: reader.pointee.errstr) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        return text.isEmpty ? "Protocol error" : text
    }

    /// A channel error as a ``RedisError``: a certificate or name that does not verify is a
    /// configuration problem (``RedisError/tls(_:)``, not retried); anything else a broken connection.
    static func redisError(_ error: any Error, endpoint: String) -> RedisError {
        if let error = error as? RedisError { return error }
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return .tls(
                "the certificate of \(endpoint) does not name the host it was reached as (\(error)): check the server's certificate, or set redis.tls.server_name to a name it holds"
            )
        }
        if let error = error as? NIOSSLError, case .handshakeFailed(let reason) = error {
            let text = "\(reason)"
            if text.contains("CERTIFICATE_VERIFY_FAILED") {
                return .tls(
                    "the certificate of \(endpoint) did not verify (\(text)): check that redis.tls.ca is the CA that signed the server's certificate, and that the certificate is valid now"
                )
            }
            // Refusals that trying again cannot change: a certificate the server wants or rejects, no
            // common TLS version (or no TLS at all on that port). Anything else (the server going away
            // mid-handshake) is a broken connection, retried as any other.
            if text.contains("CERTIFICATE") || text.contains("VERSION") {
                return .tls(
                    "TLS handshake with \(endpoint) refused (\(text)): check that the server speaks TLS on this port (1.2 at least), that redis.tls.ca is the CA of its certificate, and the client certificate (redis.tls.cert, redis.tls.key) if it asks for one"
                )
            }
            return .connection("TLS handshake with \(endpoint) failed (\(text))")
        }
        if let error = error as? IOError { return .connection(Self.text(errno: error.errnoCode)) }
        if let error = error as? NIOConnectionError {
            if let first = error.connectionErrors.first?.error as? IOError { return .connection(Self.text(errno: first.errnoCode)) }
            if let first = error.connectionErrors.first { return .connection("\(first.error)") }
            if error.dnsAAAAError != nil || error.dnsAError != nil { return .connection("cannot resolve \(error.host)") }
            return .connection("\(error)")
        }
        if let error = error as? ChannelError, case .connectTimeout = error { return .connection("Connection timed out") }
        if let error = error as? NIOSSLError, case .uncleanShutdown = error { return .connection("Server closed the connection") }
        return .connection("\(error)")
    }

    /// The C library's text of `errno` ("Connection refused"): what hiredis reported.
    private static func text(errno code: Int32) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }
}
