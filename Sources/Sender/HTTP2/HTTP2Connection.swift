import APNsProtocol
import APNsTransport
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import TimeUnits

/// A notification with its request head, built (and validated) once when it is submitted. A class:
/// a request is copied between the queue, the open streams, the actions and the outcome, and one
/// reference is cheaper to copy than the dozen strings and arrays of the two values.
final class HTTP2Job: Sendable {
    let notification: PushNotification
    let head: HTTP2Request

    init(notification: PushNotification, head: HTTP2Request) {
        self.notification = notification
        self.head = head
    }
}

/// One HTTP/2 connection of an app's transport, across its reconnects: drives an
/// `HTTP2ConnectionStateMachine` on one event loop and carries out its actions (connect, write and
/// flush frames, report outcomes, reroute, ping, close). Every entry point hops to `eventLoop` first;
/// events from a channel carry its epoch, so nothing from a replaced channel reaches the machine.
final class HTTP2Connection: @unchecked Sendable {  // mutable state is confined to `eventLoop`
    typealias Machine = HTTP2ConnectionStateMachine<HTTP2Job>

    let index: Int
    let eventLoop: any EventLoop
    private let configuration: HTTP2TransportConfiguration
    /// `configuration.linger` in the event loop's unit (read at every batch).
    private let linger: TimeAmount
    /// Opens each (re)connect: the path every TLS connection to APNs takes (`APNsConnector`).
    private let connector: APNsConnector
    private let host: GatewayAddress
    private let limiter: ConnectionLimiter
    private let onOutcomes: OutcomeHandler
    /// Hands requests to another connection of the transport (never called while draining).
    private let reroute: @Sendable ([Machine.Request], _ from: Int) -> Void
    /// Where a refused connect is reported (`send`'s handler, or a log line at most once a minute).
    private let refusals: HTTP2ConnectRefusals
    private var logger: Logger

    private var machine: Machine
    private var channel: (any Channel)?
    private var handler: HTTP2ClientHandler?
    private var epoch = 0
    private var waiters = CircularBuffer<EventLoopPromise<Void>>()
    private var drainPromises: [EventLoopPromise<Void>] = []
    private var tickTask: RepeatedTask?
    private var lingerTask: Scheduled<Void>?
    private var unflushedBytes = 0
    private var inRead = false
    private var pendingOutcomes: [Outcome] = []
    /// Writes and frames since the last outcome batch.
    private var ioEvents = SenderEvents()
    private var token: ProviderTokenCache.Token?
    /// The `authorization` value of `token`, made once per token rather than once per write.
    private var authorization: (token: String, value: String)?
    private var connectingSince: NIODeadline?
    /// Which of its host's addresses this connection uses (its rank among the connections to the host).
    private let slot: Int
    /// Connects that failed in a row: each moves the connection to the host's next address.
    private var connectFailures = 0
    /// The HTTPS proxy this connection's host is reached through (nil: directly, or listed in NO_PROXY).
    private let proxy: HTTPSProxy?
    /// The epoch whose connect was refused for good (`refuse`).
    private var refusedEpoch = -1
    private(set) var statistics = ConnectionStatistics()

    /// Whether the transport should route new work here (read from other threads).
    let acceptsWork = Atomic<Bool>(true)
    /// Requests in the bulk queue, as of the last event (read from other threads: who has work to spare).
    let queued = Atomic<Int>(0)

    /// Tells the transport this connection's probe found the host answering again.
    private let hostRecovered: @Sendable (_ index: Int) -> Void

