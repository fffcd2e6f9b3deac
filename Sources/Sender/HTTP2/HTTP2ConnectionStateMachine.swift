import NIOCore

/// The logic of one HTTP/2 connection to APNs across its reconnects: which requests are written on
/// which stream, how many streams may be open, what each answer, reset, GOAWAY or drop means for the
/// requests, and when to connect, ping, close or reroute. A value type with no I/O: events in, actions
/// out (as swift-nio's own state machines); `HTTP2Connection` drives it on one event loop. Times are
/// that loop's: instants are `NIODeadline`s and spans `TimeAmount`s, passed in with the events that
/// need them, so tests choose them.
///
/// Rules (docs/design.md §5.6):
/// - permits = min(the server's SETTINGS_MAX_CONCURRENT_STREAMS, `streamCap`), but 1 until the first
///   answer that shows the credentials were accepted: a refused credential then costs one request,
///   not a window of them;
/// - streams above a GOAWAY's last-stream-id and REFUSED_STREAM resets were never processed: resent,
///   counted `replayed`, at once the first time and after a back-off when it repeats; streams
///   unanswered when the connection dies, or reset otherwise, may have been processed: resent,
///   counted `ambiguous` (the only duplicate window);
/// - 500 / 503 / 429 and every resend that is not proved "not processed" (a reset, a lost connection,
///   a stream past its deadline) count against the job's retry budget (`RetryBudget`): resent after
///   an exponential back-off with jitter, from a queue of due times that holds no stream, until
///   `give_up_after_s` after the first failure (`gateway-gave-up`) or the job's `apns-expiration`
///   (`expired`); the resends proved "not processed" have the same deadline (set at a job's first
///   failure or resend, whichever comes first), and no resend is written past the job's expiration;
/// - 429 TooManyRequests is about one device token: that token's jobs wait for the job's back-off
///   (a hold per token), and the connection's streams do not change;
/// - the streams (`AIMDWindow`) halve when the 5xx share rises with them or on timeouts, and other
///   answers grow them back; (almost) only 5xx answers pause the connection (`CircuitBreaker`): its
///   queue goes to the others, then one probe, and a good probe gives it back its full window;
/// - streams open and nothing read for `requestTimeout`, or a PING unanswered as long, means the
///   connection is stuck: it is closed (so its streams count as ambiguous) and reopened; one stream
///   unanswered for `requestTimeout` while others are answered is reset (CANCEL) and resent;
/// - a drain finishes when every request has an answer; there is nothing to prove by time.
struct HTTP2ConnectionStateMachine<Job> {
    struct Configuration {
        var streamCap = 1000
        var queueCapacity = 8192
        var requestTimeout = TimeAmount.seconds(10)
        var pingInterval = TimeAmount.seconds(30)
        /// Back-off and give-up time of every retry (5xx, 429, resets, lost connections, timeouts).
        var budget = RetryBudget()
        var window = AIMDWindow.Settings()
        var breaker = CircuitBreaker.Settings()
        var reconnect = ReconnectPolicy()
        /// How long a connection whose credentials were refused waits before trying again.
        var authFailureDelay = TimeAmount.seconds(60)
    }

    /// A job in this connection's hands, with its history (it travels along when rerouted).
    struct Request {
        var job: Job
        /// Times written to a connection.
        var attempts = 0
        /// Where its retries end (`RetryBudget.Deadline`, kept as its two fields so the request, copied
        /// between the queue, the streams and the actions, stays small); set at its first failure or
        /// resend.
        var deadlineAt = NIODeadline.distantFuture
        var deadlineByExpiry = false
        /// Failures that count against the retry budget (5xx, 429, resets, lost, timed out) so far.
        var failures: UInt16 = 0
        /// Resends proved "not processed" (REFUSED_STREAM, above a GOAWAY) so far.
        var replays: UInt16 = 0
        /// Already resent once after 403 ExpiredProviderToken.
        var renewedToken = false
        /// Times resent after its fate was unknown (see `Outcome.ambiguousResends`).
        var ambiguousResends: UInt8 = 0

        var deadline: RetryBudget.Deadline { RetryBudget.Deadline(at: deadlineAt, byExpiry: deadlineByExpiry) }

        /// Requeued after a write that may have been processed: a possible duplicate.
        mutating func noteAmbiguous() {
            if ambiguousResends < .max { ambiguousResends += 1 }
        }

        init(job: Job) { self.job = job }
    }

