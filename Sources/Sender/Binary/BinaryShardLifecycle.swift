import NIOCore

/// What one binary shard decides about its connection and its drain: when to connect and to which
/// gateway after what back-off, which connection's events still count (epochs), when a connection
/// proved useful (so the back-off starts over), when to send the drain probe, what its answer or its
/// timeout means, and when the drain is finished and with what result. A value type with no I/O, beside
/// `BinaryConnectionStateMachine` (which decides about the notifications): events in (connect started,
/// connected, connect failed, error response, connection closed, probe sent, probe timed out, drain
/// requested), decisions out (connect to gateway G after back-off D, close the channel, send the probe,
/// finish the drain with result R), as `HTTP2ConnectionStateMachine` does for HTTP/2.
///
/// `Shard` drives both on its event loop and keeps what is about sockets and timers: the channel, the
/// bootstrap, the outgoing `ByteBuffer`, the `Scheduled` handles, the drain's promise and the waiters.
/// The process-wide `ConnectionLimiter` (a shared rate per gateway) is applied by the driver on top of
/// the back-off decided here.
struct BinaryShardLifecycle {
    enum State: Equatable {
        case idle
        /// A connection to `gateway` is decided and waits out its back-off.
        case waitingToConnect(GatewayAddress)
        case connecting(epoch: Int)
        case connected(epoch: Int)
        /// An error response arrived (or we gave up on the connection): waiting for it to close.
        case closing(epoch: Int)
        case stopped
    }

    /// The decision to connect: to `gateway`, after `backOff` (zero = now).
    struct Connect: Equatable {
        var gateway: GatewayAddress
        var backOff: TimeAmount
    }

    /// A drain in progress.
    struct Drain: Equatable {
        /// The probe on the current connection, once sent (nothing else is written after it).
        var probeIdentifier: UInt32?
        /// The gateway answered the probe: everything before it is proved processed.
        var answered = false
        /// The probe went unanswered for `drainTimeout`: the drain settles by time instead.
        var timedOut = false
    }

    /// What a drain request leads to.
    enum DrainStart: Equatable {
        /// The shard is stopped already (an earlier drain finished): nothing to drain, nothing to do.
        case alreadyStopped
        /// Nothing queued or kept: finish at once with this result.
        case finish(DrainOutcome)
        /// A drain is already in progress: the caller joins it.
        case joinExisting
        /// Send what is queued, then probe (the driver connects if needed and pumps).
        case proceed(Connect?)
    }

    /// What a closed connection leads to.
    enum Closed: Equatable {
        /// The shard is stopped: nothing more.
        case stopped
        /// Reconnect (nil when there is nothing to send).
        case idle(Connect?)
    }

    private let gateways: [GatewayAddress]
    private let reconnect: ReconnectPolicy
    private(set) var state: State = .idle
    /// Events from a connection carry the epoch it was made in; a later one ignores them.
    private(set) var epoch = 0
    /// Failed or useless connections since the last useful one: the back-off grows with it.
    private(set) var reconnectAttempt = 0
    private var gatewayCursor: Int
    private var connectionsMade = 0
    /// The current connection settled something or got an answer: the next reconnect has no back-off.
    private var connectionWasUseful = false
    private(set) var drain: Drain?

    init(shard index: Int, gateways: [GatewayAddress], reconnect: ReconnectPolicy) {
        precondition(!gateways.isEmpty)
        self.gateways = gateways
        self.reconnect = reconnect
        gatewayCursor = index % gateways.count  // spread shards evenly over the gateways
    }

    func isCurrent(_ epoch: Int) -> Bool { epoch == self.epoch }

    var isStopped: Bool { state == .stopped }
    var isDraining: Bool { drain != nil }
    var isClosing: Bool { if case .closing = state { true } else { false } }
    var isConnected: Bool { if case .connected = state { true } else { false } }

    /// Frames may be written now: connected, and no probe sent (nothing goes after it).
    var mayWrite: Bool { isConnected && drain?.probeIdentifier == nil }

    /// The gateway the next connection goes to.
    var nextGateway: GatewayAddress { gateways[gatewayCursor % gateways.count] }

    // MARK: connecting

    /// Decides a connection when there is none: the next gateway, after the back-off of the attempts
    /// that failed or were not useful since the last useful one.
    mutating func connectIfNeeded(random: inout some RandomNumberGenerator) -> Connect? {
        guard case .idle = state else { return nil }
        let gateway = nextGateway
        state = .waitingToConnect(gateway)
        let backOff = reconnectAttempt == 0 ? .zero : reconnect.delay(attempt: reconnectAttempt - 1, random: &random)
        return Connect(gateway: gateway, backOff: backOff)
    }

    /// The back-off is over and the driver starts connecting to `gateway`: the epoch the new
    /// connection's events carry, and whether it is a reconnect; nil if no longer wanted.
    mutating func connectStarting(to gateway: GatewayAddress) -> (epoch: Int, isReconnect: Bool)? {
        guard case .waitingToConnect(let g) = state, g == gateway else { return nil }
        state = .connecting(epoch: epoch)
        connectionWasUseful = false
        defer { connectionsMade += 1 }
        return (epoch, connectionsMade > 0)
    }