    init(
        index: Int, eventLoop: any EventLoop, configuration: HTTP2TransportConfiguration, sslContext: NIOSSLContext,
        limiter: ConnectionLimiter, logger: Logger, onOutcomes: @escaping OutcomeHandler,
        reroute: @escaping @Sendable ([Machine.Request], Int) -> Void, refusals: HTTP2ConnectRefusals = HTTP2ConnectRefusals(),
        hostRecovered: @escaping @Sendable (Int) -> Void = { _ in }
    ) {
        self.index = index
        self.eventLoop = eventLoop
        self.configuration = configuration
        self.linger = TimeAmount(configuration.linger)
        let host = configuration.hosts[index % configuration.hosts.count]  // spread evenly over the hosts
        self.host = host
        self.connector = APNsConnector(
            sslContext: sslContext, connectTimeout: TimeAmount(configuration.connectTimeout), resolver: configuration.resolver,
            proxy: configuration.proxy?.proxy(for: host.host))
        self.slot = index / configuration.hosts.count
        self.limiter = limiter
        self.onOutcomes = onOutcomes
        self.reroute = reroute
        self.refusals = refusals
        self.hostRecovered = hostRecovered
        self.logger = logger
        self.logger[metadataKey: "app"] = "\(configuration.app)"
        self.logger[metadataKey: "connection"] = "\(index)"
        self.logger[metadataKey: "host"] = "\(host)"
        self.proxy = configuration.proxy?.proxy(for: host.host)
        if let proxy { self.logger[metadataKey: "proxy"] = "\(proxy.address)" }  // host:port only, never credentials
        let cancellations = configuration.cancellations
        self.machine = Machine(
            configuration: configuration.machineConfiguration(), expiry: { $0.notification.expiry },
            instead: cancellations.map { c in { c.instead(of: $0.notification) } },
            lane: { $0.notification.lane },
            // The key a 429 holds: the token (a broadcast's channel), hashed as the transport routes it.
            token: { job in job.notification.channel.map { FNV1a64.hash($0.value) } ?? job.notification.token.stableHash })
        statistics.app = configuration.app
        statistics.index = index
        statistics.gateway = host.description
        machine.wallClockOffset = TimeAmount(.seconds(Date().timeIntervalSince1970)) - (now - .distantPast)
    }

    private var now: NIODeadline { .now() }

    // MARK: entry points (any thread)

    /// Queues jobs (built and checked on the caller's thread by `HTTP2Transport.send`); `refused` ones
    /// (invalid before sending) settle at once as bad requests, reported with this connection's outcomes.
    /// `room` completes when the queue is back within its bound (back-pressure; ``abandonWait(_:)``
    /// fails it when the caller stops waiting). `priority` jobs go to the priority lane's queue, written
    /// before every bulk one, and never wait for room.
    func submit(
        _ jobs: [HTTP2Job], priority: [HTTP2Job] = [], refused: [(notification: PushNotification, reason: String)] = [],
        room: EventLoopPromise<Void>
    ) {
        eventLoop.execute { [self] in
            if machine.draining { return room.fail(SenderError.draining(app: configuration.app)) }
            for r in refused {
                pendingOutcomes.append(
                    Outcome(
                        notification: r.notification, delivery: .rejected(.badRequest(reason: r.reason)), code: r.reason,
                        attempts: 0, connection: index))
            }
            if !priority.isEmpty { apply(machine.enqueue(priority, lane: .priority, now: now)) }
            if !jobs.isEmpty || priority.isEmpty { apply(machine.enqueue(jobs, now: now)) }
            statistics.maxQueueDepth = max(statistics.maxQueueDepth, machine.queue.count)
            if jobs.isEmpty || machine.hasRoom { return room.succeed() }
            waiters.append(room)
            statistics.callerWaits += 1
        }
    }

    /// The caller of ``submit(_:priority:refused:room:)`` stopped waiting (its task was cancelled: a
    /// stop): `room` fails with `CancellationError` if it is still waiting. Runs after that submit on the
    /// loop, so a wait is never missed; the jobs stay queued (sent, or settled by the drain).
    func abandonWait(_ room: EventLoopPromise<Void>) {
        eventLoop.execute { [self] in
            guard let i = waiters.firstIndex(where: { $0.futureResult === room.futureResult }) else { return }
            waiters.remove(at: i).fail(CancellationError())
        }
    }