    struct Settled {
        var request: Request
        var delivery: Delivery
        var code: String?
        /// The answer's `apns-unique-id` (sandbox only).
        var uniqueID: String? = nil
    }

    struct Write {
        var streamID: UInt32
        var request: Request
    }

    /// What the driver does after an event, in field order.
    struct Action {
        /// Open a connection now.
        var connect = false
        /// Requests to write (HEADERS + DATA each) on the current connection, then flush.
        var writes: [Write] = []
        /// Requests finished for good: report their outcomes.
        var settled: [Settled] = []
        /// Requests to hand to another connection of the app (5xx retries, refused credentials, an
        /// open circuit breaker).
        var reroute: [Request] = []
        /// Streams to reset (RST_STREAM CANCEL): unanswered past `requestTimeout`, resent.
        var cancel: [UInt32] = []
        /// The circuit breaker opened: mostly 5xx answers (log it).
        var breakerOpened = false
        /// A probe found the host answering again after a pause: the other connections to it need not
        /// wait out theirs (`hostAnswers`).
        var hostRecovered = false
        /// Renew the provider token before writing `writes` (403 ExpiredProviderToken).
        var renewToken = false
        var ping = false
        /// Close the current connection (its unanswered streams come back through `closed`).
        var close = false
        /// The credentials were refused with this reason: log it loudly.
        var credentialsRefused: String?
        /// The connect was refused in a way retrying cannot fix (`HTTP2ConnectRefusal`): report it.
        var connectRefused = false
        /// Why `close` was asked for when it is a failure: a request or PING unanswered for `requestTimeout`.
        var stuck = false
        /// The drain asked for is complete: nothing queued, nothing unanswered, connection closed.
        var drained = false
    }

    enum Phase: Equatable {
        /// No connection and no work.
        case idle
        case connecting
        case active
        /// GOAWAY received (or stream ids ran out): no new streams; closes once the rest are answered.
        case goingAway
        /// Close requested; waiting for `closed`.
        case closing
        case waitingToReconnect(at: NIODeadline)
        /// Drained and closed; new work reopens it.
        case closed
    }

    struct InFlight {
        var request: Request
        var sentAt: NIODeadline
    }

    let configuration: Configuration
    private(set) var phase = Phase.idle
    /// What waits for a stream, per lane: the priority lane's requests are always written first
    /// (`docs/design.md §1.4`); each lane keeps its order.
    private(set) var queue = LaneFIFO<Request>()
    private(set) var inFlight: [UInt32: InFlight] = [:]
    /// Retries waiting for their time (back-off); `elsewhere` ones are rerouted when due.
    private(set) var delayed = DueQueue<(request: Request, elsewhere: Bool)>()
    /// When the open streams are next checked against the per-stream deadline.
    private var nextStreamCheck = NIODeadline.distantPast
    private(set) var window: AIMDWindow
    private(set) var breaker: CircuitBreaker
    /// Device tokens answered 429 TooManyRequests, by key, and until when their jobs wait (pruned as
    /// they pass). Empty in the common case, which the per-request path checks first.
    private(set) var tokenHolds: [UInt64: NIODeadline] = [:]
    private var nextHoldSweep = NIODeadline.distantPast
    /// The wall clock's time since 1970 minus this machine's clock's time since its origin
    /// (`now - .distantPast`): what turns a job's `apns-expiration` into a deadline.
    var wallClockOffset = TimeAmount.zero
    /// A job's `apns-expiration` (epoch seconds, 0 = none), read at its first failure.
    private let expiryOf: (Job) -> UInt32
    /// What becomes of a job instead of being written (its campaign cancelled or paused: design §2.10,
    /// §2.11), checked right before it would be; nil from it: write it. nil: nothing is ever held back.
    private let insteadOf: ((Job) -> Delivery?)?
    /// A job's lane, for a request put back or adopted (new work comes with its lane).
    private let laneOf: (Job) -> Lane
    /// A job's device token (a broadcast's channel), as a key for the holds after 429; nil: a 429
    /// holds its own job only.
    private let tokenOf: ((Job) -> UInt64)?
    private(set) var events = SenderEvents()
    private(set) var draining = false
    /// The credentials were refused: no writes until the connection is reopened after `authFailureDelay`.
    private(set) var suspended = false
    /// The last connect was refused for good (`connectRefused`) and none has succeeded since: the
    /// connection is not up even when it is idle (`run`'s readiness).
    private(set) var refused = false
    private var authenticated = false
    private var serverMaxStreams: Int?
    /// The id of the next stream opened (internal so tests can start near the end of the id space).
    var nextStreamID: UInt32 = 1
    private var lastRead = NIODeadline.distantPast
    private var pingSentAt: NIODeadline?
    /// When the connection last went from no open stream to some (the wait for an answer starts there).
    private var busySince = NIODeadline.distantPast
    private var reconnectAttempt = 0
    private var random: any RandomNumberGenerator

