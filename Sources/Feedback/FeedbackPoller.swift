import APNsProtocol
import APNsTransport
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Redis
import TimeUnits

/// Reads one app's feedback service list and suppresses its tokens in Redis.
///
/// Apple's guide, "The Feedback Service": connect over TLS with the app's certificate; transmission begins at
/// once; read `time u32 | token length u16 | token` tuples until the service closes; the list is cleared
/// once read. Because the service forgets what it sent, every tuple is written to Redis as it arrives
/// (``PipelineStore/suppress(_:)``, `<p>:suppressed:<app>` token → `<time>:feedback`, newest time wins)
/// in batches of at most ``FeedbackPollerConfiguration/batchSize`` and at the end of every TLS read, and
/// the socket is not read further until that batch is written (back-pressure through `NIOAsyncChannel`:
/// at most ``FeedbackPollerConfiguration/readAhead`` reads are buffered ahead of Redis). A crash
/// therefore loses at most the batch being written and what was still in socket buffers; a cancelled
/// poll writes everything it decoded before it stops.
///
/// The feedback time is kept as the suppression time, so the gate lifts it for a token registered after
/// that time (spec: "verify that the device tokens haven't been reregistered since the feedback entry
/// was generated").
public struct FeedbackPoller: Sendable {
    public let store: PipelineStore
    public let configuration: FeedbackPollerConfiguration
    private let group: any EventLoopGroup
    private let logger: Logger

    public init(
        store: PipelineStore,
        configuration: FeedbackPollerConfiguration = FeedbackPollerConfiguration(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns.feedback")
    ) {
        self.store = store
        self.configuration = configuration
        self.group = eventLoopGroup
        self.logger = logger
    }

    /// Polls `app` once: connects, reads until the service closes, writes every suppression.
    ///
    /// - Parameter progress: called after each batch is written, with the running summary (for
    ///   progress output and tests); the poll does not read on until it returns.
    /// - Throws: ``FeedbackPollError``, whose summary counts what was read and written before the failure.
    public func poll(
        _ app: FeedbackApp,
        progress: (@Sendable (FeedbackPollSummary) async -> Void)? = nil
    ) async throws(FeedbackPollError) -> FeedbackPollSummary {
        var logger = self.logger
        logger[metadataKey: "feedback.app"] = "\(app.app)"
        logger[metadataKey: "feedback.endpoint"] = "\(app.endpoint)"
        var state = PollState(
            app: app, store: store, batchSize: max(1, configuration.batchSize), logger: logger, progress: progress)
        state.pending.reserveCapacity(configuration.batchSize)

        // 1. Everything that can fail before the service is contacted, so that its list stays intact.
        let context = try await prepare(app, state: &state)
        // 2. Connect.
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await connect(app, context: context)
        } catch {
            throw state.failure(.connect, error)
        }
        logger.debug("connected to the feedback service")
        // 3. Read and write as it arrives.
        let streamError = try await read(channel, state: &state)

        // Whatever ended the stream, what was decoded is written before reporting.
        try await state.flush()
        if let streamError {
            if streamError is CancellationError || Task.isCancelled {
                logger.notice("feedback poll cancelled; what was read is written", metadata: state.summary.metadata)
                throw state.failure(.cancelled, streamError)
            }
            throw state.failure(.stream, streamError)
        }
        if !state.decoder.isAtTupleBoundary {
            state.summary.endedMidTuple = true
            logger.warning("feedback stream ended inside a tuple; the partial tuple is dropped", metadata: state.summary.metadata)
        }
        state.summary.duration = state.clock.now - state.started
        return state.summary
    }