    /// Requests another connection gave up on (refused credentials, a 5xx retry elsewhere).
    func adopt(_ requests: [Machine.Request], then taken: @escaping @Sendable () -> Void) {
        eventLoop.execute { [self] in
            apply(machine.adopt(requests, now: now))
            taken()
        }
    }

    /// The last `count` of this connection's bulk queue go to connection `to` (through `deliver`).
    func handOver(count: Int, to: Int, deliver: @escaping @Sendable ([Machine.Request], Int) -> Void) {
        eventLoop.execute { [self] in
            let requests = machine.handOver(count: count, now: now)
            guard !requests.isEmpty else { return }
            deliver(requests, to)
            // Room again: a caller waiting for it goes on (its new work may go to the others).
            apply(Machine.Action())
        }
    }

    /// Another connection's probe found this connection's host answering again: end a pause under way.
    func hostAnswers() {
        eventLoop.execute { [self] in apply(machine.hostAnswers(now: now)) }
    }

    /// Nothing held and the connection closed (after a drain).
    func isDrained() -> EventLoopFuture<Bool> {
        eventLoop.submit { [self] in machine.isEmpty && machine.phase == .closed }
    }

    /// True when every request this connection holds has an answer and the connection is closed; false
    /// once `deadline` passes first (Apple unreachable). Bounded on the loop, so a caller's wait needs no
    /// race of tasks against a timer.
    func drain(before deadline: NIODeadline) -> EventLoopFuture<Bool> {
        eventLoop.flatSubmit { [self] in
            let drained = eventLoop.makePromise(of: Void.self)
            let result = eventLoop.makePromise(of: Bool.self)
            // Whichever comes first completes `result`; both run on this loop.
            let decided = NIOLoopBoundBox(false, eventLoop: eventLoop)
            let timer = eventLoop.scheduleTask(deadline: deadline) { [self] in
                guard !decided.value else { return }
                decided.value = true
                // Out of the list, and completed, so that no promise outlives the wait unfulfilled.
                drainPromises.removeAll { $0.futureResult === drained.futureResult }
                drained.succeed()
                result.succeed(false)
            }
            drained.futureResult.whenSuccess {
                guard !decided.value else { return }
                decided.value = true
                timer.cancel()
                result.succeed(true)
            }
            drainPromises.append(drained)
            apply(machine.drain(now: now))
            return result.futureResult
        }
    }

    func currentStatistics() -> EventLoopFuture<ConnectionStatistics> {
        eventLoop.submit { [self] in
            var s = statistics
            s.queueDepth = machine.queue.count
            s.replayCount = machine.inFlight.count
            s.streamsAllowed = machine.permits
            s.state = stateName
            s.providerTokenAge = token.map { max(0, Int64(Date().timeIntervalSince1970) - $0.issuedAt) }
            return s
        }
    }

    private var stateName: String {
        switch machine.phase {
        // Idle after a refused connect is not up: nothing has connected since (readiness).
        case .idle: machine.refused ? "stopped" : "idle"
        case .connecting: "connecting"
        case .active: machine.suspended ? "stopped" : "connected"
        case .goingAway, .closing: "closing"
        case .waitingToReconnect: machine.suspended ? "stopped" : "waiting"
        case .closed: "closed"
        }
    }

    // MARK: events from the channel (on the event loop)

    func channelReady(epoch: Int, handler: HTTP2ClientHandler) {
        guard epoch == self.epoch else { return }
        self.handler = handler
        statistics.connections += 1
        statistics.connectedSince = Int64(Date().timeIntervalSince1970)
        logger.debug("connected")
        apply(machine.connected(now: now))
    }

    func protocolMismatch(epoch: Int, negotiated: String?) {
        guard epoch == self.epoch else { return }
        refuse(.noHTTP2(app: configuration.app, host: "\(host)", negotiated: negotiated))
    }