    /// How much bulk work the caller may keep queued here (``hasRoom``): `roomLead` windows of streams
    /// (`permits`), at least `roomFloor` requests, at most `queueCapacity`. The pipeline marks a batch
    /// "written" right before it hands the batch over (design §2.4), so what waits here unwritten is what
    /// a crash of the process counts `ambiguous` without cause: a few windows, not the whole capacity
    /// (with 8 192 queued per connection, three kills counted 7 561 for 1 000 real duplicates). Four
    /// windows cover the send stage's turn (its gate reply, encoding and the mark's round trip) at full
    /// rate, where two windows were a few milliseconds, less than a mark took on a busy machine.
    static var roomLead: Int { 4 }
    static var roomFloor: Int { 256 }

    /// Stream ids are 31 bits and never reused on a connection: past this, the connection is retired.
    static var lastUsableStreamID: UInt32 { UInt32(Int32.max) - 2 }

    init(
        configuration: Configuration, random: some RandomNumberGenerator = SystemRandomNumberGenerator(),
        expiry: @escaping (Job) -> UInt32 = { _ in 0 },
        instead: ((Job) -> Delivery?)? = nil,
        lane: @escaping (Job) -> Lane = { _ in .bulk }, token: ((Job) -> UInt64)? = nil
    ) {
        self.configuration = configuration
        self.random = random
        self.expiryOf = expiry
        self.insteadOf = instead
        self.laneOf = lane
        self.tokenOf = token
        self.window = AIMDWindow(settings: configuration.window)
        self.breaker = CircuitBreaker(settings: configuration.breaker)
    }

    /// Streams the server and the configuration allow.
    private var streamLimit: Int { max(1, min(serverMaxStreams ?? configuration.streamCap, configuration.streamCap)) }

    /// Streams this connection may have open now: 1 until authenticated and while probing, else the
    /// AIMD window under the limit.
    var permits: Int {
        guard authenticated, breaker.state == .closed else { return 1 }
        return window.limit(cap: streamLimit)
    }

    /// Whether the pool should give this connection new work.
    var acceptsWork: Bool { !suspended && phase != .closed && !breaker.isOpen }

    /// Whether the caller's queue is within its bound (back-pressure: ``roomLead``). The bulk lane's
    /// only: the priority lane is bounded by the pipeline's own budget and never waits for room.
    var hasRoom: Bool { queue.bulk.count <= min(configuration.queueCapacity, max(Self.roomFloor, Self.roomLead * permits)) }

    var isEmpty: Bool { queue.isEmpty && inFlight.isEmpty && delayed.isEmpty }

    /// Counters since the last call.
    mutating func takeEvents() -> SenderEvents {
        defer { events = SenderEvents() }
        return events
    }

    // MARK: work arriving

    mutating func enqueue(_ jobs: some Sequence<Job>, lane: Lane = .bulk, now: NIODeadline) -> Action {
        // Straight into the queue: an array of requests in between was one more retain and release
        // of every job.
        for job in jobs { queue.append(Request(job: job), lane: lane) }
        var action = Action()
        wakeUp(now: now, into: &action)
        pump(now: now, into: &action)
        return action
    }

    /// Requests from the caller or rerouted from another connection (with their history).
    mutating func adopt(_ requests: [Request], now: NIODeadline) -> Action {
        for r in requests { queue.append(r, lane: laneOf(r.job)) }
        var action = Action()
        wakeUp(now: now, into: &action)
        pump(now: now, into: &action)
        return action
    }

    // MARK: the connection

    mutating func connected(now: NIODeadline) -> Action {
        guard phase == .connecting else { return Action(close: true) }
        phase = .active
        refused = false
        authenticated = false
        serverMaxStreams = nil
        nextStreamID = 1
        lastRead = now
        pingSentAt = nil
        var action = Action()
        pump(now: now, into: &action)
        return action
    }