    /// The certificate is the app's and loads, and Redis answers: checked before the service is
    /// contacted, since it forgets its list once read. Returns the TLS context to connect with.
    private func prepare(_ app: FeedbackApp, state: inout PollState) async throws(FeedbackPollError) -> NIOSSLContext {
        let context: NIOSSLContext
        do {
            if configuration.requireMatchingTopic, let topic = try app.credentials.certificateTopic(), topic != app.app {
                throw FeedbackConfigurationError(
                    description: "certificate \(app.credentials.certificatePath) is for topic \(topic), not \(app.app)")
            }
            context = try app.credentials.makeClientContext()
        } catch {
            throw state.failure(.configuration, error)
        }
        do {
            try await store.client.send(RedisCommand("PING"))
        } catch {
            throw state.failure(.redisUnavailable, error)
        }
        if Task.isCancelled { throw state.failure(.cancelled, CancellationError()) }
        return context
    }

    /// A TLS connection to the app's feedback service whose reads wait for Redis: at most
    /// ``FeedbackPollerConfiguration/readAhead`` reads are buffered ahead of the writes.
    private func connect(_ app: FeedbackApp, context: NIOSSLContext) async throws -> NIOAsyncChannel<ByteBuffer, ByteBuffer> {
        let readTimeout = TimeAmount(configuration.readTimeout)
        let hostname = app.endpoint.serverHostname
        let readAhead = max(1, configuration.readAhead)
        return try await ClientBootstrap(group: group)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: app.endpoint.host, port: app.endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(ReadTimeoutHandler(timeout: readTimeout))
                    // An IP address is not a valid SNI name; verification still checks it against the certificate.
                    try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: hostname.isIPAddress ? nil : hostname))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(
                        wrappingChannelSynchronously: channel,
                        configuration: .init(backPressureStrategy: .init(lowWatermark: 1, highWatermark: readAhead)))
                }
            }
    }

    /// Reads until the service closes, decoding and writing as it arrives. A failure to write throws; what
    /// ended the stream otherwise (reset, timeout, cancellation) is returned, for the caller to write
    /// what was decoded before reporting it.
    private func read(
        _ channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, state: inout PollState
    ) async throws(FeedbackPollError) -> (any Error)? {
        do {
            try await channel.executeThenClose { inbound, _ in
                var iterator = inbound.makeAsyncIterator()
                while true {
                    let next: ByteBuffer?
                    do {
                        next = try await iterator.next()
                    } catch let error as NIOSSLError where error == .uncleanShutdown {
                        // TCP closed without close_notify. Tuples are self-delimiting: a truncated one
                        // shows as a half tuple below; everything complete is good.
                        state.logger.debug("feedback service closed without TLS close_notify")
                        next = nil
                    }
                    guard var buffer = next else { break }
                    buffer.withUnsafeReadableBytes { state.decoder.append($0) }
                    buffer.clear()
                    while let tuple = state.decoder.next() { try await state.take(tuple) }
                    try await state.flush()  // one batch per TLS read at least: nothing read waits for more
                    if Task.isCancelled { throw CancellationError() }
                }
            }
        } catch let error as FeedbackPollError {
            throw error
        } catch {
            return error
        }
        return nil
    }
}

/// One poll's running state: the summary so far, the decoder, and the suppressions decoded but not yet
/// written. Apart from the socket, so that "written as it arrives" is in one place.
private struct PollState {
    let app: FeedbackApp
    let store: PipelineStore
    let batchSize: Int
    let logger: Logger
    let progress: (@Sendable (FeedbackPollSummary) async -> Void)?
    let clock = ContinuousClock()
    let started: ContinuousClock.Instant
    var summary: FeedbackPollSummary
    var decoder = FeedbackDecoder()
    var pending: [Suppression] = []

    init(
        app: FeedbackApp, store: PipelineStore, batchSize: Int, logger: Logger,
        progress: (@Sendable (FeedbackPollSummary) async -> Void)?
    ) {
        self.app = app
        self.store = store
        self.batchSize = batchSize
        self.logger = logger
        self.progress = progress
        started = clock.now
        summary = FeedbackPollSummary(app: app.app, endpoint: app.endpoint.description)
    }