    /// A connect that retrying cannot fix: reported (`send` stops; `run` logs it, rate-limited), and the
    /// machine stops the connection for `authFailureDelay` with its jobs kept.
    private func refuse(_ refusal: HTTP2ConnectRefusal) {
        refusedEpoch = epoch
        statistics.lastError = refusal.description
        if refusals.report(refusal) {
            logger.error(
                "connect refused: \(refusal.detail)",
                metadata: [
                    "refusal": "\(refusal.kind.rawValue)", "retry_in_seconds": "\(configuration.authFailureDelay.seconds)",
                    "note": "jobs wait; logged at most once a minute",
                ])
        }
        apply(machine.connectRefused(now: now))
    }

    private func refusal(for error: any Error) -> HTTP2ConnectRefusal? {
        HTTP2ConnectRefusal.classify(
            error, app: configuration.app, host: "\(host)", serverHostname: configuration.serverHostname ?? host.host)
    }

    /// The complete answers of a read burst, in arrival order (collected by `HTTP2ClientHandler`).
    /// `closing`: the channel is going inactive; the answers settle without opening new streams on it.
    func answers(epoch: Int, _ answers: [Machine.Answer], closing: Bool = false) {
        guard epoch == self.epoch else { return }
        inRead = true
        apply(machine.responses(answers, now: now, refill: !closing))
    }

    func reset(epoch: Int, streamID: UInt32, code: HTTP2WireErrorCode) {
        guard epoch == self.epoch else { return }
        inRead = true
        apply(machine.reset(streamID: streamID, refused: code == .refusedStream, now: now))
    }

    func goAway(epoch: Int, lastStreamID: UInt32, code: HTTP2WireErrorCode, debug: ByteBuffer?) {
        guard epoch == self.epoch else { return }
        let reason = debug.flatMap { try? APNsErrorBody(decoding: $0.readableBytesView) }?.reasonText
        logger.info("GOAWAY", metadata: ["last_stream": "\(lastStreamID)", "code": "\(code)", "reason": "\(reason ?? "-")"])
        statistics.lastError = "GOAWAY \(code)" + (reason.map { " \($0)" } ?? "")
        inRead = true
        apply(machine.goAway(lastStreamID: lastStreamID, now: now))
    }

    func settings(epoch: Int, maxConcurrentStreams: Int?) {
        guard epoch == self.epoch else { return }
        inRead = true
        apply(machine.settings(maxConcurrentStreams: maxConcurrentStreams, now: now))
    }

    func pingAnswered(epoch: Int) {
        guard epoch == self.epoch else { return }
        machine.pingAnswered(now: now)
    }

    func readComplete(epoch: Int) {
        guard epoch == self.epoch else { return }
        inRead = false
        publishOutcomes()
        // The streams this burst's answers freed are refilled now (`answers` ran just before): the
        // burst is the batch, so they leave at once rather than after `linger`, which is for work
        // arriving from the caller.
        flushIfDue(force: true)
    }

    func channelError(epoch: Int, error: any Error) {
        guard epoch == self.epoch else { return }
        if let refusal = refusal(for: error) { return refuse(refusal) }
        // What follows a refusal on its channel (TLS's unclean shutdown) is no news.
        guard refusedEpoch != epoch else { return logger.debug("connection error", metadata: ["error": "\(error)"]) }
        statistics.lastError = "\(error)"
        logger.warning("connection error", metadata: ["error": "\(error)"])
    }

    func channelClosed(epoch: Int) {
        guard epoch == self.epoch else { return }
        logger.debug("connection closed", metadata: ["open_streams": "\(machine.inFlight.count)"])
        self.epoch += 1  // anything still in flight from this channel is stale from now on
        channel = nil
        handler = nil
        unflushedBytes = 0
        lingerTask?.cancel()
        lingerTask = nil
        inRead = false
        apply(machine.closed(now: now))
    }

    // MARK: carrying out actions