    mutating func connectFailed(now: NIODeadline) -> Action {
        guard phase == .connecting else { return Action() }
        return afterConnection(now: now)
    }

    /// The connect (or its TLS handshake) failed in a way that trying again cannot fix: a proxy
    /// refusing our credentials, a server without h2, a certificate that does not verify. As with
    /// refused credentials the connection stops: its queue goes to the other connections (not while
    /// draining: nothing else would take it), and once it is closed (`connectFailed` or `closed`
    /// follows) it waits `authFailureDelay` before it tries again, not its reconnect back-off.
    mutating func connectRefused(now: NIODeadline) -> Action {
        var action = Action()
        guard phase == .connecting || phase == .active else { return action }
        action.connectRefused = true
        refused = true
        suspend(into: &action)
        return action
    }

    /// The server's SETTINGS (nil: it did not name a limit).
    mutating func settings(maxConcurrentStreams: Int?, now: NIODeadline) -> Action {
        lastRead = now
        if let maxConcurrentStreams { serverMaxStreams = maxConcurrentStreams }
        var action = Action()
        pump(now: now, into: &action)
        return action
    }

    mutating func pingAnswered(now: NIODeadline) {
        lastRead = now
        pingSentAt = nil
    }

    /// A complete answer on one stream: `:status` from HEADERS, reason and timestamp from the body.
    struct Answer: Equatable {
        var streamID: UInt32
        var status: Int
        var reason: String?
        var timestamp: Int64?
        /// `apns-unique-id` (sandbox answers only).
        var uniqueID: String? = nil
    }

    /// A complete answer on `streamID` (status from HEADERS, reason and timestamp from the body).
    mutating func response(streamID: UInt32, status: Int, reason: String?, timestamp: Int64?, now: NIODeadline) -> Action {
        responses(CollectionOfOne(Answer(streamID: streamID, status: status, reason: reason, timestamp: timestamp)), now: now)
    }

    /// The answers of one read burst, in the order they arrived: each settles (or requeues) its
    /// request exactly as one `response` would, and the freed streams are refilled once at the end,
    /// so a burst of a hundred answers becomes one action with a hundred writes instead of a hundred
    /// actions with one each (the per-answer action was ~5% of the sender's CPU).
    ///
    /// `refill: false` is for the answers read just before the connection closed: they settle, but no
    /// new stream is opened on a channel that is gone (its requests would count as unanswered).
    mutating func responses(_ answers: some Sequence<Answer>, now: NIODeadline, refill: Bool = true) -> Action {
        lastRead = now
        var action = Action()
        for answer in answers { settle(answer, now: now, into: &action) }
        finishIfGoingAway(into: &action)
        if refill { pump(now: now, into: &action) }
        checkDrained(into: &action)
        return action
    }

    private mutating func settle(_ answer: Answer, now: NIODeadline, into action: inout Action) {
        let (streamID, status, reason, timestamp) = (answer.streamID, answer.status, answer.reason, answer.timestamp)
        // An answer for a stream already given up on (reset, timed out) is ignored: its request was
        // resent, and settling it twice would count it twice.
        guard let answered = inFlight.removeValue(forKey: streamID) else { return }
        events.answerLatency.record(now - answered.sentAt)
        if status == 200 {
            // Nearly every answer: settled without working out a verdict or a code it does not use.
            noteAuthenticated()
            if !window.isFull { window.success(cap: streamLimit) }
            noteBreaker(serverError: false, now: now, into: &action)
            action.settled.append(Settled(request: answered.request, delivery: .accepted, code: nil, uniqueID: answer.uniqueID))
            return
        }
        var request = answered.request
        let verdict = HTTP2Verdict.of(status: status, reason: reason, timestamp: timestamp)
        let code = HTTP2Verdict.code(status: status, reason: reason)
        // A 5xx is sampled: the window shrinks only if their share rises with it. A 429 is about one
        // device token (Apple: "The server received too many requests for the same device token"):
        // it leaves the connection's window alone and holds that token (`retryLater`).
        if status >= 500 { window.serverError(cap: streamLimit) } else if status != 429 { window.success(cap: streamLimit) }
        noteBreaker(serverError: status >= 500, now: now, into: &action)
        switch verdict {
        case .accepted:
            noteAuthenticated()
            action.settled.append(Settled(request: request, delivery: .accepted, code: nil))
        case .rejected(let rejection):
            noteAuthenticated()
            action.settled.append(Settled(request: request, delivery: .rejected(rejection), code: code, uniqueID: answer.uniqueID))
        case .renewProviderToken where !request.renewedToken:
            request.renewedToken = true
            events.retried += 1
            events.retriedBy[.expiredProviderToken] += 1
            queue.prepend(request, lane: laneOf(request.job))
            action.renewToken = true
        case .renewProviderToken, .stopConnection:
            queue.prepend(request, lane: laneOf(request.job))
            if !suspended { action.credentialsRefused = code }
            suspend(into: &action)
        case .retryLater:
            noteAuthenticated()
            retryLater(request, reason: .tooManyRequests, elsewhere: false, now: now, into: &action)
        case .retryElsewhere:
            noteAuthenticated()
            retryLater(request, reason: .serverError, elsewhere: true, now: now, into: &action)
        }
    }

