import APNsProtocol
import APNsTransport
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// One TLS connection to a gateway: a thin driver of two value types that make the decisions,
/// `BinaryConnectionStateMachine` (queue, identifiers, unsettled window, settlement, grace window, what
/// each answer means) and `BinaryShardLifecycle` (connect, back-off, gateway rotation, epochs, the drain
/// and its probe). It feeds them NIO events and timer fires and carries out what they decide, and keeps
/// what is about sockets and time: the channel and bootstrap, the Nagle-style batcher's buffer and
/// linger timer, the settle and probe-timeout timers, the drain's promise and the waiters. All state
/// lives on one event loop; every entry point hops there first.
final class Shard: @unchecked Sendable {  // mutable state is confined to `eventLoop`
    let app: String
    let index: Int
    let eventLoop: any EventLoop
    private let config: ShardConfiguration
    /// `config`'s times in the event loop's unit, worked out once: the linger (at every batch), the
    /// settle tick (a quarter of `settleAfter`, at least 5 ms), the drain probe's timeout, the connect's.
    private let linger: TimeAmount
    private let settlePeriod: TimeAmount
    private let drainTimeout: TimeAmount
    private let connectTimeout: TimeAmount
    private let sslContext: NIOSSLContext
    private let serverHostname: String?
    private let gateways: [GatewayAddress]
    private let limiter: ConnectionLimiter
    private let onOutcomes: OutcomeHandler
    private var logger: Logger

    typealias Pending = BinaryConnectionStateMachine.Pending

    private var lifecycle: BinaryShardLifecycle
    private var machine: BinaryConnectionStateMachine
    /// The channel while `lifecycle` is connected or closing.
    private var channel: (any Channel)?
    private var waiters = CircularBuffer<EventLoopPromise<Void>>()
    private var outgoing: ByteBuffer
    private var framesInOutgoing = 0
    private var flushCount: UInt64 = 0
    private var lingerTask: Scheduled<Void>?
    private var settleTask: Scheduled<Void>?
    private var drainPromise: EventLoopPromise<DrainOutcome>?
    private var probeTimeout: Scheduled<Void>?
    private var random = SystemRandomNumberGenerator()
    private(set) var statistics = ConnectionStatistics()

    init(
        app: String, index: Int, eventLoop: any EventLoop, config: ShardConfiguration, sslContext: NIOSSLContext,
        serverHostname: String?, gateways: [GatewayAddress], limiter: ConnectionLimiter,
        logger: Logger, onOutcomes: @escaping OutcomeHandler
    ) {
        self.app = app
        self.index = index
        self.eventLoop = eventLoop
        self.config = config
        self.linger = TimeAmount(config.linger)
        self.settlePeriod = max(.milliseconds(5), .nanoseconds(TimeAmount(config.settleAfter).nanoseconds / 4))
        self.drainTimeout = TimeAmount(config.drainTimeout)
        self.connectTimeout = TimeAmount(config.connectTimeout)
        self.sslContext = sslContext
        self.serverHostname = serverHostname
        self.gateways = gateways
        self.limiter = limiter
        self.onOutcomes = onOutcomes
        self.logger = logger
        self.logger[metadataKey: "app"] = "\(app)"
        self.logger[metadataKey: "shard"] = "\(index)"
        lifecycle = BinaryShardLifecycle(shard: index, gateways: gateways, reconnect: config.reconnect)
        outgoing = ByteBufferAllocator().buffer(capacity: config.batchBytes + 4096)
        machine = BinaryConnectionStateMachine(connection: index, app: app, configuration: .init(config))
    }

    private var now: NIODeadline { .now() }

    // MARK: submitting