    /// The connection of `epoch` is up. False: it is no longer wanted (the driver closes it).
    mutating func connected(epoch connectionEpoch: Int) -> Bool {
        guard case .connecting(let e) = state, e == connectionEpoch else { return false }
        state = .connected(epoch: connectionEpoch)
        return true
    }

    /// The connection of `epoch` could not be made: the next attempt goes to the next gateway, after a
    /// longer back-off, if there is still something to send (`hasQueued` or a drain). Nil result: no
    /// new attempt; `ignored` is true when the event was stale.
    mutating func connectFailed(
        epoch connectionEpoch: Int, hasQueued: Bool, random: inout some RandomNumberGenerator
    ) -> (ignored: Bool, connect: Connect?) {
        guard case .connecting(let e) = state, e == connectionEpoch else { return (true, nil) }
        epoch += 1
        state = .idle
        reconnectAttempt += 1
        gatewayCursor += 1  // try the next gateway
        guard hasQueued || drain != nil else { return (false, nil) }
        return (false, connectIfNeeded(random: &random))
    }

    /// The current connection settled something or got an answer.
    mutating func connectionProvedUseful() { connectionWasUseful = true }

    /// We close the current connection (after an error response or a probe's answer). True: the
    /// driver closes its channel.
    mutating func closeRequested() -> Bool {
        guard case .connected(let e) = state else { return false }
        state = .closing(epoch: e)
        return true
    }

    /// The current connection closed (the driver already handed its unsettled notifications back to
    /// the queue: `hasQueued` is after that). A useful connection resets the back-off; a useless one
    /// lengthens it. An unanswered probe went with the connection: it is sent again on the next.
    mutating func connectionClosed(hasQueued: Bool, random: inout some RandomNumberGenerator) -> Closed {
        epoch += 1
        if drain?.answered == false { drain?.probeIdentifier = nil }
        if state == .stopped { return .stopped }
        state = .idle
        reconnectAttempt = connectionWasUseful ? 0 : reconnectAttempt + 1
        guard hasQueued || drain != nil else { return .idle(nil) }
        return .idle(connectIfNeeded(random: &random))
    }

    // MARK: answers

    /// An error response on the current connection. True: it answers the drain probe (everything
    /// before it was processed); false: an ordinary error, and a probe already sent was discarded with
    /// the rest.
    mutating func errorResponse(identifier: UInt32) -> Bool {
        connectionWasUseful = true
        if let probe = drain?.probeIdentifier, identifier == probe {
            drain?.answered = true
            return true
        }
        drain?.probeIdentifier = nil
        return false
    }

    // MARK: draining

    /// A drain is requested. `somethingKept`: notifications are queued, or kept in the replay buffer
    /// (settled ones in the grace window too: the gateway may not have read them yet, and closing now
    /// would lose whatever it discards after an error).
    mutating func drainRequested(somethingKept: Bool, random: inout some RandomNumberGenerator) -> DrainStart {
        if state == .stopped { return .alreadyStopped }
        if drain != nil { return .joinExisting }
        drain = Drain()
        if !somethingKept { return .finish(.nothingToDrain) }
        return .proceed(connectIfNeeded(random: &random))
    }

    /// The probe is due: a drain, connected, no probe on this connection yet and nothing left queued.
    func shouldSendProbe(queueIsEmpty: Bool) -> Bool {
        guard let d = drain, !d.answered else { return false }
        return isConnected && queueIsEmpty && d.probeIdentifier == nil
    }

    /// The probe went out with `identifier`; the driver (re)starts its timeout from now.
    mutating func probeSent(_ identifier: UInt32) { drain?.probeIdentifier = identifier }

    /// The probe's timeout fired: the drain settles by time instead.
    mutating func probeTimedOut() { drain?.timedOut = true }

    /// The drain is finished when nothing is queued or unsettled and the probe was answered or timed
    /// out: the result, and the shard is stopped (the driver closes a connected channel, fails the
    /// waiters and completes the promise). Nil: not yet.
    func finishDrainIfSettled(queueIsEmpty: Bool, hasUnsettled: Bool) -> DrainOutcome? {
        guard state != .stopped, let d = drain, queueIsEmpty, !hasUnsettled, d.answered || d.timedOut else { return nil }
        return d.answered ? .provedByProbe : .settledByTime
    }

    /// The shard stops (the drain finished). True: a channel is connected and the driver closes it.
    mutating func stop() -> Bool {
        defer { state = .stopped }
        return isConnected
    }

    /// For statistics: idle, backing-off, connecting, connected, draining, closing, stopped.
    var stateName: String {
        switch state {
        case .idle: "idle"
        case .waitingToConnect: reconnectAttempt > 0 ? "backing-off" : "idle"
        case .connecting: "connecting"
        case .connected: drain != nil ? "draining" : "connected"
        case .closing: "closing"
        case .stopped: "stopped"
        }
    }
}