    /// A failure that counts against the job's retry budget: it waits for its back-off in `delayed`
    /// (no stream, no place in the queue), or is dead-lettered when the budget or its expiration ran
    /// out. `elsewhere`: when due, it goes to another connection (a 5xx may be this host's).
    private mutating func retryLater(
        _ request: Request, reason: RetryReason, elsewhere: Bool, now: NIODeadline, into action: inout Action
    ) {
        var request = request
        if request.failures < .max { request.failures += 1 }
        startDeadline(&request, now: now)
        switch configuration.budget.next(failures: Int(request.failures), now: now, deadline: request.deadline, random: &random) {
        case .retry(let at):
            if reason == .serverError || reason == .tooManyRequests { events.retried += 1 }
            events.retriedBy[reason] += 1
            delayed.insert((request, elsewhere), due: at)
            // The token's other jobs wait as long: more requests for it now would only be refused.
            if reason == .tooManyRequests, let key = tokenOf?(request.job) { tokenHolds[key] = max(tokenHolds[key] ?? .distantPast, at) }
        case .giveUp:
            giveUp(request, expired: false, into: &action)
        case .expired:
            giveUp(request, expired: true, into: &action)
        }
    }

    /// A resend proved "not processed" (REFUSED_STREAM, above a GOAWAY): at once the first time, after
    /// a back-off when it repeats for the same request (rather than spin), and within the job's
    /// deadline like any other retry: a server that refuses every stream for an hour, or a job that
    /// expires meanwhile, ends it as 5xx retries end (`gateway-gave-up`, `expired`).
    private mutating func replay(_ request: Request, reason: RetryReason, now: NIODeadline, into action: inout Action) {
        var request = request
        if request.replays < .max { request.replays += 1 }
        startDeadline(&request, now: now)
        var due = now
        if request.replays >= 2 { due = due + configuration.budget.backoff.delay(attempt: Int(request.replays) - 2, random: &random) }
        switch configuration.budget.resend(at: due, now: now, deadline: request.deadline) {
        case .retry(let at):
            events.replayed += 1
            events.retriedBy[reason] += 1
            if at <= now {
                queue.prepend(request, lane: laneOf(request.job))
            } else {
                delayed.insert((request, false), due: at)
            }
        case .giveUp:
            giveUp(request, expired: false, into: &action)
        case .expired:
            giveUp(request, expired: true, into: &action)
        }
    }

    /// Where a job's retries end is set at its first failure or resend, whichever comes first.
    private func startDeadline(_ request: inout Request, now: NIODeadline) {
        guard Int(request.failures) + Int(request.replays) == 1 else { return }
        let wallNow = wallClockOffset + (now - .distantPast)
        let d = configuration.budget.deadline(firstFailureAt: now, expiry: expiryOf(request.job), wallNow: wallNow)
        request.deadlineAt = d.at
        request.deadlineByExpiry = d.byExpiry
    }

    /// Dead-letters a job whose retries ran out: `gateway-gave-up`, or `expired` (Apple would discard it).
    private mutating func giveUp(_ request: Request, expired: Bool, into action: inout Action) {
        events.gaveUp += 1
        let r = expired ? RetryBudget.expiredReason : RetryBudget.gaveUpReason
        action.settled.append(Settled(request: request, delivery: .rejected(.transient(reason: r)), code: r))
    }