    /// Queues `batch`; the future completes when the queue is back under its capacity, so a caller
    /// that awaits it never has more than one batch beyond the bound in flight.
    func submit(_ batch: [PushNotification]) -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [self] in
            if lifecycle.isStopped { return eventLoop.makeFailedFuture(SenderError.closed(app: app)) }
            if lifecycle.isDraining { return eventLoop.makeFailedFuture(SenderError.draining(app: app)) }
            let bulk = machine.submitted(batch)
            statistics.maxQueueDepth = max(statistics.maxQueueDepth, machine.queuedCount)
            connectIfNeeded()
            pump()
            // A priority batch never waits for room in the bulk queue (`docs/design.md §1.4`).
            if !bulk || !machine.queueIsFull { return eventLoop.makeSucceededVoidFuture() }
            let promise = eventLoop.makePromise(of: Void.self)
            waiters.append(promise)
            statistics.callerWaits += 1
            return promise.futureResult
        }
    }

    private func releaseWaiters() {
        while !machine.queueIsFull, let w = waiters.popFirst() { w.succeed() }
    }

    // MARK: writing

    /// Moves notifications from the queue into the outgoing batch while the connection, the replay
    /// buffer and the socket all have room.
    private func pump() {
        guard lifecycle.mayWrite, let channel else { return }  // nothing goes after the probe
        machine.forgetSettled(now: now)
        // The unsettled window (`unsettledByteLimit`) is the bound on what may sit unread at the gateway.
        var cancelled = false
        while machine.mayTakeFrame, channel.isWritable {
            guard machine.takeFrame(into: &outgoing) else {
                cancelled = true  // its campaign is cancelled: settled, not written
                continue
            }
            framesInOutgoing += 1
            if outgoing.readableBytes >= config.batchBytes { flush(channel) }
        }
        if cancelled { emit() }
        statistics.maxReplayBytes = max(statistics.maxReplayBytes, machine.replay.keptBytes)
        statistics.maxReplayCount = max(statistics.maxReplayCount, machine.replay.keptCount)
        statistics.maxUnsettledBytes = max(statistics.maxUnsettledBytes, machine.replay.bytes)
        if lifecycle.shouldSendProbe(queueIsEmpty: machine.queueIsEmpty) { sendProbe(channel) }
        if outgoing.readableBytes > 0, lingerTask == nil {
            lingerTask = eventLoop.scheduleTask(in: linger) { [self] in
                lingerTask = nil
                if lifecycle.isConnected, let channel = self.channel, outgoing.readableBytes > 0 { flush(channel) }
            }
        }
        releaseWaiters()
    }

    private func flush(_ channel: any Channel) {
        lingerTask?.cancel()
        lingerTask = nil
        guard outgoing.readableBytes > 0 else { return }
        flushCount += 1
        let flush = flushCount
        machine.flushed(flush, frames: framesInOutgoing, bytes: outgoing.readableBytes)
        framesInOutgoing = 0
        let buffer = outgoing
        outgoing = channel.allocator.buffer(capacity: config.batchBytes + 4096)
        let writeEpoch = lifecycle.epoch
        channel.writeAndFlush(buffer).whenComplete { [self] result in
            guard lifecycle.isCurrent(writeEpoch), case .success = result else { return }
            machine.writeCompleted(flush, now: now)
            scheduleSettle()
        }
    }

    /// The drain probe: a frame with a token and an identifier but no payload. The gateway must
    /// answer it with status 4 (missing payload) naming it, and since it answers in order, that
    /// proves every earlier notification on the connection was processed.
    private func sendProbe(_ channel: any Channel) {
        let identifier = machine.takeProbeIdentifier()
        lifecycle.probeSent(identifier)
        // A probe sent again on a new connection gets a fresh timeout.
        probeTimeout?.cancel()
        probeTimeout = eventLoop.scheduleTask(in: drainTimeout) { [self] in
            lifecycle.probeTimedOut()
            logger.warning("drain probe not answered in time; settling by time instead", metadata: ["identifier": "\(identifier)"])
            finishDrainIfSettled()
        }
        var frame = ByteBufferAllocator().buffer(capacity: 48)
        frame.putByte(2)
        frame.putUInt32BE(35 + 7)
        frame.putByte(1)
        frame.putUInt16BE(32)
        frame.writeRepeatingByte(0, count: 32)
        frame.putByte(3)
        frame.putUInt16BE(4)
        frame.putUInt32BE(identifier)
        outgoing.writeImmutableBuffer(frame)
        flush(channel)
        logger.debug("drain probe sent", metadata: ["identifier": "\(identifier)"])
    }

    // MARK: settling

    private func scheduleSettle() {
        guard settleTask == nil, !machine.replay.isEmpty else { return }
        settleTask = eventLoop.scheduleTask(in: settlePeriod) { [self] in
            settleTask = nil
            if machine.settleTick(now: now) { lifecycle.connectionProvedUseful() }
            scheduleSettle()
            pump()
            finishDrainIfSettled()
            emit()
        }
    }

    private func emit() {
        guard let (outcomes, events) = machine.takeBatch() else { return }
        onOutcomes(OutcomeBatch(app: app, connection: index, outcomes: outcomes, events: events))
    }

    // MARK: connection events (from GatewayResponseHandler, on the event loop)

    func errorResponse(_ response: ErrorResponse, epoch: Int) {
        guard lifecycle.isCurrent(epoch) else { return }
        if lifecycle.errorResponse(identifier: response.identifier) {
            // Everything before the probe was processed: the drain proof.
            machine.probeAnswered()
            statistics.drainsProvedByProbe += 1
            closeConnection()
            emit()
            finishDrainIfSettled()
            return
        }
        let notes = machine.errorResponse(response, now: now)
        if notes.sequenceUnknown {
            logger.error(
                "error response names a notification no longer in the replay buffer; what followed it may be lost",
                metadata: ["status": "\(response.status)", "identifier": "\(response.identifier)"])
        }
        if notes.lost > 0 {
            // Bounded: the count is exact; the job ids are the first 50 still remembered.
            logger.error(
                "notifications discarded by the gateway after they had been settled and forgotten; they cannot be resent",
                metadata: [
                    "lost": "\(notes.lost)", "status": "\(response.status)", "identifier": "\(response.identifier)",
                    "jobs": "\(notes.lostJobs.joined(separator: ","))",
                ])
        }
        for job in notes.refusedAfterSettle {
            logger.error(
                "gateway refused a notification already reported accepted (settled by time before the gateway read it)",
                metadata: ["job": "\(job)", "status": "\(response.status)"])
        }
        if let job = notes.malformed {
            logger.warning(
                "gateway refused a notification as malformed", metadata: ["status": "\(response.status)", "job": "\(job)"])
        }
        statistics.lastError = "status \(response.status) for identifier \(response.identifier)"
        if response.status == .shutdown {
            logger.info("gateway shut the connection down (status 10)", metadata: ["identifier": "\(response.identifier)"])
        }
        closeConnection()
        emit()
    }

    func protocolViolation(_ what: String, epoch: Int) {
        guard lifecycle.isCurrent(epoch) else { return }
        logger.error("gateway sent something that is not an error response; closing", metadata: ["error": "\(what)"])
    }

    func connectionError(_ error: any Error, epoch: Int) {
        guard lifecycle.isCurrent(epoch) else { return }
        // A gateway closes the connection right after an error response, often without TLS's
        // close_notify: that is part of the event already logged (and counted), not another one.
        if lifecycle.isClosing, let tls = error as? NIOSSLError, case .uncleanShutdown = tls {
            logger.debug("gateway closed without close_notify after its error response")
            return
        }
        statistics.lastError = "\(error)"
        logger.warning("gateway connection error", metadata: ["error": "\(error)"])
    }

    func handshakeCompleted(epoch: Int) {
        guard lifecycle.isCurrent(epoch) else { return }
        logger.debug("connected")
    }

    func writable(epoch: Int) {
        guard lifecycle.isCurrent(epoch) else { return }
        pump()
    }

    func connectionClosed(epoch: Int) {
        guard lifecycle.isCurrent(epoch) else { return }
        lingerTask?.cancel()
        lingerTask = nil
        outgoing.clear()
        framesInOutgoing = 0
        // Written, and the connection dropped with no error response: they may or may not have been
        // processed. Resending risks a duplicate; not resending risks a loss. We resend.
        let ambiguous = machine.connectionLost()
        if ambiguous > 0 {
            logger.warning(
                "connection dropped with no error response; resending unsettled notifications",
                metadata: ["ambiguous": "\(ambiguous)"])
        }
        channel = nil
        let closed = lifecycle.connectionClosed(hasQueued: !machine.queueIsEmpty, random: &random)
        emit()
        guard case .idle(let connect) = closed else { return }
        if let connect { scheduleConnect(connect) }
        finishDrainIfSettled()
    }

    private func closeConnection() {
        guard lifecycle.closeRequested(), let channel else { return }
        lingerTask?.cancel()
        lingerTask = nil
        outgoing.clear()
        framesInOutgoing = 0
        channel.close(promise: nil)
    }

    // MARK: connecting

    private func connectIfNeeded() {
        if let connect = lifecycle.connectIfNeeded(random: &random) { scheduleConnect(connect) }
    }

    /// Carries out a connect decision: the back-off, or the process-wide limit on attempts per
    /// gateway if that is longer.
    private func scheduleConnect(_ decision: BinaryShardLifecycle.Connect) {
        let gateway = decision.gateway
        let delay = max(decision.backOff, limiter.reserve(gateway))
        if delay <= .zero {
            connect(to: gateway)
        } else {
            eventLoop.scheduleTask(in: delay) { [self] in connect(to: gateway) }
        }
    }

    private func connect(to gateway: GatewayAddress) {
        guard let (connectionEpoch, isReconnect) = lifecycle.connectStarting(to: gateway) else { return }
        if isReconnect { machine.reconnecting() }
        let sslContext = self.sslContext
        let hostname = serverHostname ?? gateway.host
        ClientBootstrap(group: eventLoop)
            .connectTimeout(connectTimeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            // A shallow local pipe (NIO's outbound buffer, the socket's send buffer): memory per
            // connection stays small, and less sits behind a bad frame when the gateway errors on it.
            // (Most of what is in flight then is in the gateway's receive buffer, which we do not control.)
            .channelOption(.writeBufferWaterMark, value: .init(low: 32 * 1024, high: 128 * 1024))
            .channelOption(.socketOption(.so_sndbuf), value: 128 * 1024)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        NIOSSLClientHandler(context: sslContext, serverHostname: hostname))
                    try channel.pipeline.syncOperations.addHandler(
                        GatewayResponseHandler(shard: self, epoch: connectionEpoch))
                }
            }
            .connect(host: gateway.host, port: gateway.port)
            .whenComplete { [self] result in
                switch result {
                case .success(let channel):
                    guard lifecycle.connected(epoch: connectionEpoch) else {
                        channel.close(promise: nil)
                        return
                    }
                    self.channel = channel
                    statistics.connections += 1
                    statistics.gateway = gateway.description
                    statistics.connectedSince = Int64(Date().timeIntervalSince1970)
                    pump()
                case .failure(let error):
                    let (ignored, next) = lifecycle.connectFailed(
                        epoch: connectionEpoch, hasQueued: !machine.queueIsEmpty, random: &random)
                    if ignored { return }
                    statistics.lastError = "connect \(gateway): \(error)"
                    logger.warning(
                        "cannot connect to gateway",
                        metadata: [
                            "gateway": "\(gateway)", "error": "\(error)",
                            "attempt": "\(lifecycle.reconnectAttempt)",
                        ])
                    if let next { scheduleConnect(next) }
                }
            }
    }

    // MARK: draining

    /// Sends what is queued, then proves it processed with a drain probe (or, if the probe is not
    /// answered within `drainTimeout`, waits out `settleAfter`), then closes. New submissions fail.
    func drainAndClose() -> EventLoopFuture<DrainOutcome> {
        eventLoop.flatSubmit { [self] in
            // The drain timeout runs from when the probe is written (sendProbe), not from here: sending
            // what is still queued may take longer than the timeout, and is not the gateway being silent.
            let start = lifecycle.drainRequested(
                somethingKept: !machine.queueIsEmpty || !machine.replay.isEmpty, random: &random)
            switch start {
            case .alreadyStopped:
                return eventLoop.makeSucceededFuture(.nothingToDrain)
            case .joinExisting:
                guard let drainPromise else { return eventLoop.makeSucceededFuture(.nothingToDrain) }
                return drainPromise.futureResult
            case .finish(let result):
                let promise = eventLoop.makePromise(of: DrainOutcome.self)
                drainPromise = promise
                finish(result)
                return promise.futureResult
            case .proceed(let connect):
                let promise = eventLoop.makePromise(of: DrainOutcome.self)
                drainPromise = promise
                if let connect { scheduleConnect(connect) }
                pump()
                return promise.futureResult
            }
        }
    }

    private func finishDrainIfSettled() {
        if let result = lifecycle.finishDrainIfSettled(
            queueIsEmpty: machine.queueIsEmpty, hasUnsettled: machine.replay.hasUnsettled)
        {
            finish(result)
        }
    }

    private func finish(_ result: DrainOutcome) {
        guard let promise = drainPromise, !lifecycle.isStopped else { return }
        probeTimeout?.cancel()
        probeTimeout = nil
        if lifecycle.stop(), let channel { channel.close(promise: nil) }
        settleTask?.cancel()
        settleTask = nil
        emit()
        while let w = waiters.popFirst() { w.fail(SenderError.closed(app: app)) }
        promise.succeed(result)
    }

    func currentStatistics() -> EventLoopFuture<ConnectionStatistics> {
        eventLoop.submit { [self] in
            var s = statistics
            s.app = app
            s.index = index
            s.state = lifecycle.stateName
            s.queueDepth = machine.queuedCount
            s.replayCount = machine.replay.keptCount
            s.replayBytes = machine.replay.keptBytes
            return s
        }
    }
}