    /// The error to throw at `stage`, with the summary of what was done until then.
    mutating func failure(_ stage: FeedbackPollError.Stage, _ error: any Error) -> FeedbackPollError {
        summary.duration = clock.now - started
        return FeedbackPollError(stage: stage, underlying: "\(error)", summary: summary)
    }

    /// Writes `pending`; on failure logs the tuples that could not be written, so they can be re-applied.
    mutating func flush() async throws(FeedbackPollError) {
        guard !pending.isEmpty else { return }
        do {
            try await store.suppress(pending)
        } catch {
            logger.error(
                "feedback tuples read but not written to Redis",
                metadata: [
                    "feedback.unwritten": .array(pending.map { "\($0.tokenHex)@\($0.at)" }),
                    "error": "\(error)",
                ])
            throw failure(.redisWrite, error)
        }
        summary.suppressed += pending.count
        summary.batches += 1
        pending.removeAll(keepingCapacity: true)
        if let progress { await progress(summary) }
    }

    /// Counts a tuple and queues its suppression (a malformed one is logged, the first ten, and
    /// skipped); writes once a batch is full.
    mutating func take(_ tuple: FeedbackTuple) async throws(FeedbackPollError) {
        summary.tuplesRead += 1
        guard let token = tuple.deviceToken else {
            summary.malformed += 1
            if summary.malformed <= 10 {
                logger.warning(
                    "malformed feedback tuple skipped: token is not 32 bytes",
                    metadata: [
                        "feedback.token_length": "\(tuple.token.count)", "feedback.time": "\(tuple.timestamp)",
                        "feedback.tuple_index": "\(summary.tuplesRead)",
                    ])
            }
            return
        }
        let at = Int64(tuple.timestamp)
        summary.oldestTimestamp = min(summary.oldestTimestamp ?? at, at)
        summary.newestTimestamp = max(summary.newestTimestamp ?? at, at)
        pending.append(Suppression(app: app.app, tokenHex: token.hex, at: at, reason: "feedback"))
        if pending.count >= batchSize { try await flush() }
    }
}

struct FeedbackConfigurationError: Error, CustomStringConvertible {
    var description: String
}

extension FeedbackPollSummary {
    /// Structured log metadata (`feedback.*`).
    public var metadata: Logger.Metadata {
        var m: Logger.Metadata = [
            "feedback.app": "\(app)", "feedback.endpoint": "\(endpoint)",
            "feedback.tuples_read": "\(tuplesRead)", "feedback.suppressed": "\(suppressed)",
            "feedback.malformed": "\(malformed)", "feedback.batches": "\(batches)",
            "feedback.duration_ms": "\(duration.milliseconds)",
        ]
        if endedMidTuple { m["feedback.ended_mid_tuple"] = "true" }
        if let oldestTimestamp { m["feedback.oldest_time"] = "\(oldestTimestamp)" }
        if let newestTimestamp { m["feedback.newest_time"] = "\(newestTimestamp)" }
        return m
    }
}

extension String {
    /// An IPv4 or IPv6 literal (not a name to send as SNI).
    var isIPAddress: Bool {
        if contains(":") { return true }
        let parts = split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
    }
}

/// Closes the connection with ``FeedbackReadTimeout`` when a read has been asked for and no bytes arrive
/// within the timeout. Sits at the head of the pipeline, so it sees the TLS handshake's reads too;
/// while the poller is busy writing to Redis nothing is read, and nothing times out.
final class ReadTimeoutHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func read(context: ChannelHandlerContext) {
        if timer == nil, timeout.nanoseconds > 0 {
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            let timeout = self.timeout
            timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
                self.timer = nil
                let context = loopBound.value
                context.fireErrorCaught(FeedbackReadTimeout(timeout: .nanoseconds(timeout.nanoseconds)))
                context.close(promise: nil)
            }
        }
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        cancelTimer()
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelTimer()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { cancelTimer() }

    private func cancelTimer() {
        timer?.cancel()
        timer = nil
    }
}