    /// Feeds the circuit breaker; when it opens, this connection's waiting work goes to the others.
    private mutating func noteBreaker(serverError: Bool, now: NIODeadline, into action: inout Action) {
        var probing = false
        if case .halfOpen = breaker.state { probing = true }
        guard breaker.record(serverError: serverError, now: now) else {
            guard probing, breaker.state == .closed else { return }
            // A good probe closed it: the window starts afresh, at the cap. What it measured while the
            // host answered only 5xx says nothing about load now, and a host back from an outage
            // should have its full rate at once (if it cannot take it, its share rises again).
            window = AIMDWindow(settings: configuration.window)
            action.hostRecovered = true
            return
        }
        action.breakerOpened = true
        if !draining { action.reroute += queue.removeAll() }
    }

    /// RST_STREAM from the server. REFUSED_STREAM means "not processed" (RFC 9113 §8.7); any other code
    /// leaves it open whether the request was processed.
    mutating func reset(streamID: UInt32, refused: Bool, now: NIODeadline) -> Action {
        lastRead = now
        var action = Action()
        guard var request = inFlight.removeValue(forKey: streamID)?.request else { return action }
        if refused {
            replay(request, reason: .refusedStream, now: now, into: &action)
        } else {
            // It may have been processed, and a server that resets every stream must not be answered
            // with an immediate resend (a hot loop): it backs off, bounded by time.
            events.ambiguous += 1
            request.noteAmbiguous()
            retryLater(request, reason: .reset, elsewhere: false, now: now, into: &action)
        }
        finishIfGoingAway(into: &action)
        pump(now: now, into: &action)
        return action
    }

    /// GOAWAY: streams above `lastStreamID` were not and will not be processed, so they are resent
    /// without risk; the ones at or below it still get their answers.
    mutating func goAway(lastStreamID: UInt32, now: NIODeadline) -> Action {
        lastRead = now
        var action = Action()
        let unprocessed = inFlight.keys.filter { $0 > lastStreamID }.sorted()
        for id in unprocessed.reversed() {
            if let r = inFlight.removeValue(forKey: id)?.request { replay(r, reason: .goAway, now: now, into: &action) }
        }
        if phase == .active { phase = .goingAway }
        finishIfGoingAway(into: &action)
        return action
    }

    /// The connection is gone (closed by either side, or failed).
    mutating func closed(now: NIODeadline) -> Action {
        switch phase {
        case .active, .goingAway, .closing, .connecting: break
        default: return Action()
        }
        // Unanswered streams may have been processed: resent after a back-off, and counted as
        // possible duplicates.
        var lost = Action()
        let unanswered = inFlight.keys.sorted()
        for id in unanswered {
            if var r = inFlight.removeValue(forKey: id)?.request {
                r.noteAmbiguous()
                retryLater(r, reason: .connectionLost, elsewhere: false, now: now, into: &lost)
            }
        }
        events.ambiguous += unanswered.count
        var action = afterConnection(now: now)
        action.settled += lost.settled
        return action
    }

    /// Called every so often by the driver: retries that are due, reconnects, deadlines, PINGs.
    mutating func tick(now: NIODeadline) -> Action {
        var action = Action()
        while let entry = delayed.popDue(now: now) {
            if entry.elsewhere && !draining {
                action.reroute.append(entry.request)
            } else {
                queue.append(entry.request, lane: laneOf(entry.request.job))
            }
        }
        _ = breaker.tick(now: now)
        if !tokenHolds.isEmpty, now >= nextHoldSweep {
            tokenHolds = tokenHolds.filter { $0.value > now }
            nextHoldSweep = now + .seconds(1)
        }
        if case .waitingToReconnect(let at) = phase, at <= now {
            phase = .idle
            suspended = false
        }
        wakeUp(now: now, into: &action)
        if phase == .active || phase == .goingAway {
            // Stuck = streams open and nothing read for `requestTimeout`. Not the age of the oldest
            // request: with a thousand streams open a slow but working server answers each late, and
            // closing it would only turn its answers into ambiguous resends.
            let stuck =
                (pingSentAt.map { now - $0 >= configuration.requestTimeout } ?? false)
                || (!inFlight.isEmpty && now - max(lastRead, busySince) >= configuration.requestTimeout)
            if stuck {
                window.timeout(cap: streamLimit)
                phase = .closing
                action.close = true
                action.stuck = true
                return action
            }
            expireStreams(now: now, into: &action)
            if pingSentAt == nil, now - lastRead >= configuration.pingInterval {
                pingSentAt = now
                action.ping = true
            }
        }
        pump(now: now, into: &action)
        checkDrained(into: &action)
        return action
    }