    private func apply(_ action: Machine.Action) {
        if action.connect { connect() }
        if action.renewToken { renewToken() }
        if !action.writes.isEmpty { write(action.writes) }
        for s in action.settled {
            pendingOutcomes.append(
                Outcome(
                    notification: s.request.job.notification, delivery: s.delivery, code: s.code,
                    attempts: s.request.attempts, connection: index, ambiguousResends: s.request.ambiguousResends,
                    uniqueID: s.uniqueID))
            // The metadata is built only when it is logged: every sandbox answer carries an id.
            if let uniqueID = s.uniqueID, logger.logLevel <= .debug {
                // Sandbox only: where to look the push up in Apple's Push Notifications Console.
                var metadata: Logger.Metadata = [
                    "job_id": "\(s.request.job.notification.jobID)", "apns_unique_id": "\(uniqueID)", "answer": "\(s.code ?? "200")",
                ]
                // A broadcast says which channel it went to (it has no token).
                if let channel = s.request.job.notification.channel { metadata["channel"] = "\(channel.value)" }
                logger.debug("answered", metadata: metadata)
            }
        }
        if !action.reroute.isEmpty { reroute(action.reroute, index) }
        if !action.cancel.isEmpty, let handler {
            // Reset the streams given up on; their resends wait for their back-off.
            for id in action.cancel { handler.cancel(streamID: id) }
            unflushedBytes += 13 * action.cancel.count
            logger.warning(
                "streams unanswered past the request timeout: reset and resent later",
                metadata: ["streams": "\(action.cancel.count)", "timeout_seconds": "\(configuration.requestTimeout.seconds)"])
            flushIfDue(force: true)
        }
        if action.breakerOpened {
            statistics.lastError = "mostly 5xx answers: paused (circuit breaker)"
            logger.warning(
                "most answers on this connection are 5xx: it pauses and its work goes to the other connections",
                metadata: ["window": "\(configuration.breaker.window)"])
        }
        if action.ping, let handler { handler.ping() }
        if let reason = action.credentialsRefused {
            // Loud: nothing more goes out on this connection until `authFailureDelay` has passed, and
            // with every connection refused the whole app stops (its jobs wait, nothing is lost).
            statistics.lastError = "credentials refused: \(reason)"
            logger.error(
                "APNs refused the provider credentials; this connection stops sending",
                metadata: ["reason": "\(reason)", "retry_in_seconds": "\(configuration.authFailureDelay.seconds)"])
        }
        if action.stuck {
            statistics.lastError = "no answer within \(configuration.requestTimeout.seconds) s"
            logger.warning(
                "connection stuck: a request or PING went unanswered; closing it, its requests are resent",
                metadata: ["open_streams": "\(machine.inFlight.count)", "timeout_seconds": "\(configuration.requestTimeout.seconds)"])
        }
        if action.close {
            flushIfDue(force: true)
            channel?.close(promise: nil)
        }
        if action.drained {
            tickTask?.cancel()
            tickTask = nil
            for p in drainPromises { p.succeed() }
            drainPromises.removeAll()
        }
        if action.hostRecovered { hostRecovered(index) }
        acceptsWork.store(machine.acceptsWork, ordering: .relaxed)
        queued.store(machine.queue.bulk.count, ordering: .relaxed)
        if machine.hasRoom { while let w = waiters.popFirst() { w.succeed() } }
        if !inRead { publishOutcomes() }
    }

    private func publishOutcomes() {
        var events = machine.takeEvents()
        events += ioEvents
        ioEvents = SenderEvents()
        guard !pendingOutcomes.isEmpty || !events.isEmpty else { return }
        let batch = OutcomeBatch(app: configuration.app, connection: index, outcomes: pendingOutcomes, events: events)
        pendingOutcomes.removeAll(keepingCapacity: true)
        onOutcomes(batch)
    }