    /// Stop taking new work from the caller once everything held has an answer, then close.
    mutating func drain(now: NIODeadline) -> Action {
        draining = true
        var action = Action()
        checkDrained(into: &action)
        return action
    }

    // MARK: internals

    /// Streams unanswered for `requestTimeout` on a connection that answers others: each is reset
    /// and resent (it may have been processed: ambiguous). The open streams (at most the permits)
    /// are looked at four times per `requestTimeout`, not on every request: nothing is added to the
    /// per-request path, and a stream is found at most a quarter of the timeout late.
    private mutating func expireStreams(now: NIODeadline, into action: inout Action) {
        guard now >= nextStreamCheck, !inFlight.isEmpty else { return }
        nextStreamCheck = now + .nanoseconds(configuration.requestTimeout.nanoseconds / 4)
        // Only streams sent before the connection last read something: otherwise it may be the
        // connection that is stuck, which the rule above (close, PING) judges.
        var expired: [UInt32] = []
        for (id, open) in inFlight where now - open.sentAt >= configuration.requestTimeout && lastRead > open.sentAt {
            expired.append(id)
        }
        // Answers that do not come in time are a sign of load: fewer streams.
        if !expired.isEmpty { window.timeout(cap: streamLimit) }
        for id in expired.sorted() {
            guard var r = inFlight.removeValue(forKey: id)?.request else { continue }
            action.cancel.append(id)
            events.ambiguous += 1
            r.noteAmbiguous()
            retryLater(r, reason: .streamTimeout, elsewhere: false, now: now, into: &action)
        }
    }

    private mutating func noteAuthenticated() {
        authenticated = true
        reconnectAttempt = 0
    }

    private mutating func suspend(into action: inout Action) {
        suspended = true
        // Its waiting jobs go to a connection that can send them; while draining they stay (nothing
        // else will take them) and go out when this one reopens.
        if !draining {
            action.reroute += queue.removeAll()
        }
        if phase == .active { phase = .goingAway }
    }

    private mutating func finishIfGoingAway(into action: inout Action) {
        if phase == .goingAway && inFlight.isEmpty {
            phase = .closing
            action.close = true
        }
    }

    private mutating func afterConnection(now: NIODeadline) -> Action {
        var action = Action()
        if suspended {
            phase = .waitingToReconnect(at: now + configuration.authFailureDelay)
        } else if !queue.isEmpty || !delayed.isEmpty {
            // Back off before reconnecting: APNs treats rapid reconnects as an attack.
            let delay = configuration.reconnect.delay(attempt: reconnectAttempt, random: &random)
            reconnectAttempt += 1
            phase = .waitingToReconnect(at: now + delay)
        } else {
            phase = draining ? .closed : .idle
        }
        checkDrained(into: &action)
        return action
    }

    /// Whether a connection was ever opened: the first is not a reconnect.
    private var hasConnected = false

    private mutating func wakeUp(now: NIODeadline, into action: inout Action) {
        guard !queue.isEmpty, phase == .idle || phase == .closed else { return }
        phase = .connecting
        // `reconnects` counts connections after the first (as the binary shard does): a rate of them
        // is what an operator watches for.
        if hasConnected { events.reconnects += 1 }
        hasConnected = true
        action.connect = true
    }

    private mutating func pump(now: NIODeadline, into action: inout Action) {
        guard phase == .active, !suspended, !breaker.isOpen else { return }
        let permits = self.permits  // fixed for this pump: worked out once, not per stream opened
        while inFlight.count < permits, let (popped, lane) = queue.popFirst() {
            var request = popped
            if let insteadOf, let instead = insteadOf(request.job) {
                // Its campaign was cancelled (or paused): settled so, not written.
                action.settled.append(Settled(request: request, delivery: instead, code: nil))
                continue
            }
            // A resend that waited (for a connection, after a GOAWAY) past the job's expiration is not
            // written: Apple would discard it. Only a request that has failed has a deadline to pass.
            if request.deadlineByExpiry, now >= request.deadlineAt {
                giveUp(request, expired: true, into: &action)
                continue
            }
            if !tokenHolds.isEmpty, let key = tokenOf?(request.job), let until = tokenHolds[key], until > now {
                delayed.insert((request, false), due: until)
                continue
            }
            if nextStreamID > Self.lastUsableStreamID {
                queue.prepend(request, lane: lane)
                phase = .goingAway
                finishIfGoingAway(into: &action)
                return
            }
            request.attempts += 1
            if inFlight.isEmpty { busySince = now }
            let id = nextStreamID
            nextStreamID += 2
            inFlight[id] = InFlight(request: request, sentAt: now)
            action.writes.append(Write(streamID: id, request: request))
        }
    }

    /// Another connection's probe found the host answering again: a pause under way ends now, and the
    /// next request is this connection's probe (a host back from an outage gets every connection back
    /// within a round trip, not as each one's pause of up to `maxOpenFor` ends).
    mutating func hostAnswers(now: NIODeadline) -> Action {
        var action = Action()
        breaker.endPause()
        pump(now: now, into: &action)
        return action
    }

    /// The last `count` of the bulk queue (the newest), for another connection with less to do; nothing
    /// while draining. A job whose token is held after a 429 stays (with its hold): elsewhere nothing
    /// would hold it, and it would meet Apple's limit for that device again.
    mutating func handOver(count: Int, now: NIODeadline) -> [Request] {
        guard !draining else { return [] }
        var out = queue.removeLastBulk(count)
        guard !tokenHolds.isEmpty, let tokenOf else { return out }
        var kept: [Request] = []
        out.removeAll { request in
            guard let until = tokenHolds[tokenOf(request.job)], until > now else { return false }
            kept.append(request)
            return true
        }
        for request in kept { queue.append(request, lane: .bulk) }
        return out
    }

    private mutating func checkDrained(into action: inout Action) {
        guard draining, isEmpty else { return }
        switch phase {
        case .active, .goingAway:
            phase = .closing
            action.close = true
        case .idle, .waitingToReconnect:
            phase = .closed
            action.drained = true
        case .closed:
            action.drained = true
        case .closing, .connecting:
            break
        }
    }
}

extension HTTP2ConnectionStateMachine.Request: Sendable where Job: Sendable {}

/// Two `FIFO`s, one per lane: taken from the priority lane first, each lane in its own order. Counted
/// and indexed as one queue, the priority lane's items first.
struct LaneFIFO<Element> {
    private(set) var priority = FIFO<Element>()
    private(set) var bulk = FIFO<Element>()

    var count: Int { priority.count + bulk.count }
    var isEmpty: Bool { priority.isEmpty && bulk.isEmpty }

    mutating func append(_ element: Element, lane: Lane) {
        if lane == .priority { priority.append(element) } else { bulk.append(element) }
    }

    mutating func prepend(_ element: Element, lane: Lane) {
        if lane == .priority { priority.prepend(element) } else { bulk.prepend(element) }
    }

    mutating func popFirst() -> (element: Element, lane: Lane)? {
        if !priority.isEmpty, let e = priority.popFirst() { return (e, .priority) }
        return bulk.popFirst().map { ($0, .bulk) }
    }

    /// Everything, the priority lane's first.
    mutating func removeAll() -> [Element] {
        if priority.isEmpty { return bulk.removeAll() }
        return priority.removeAll() + bulk.removeAll()
    }

    /// The bulk lane's last `k` (the newest), in their order.
    mutating func removeLastBulk(_ k: Int) -> [Element] { bulk.removeLast(k) }
}

/// A first-in first-out queue that can also put items back at its head (a resent request goes before
/// newer ones). Standard library only: the state machine's one use of NIO is its clock's types.
struct FIFO<Element> {
    private var storage: [Element?] = []
    private var head = 0

    var count: Int { storage.count - head }
    var isEmpty: Bool { count == 0 }
    var first: Element? { head < storage.count ? storage[head] : nil }

    mutating func append(_ element: Element) { storage.append(element) }

    mutating func prepend(_ element: Element) {
        if head > 0 {
            head -= 1
            storage[head] = element
        } else {
            storage.insert(element, at: 0)
        }
    }

    mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        // Moved out, not copied and then cleared (a retain and a release of every element).
        var element: Element? = nil
        swap(&element, &storage[head])
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 4096 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    mutating func removeAll() -> [Element] {
        let all = storage[head...].compactMap { $0 }
        storage.removeAll(keepingCapacity: true)
        head = 0
        return all
    }

    /// The last `k` (at most `count`), in their order.
    mutating func removeLast(_ k: Int) -> [Element] {
        let k = min(max(0, k), count)
        guard k > 0 else { return [] }
        let tail = storage[(storage.count - k)...].compactMap { $0 }
        storage.removeLast(k)
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        }
        return tail
    }
}