    private func connect() {
        if tickTask == nil {
            // One timer per connection drives retries that are due, reconnects, deadlines and PINGs.
            tickTask = eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(20), delay: .milliseconds(20)) { [self] _ in
                apply(machine.tick(now: now))
            }
        }
        epoch += 1
        let epoch = self.epoch
        let wait = limiter.reserve(host)
        eventLoop.scheduleTask(in: max(.zero, wait)) { [self] in
            guard epoch == self.epoch else { return }
            open(epoch: epoch)
        }
    }

    private func open(epoch: Int) {
        // Resolved at every connect (in the connector): the connections to a host spread over all its
        // addresses, and a front end that left DNS is left too.
        let slot = self.slot
        let failures = connectFailures
        connector.connect(
            to: host, serverHostname: configuration.serverHostname ?? host.host, on: eventLoop,
            choose: { [self] addresses in
                let address = Self.address(among: addresses, slot: slot, failures: failures)
                eventLoop.assertInEventLoop()
                logger[metadataKey: "address"] = "\(address?.ipAddress ?? "?")"
                return address
            },
            handlers: { [self] channel in
                // Our own frame-level codec (HTTP2ClientFrameCodec): the preface, SETTINGS, the
                // requests' frames and the answers, with no stream channels and no per-frame writes.
                try channel.pipeline.syncOperations.addHandler(
                    HTTP2ClientHandler(connection: self, epoch: epoch, allocator: channel.allocator))
            }
        ).whenComplete { [self] result in
            guard epoch == self.epoch else {
                if case .success(let c) = result { c.close(promise: nil) }
                return
            }
            switch result {
            case .success(let c):
                channel = c
            case .failure(let error):
                connectFailures += 1
                if let refusal = refusal(for: error) {
                    refuse(refusal)
                } else {
                    statistics.lastError = "\(error)"
                    logger.warning("connect failed", metadata: ["error": "\(error)"])
                }
                self.epoch += 1
                apply(machine.connectFailed(now: now))
            }
        }
    }

    private func renewToken() {
        guard case .token(let cache, _) = configuration.authentication, let rejected = token else { return }
        do {
            try cache.renew(rejectedIssuedAt: rejected.issuedAt)
            token = nil  // read again before the next write
        } catch {
            logger.error("provider token renewal failed", metadata: ["error": "\(error)"])
        }
    }

    /// The `authorization` value for the next requests (token authentication), from the shared cache.
    private func bearer() -> String? {
        guard case .token(let cache, _) = configuration.authentication else { return nil }
        do {
            let t = try cache.current()
            token = t
            // Equal strings sharing storage compare in O(1): the usual case, the same token again.
            if let authorization, authorization.token == t.value { return authorization.value }
            let value = "bearer " + t.value
            authorization = (t.value, value)
            return value
        } catch {
            logger.error("cannot make a provider token", metadata: ["error": "\(error)"])
            return nil
        }
    }

    private func write(_ writes: [Machine.Write]) {
        guard let handler else { return }
        let authority = configuration.serverHostname ?? host.host
        let authorization = bearer()
        var bytes = 0
        // HEADERS and DATA straight into the flush's buffer (the codec's HPACK encoder holds the
        // indexing policy: docs/design.md §5.7.2).
        for w in writes {
            bytes += handler.write(streamID: w.streamID, job: w.request.job, authority: authority, authorization: authorization)
        }
        unflushedBytes += bytes
        ioEvents.framesWritten += writes.count
        ioEvents.bytesWritten += bytes
        // Streams open at most (the binary sender's replay high-water mark, for the same dashboard field).
        statistics.maxReplayCount = max(statistics.maxReplayCount, machine.inFlight.count)
        flushIfDue(force: false)
    }

    /// Flushes when `batchBytes` are waiting, else within `linger`: the frames of many streams leave
    /// in one write, as the binary sender's Nagle-style batching.
    private func flushIfDue(force: Bool) {
        guard unflushedBytes > 0, let handler else { return }
        if force || unflushedBytes >= configuration.batchBytes || linger <= .zero {
            lingerTask?.cancel()
            lingerTask = nil
            unflushedBytes = 0
            ioEvents.writes += 1
            handler.flush()
        } else if lingerTask == nil {
            lingerTask = eventLoop.scheduleTask(in: linger) { [self] in
                lingerTask = nil
                flushIfDue(force: true)
            }
        }
    }
}
