import APNsProtocol
import NIOCore

/// What one binary shard decides about its notifications across its connections: the bounded queue,
/// per-connection identifiers, the unsettled window, settlement by time and its grace window, what an
/// error response, a drain probe's answer or a dropped connection means for each notification, and
/// the outcomes and events that follow. A value type with no I/O: events in (submitted, frame taken,
/// flushed, write completed, settle tick, error response, probe answered, connection lost), decisions
/// out (frames to write, outcomes, notifications to resend, notes to log), as
/// `HTTP2ConnectionStateMachine` does for HTTP/2. Times are the event loop's (instants are `NIODeadline`s,
/// spans `TimeAmount`s), passed in, so tests choose them.
///
/// `Shard` drives it on its event loop, beside `BinaryShardLifecycle` (the connection's lifecycle and
/// epochs, reconnect back-off, gateway rotation, the drain and its probe: the other half of
/// the cut), and keeps only what is about sockets and timers: the channel, the outgoing buffer,
/// the linger, settle and probe-timeout timers.
///
/// Rules (docs/design.md §2.3–§2.5, §5.3):
/// - a notification written is accepted when an error names a later one, a status 10 names it or a
///   later one, the drain probe after it is answered, or `settleAfter` passed since its write completed;
/// - at most `window` bytes (and `replayMaxCount` notifications) are written and unsettled: no frame
///   is taken beyond it. The window starts at `unsettledByteLimit`; an error response that discarded
///   frames halves it (down to `minimumWindow`), and what settles cleanly grows it back by as much (so
///   it doubles per `settleAfter` without errors). Every frame behind a bad one is discarded and resent,
///   so under a run of invalid tokens a small window is what keeps the replay cost near one frame per
///   job; without errors the window is back at its cap within a few `settleAfter`s;
/// - settled notifications stay for `settleGrace`, as what a resend and the logs need of them
///   (`SettledNotification`): an error naming one replays what followed it, and
///   those already reported are resent without being reported again (`resentAfterSettle`); a refusal
///   of one already reported is counted (`refusedAfterSettle`), never reported twice;
/// - what an error proves discarded after it left the grace window is counted `lostAfterSettle`.
struct BinaryConnectionStateMachine {
    struct Configuration {
        var queueCapacity = 8192
        var replayMaxCount = 65_536
        var unsettledByteLimit = 8 << 20
        /// What the window shrinks to under a run of error responses (at most `unsettledByteLimit`).
        var minimumWindow = 16 << 10
        /// Bytes of settled notifications kept for the grace window.
        var graceMaxBytes = 8 << 20
        var settleAfter = TimeAmount.seconds(1)
        var settleGrace = TimeAmount.seconds(2)
        var maxAttempts = 3
        /// When set, status 1 / 255 are retried until this long after the notification's first
        /// such failure, whatever the count (`maxAttempts` no longer applies): the same by-time rule
        /// as HTTP/2's retries (docs/design.md §2.9), then dead-lettered `gateway-gave-up`.
        var giveUpAfter: TimeAmount?
        /// Cancelled campaigns: checked right before a notification is written (``takeFrame(into:)``).
        var cancellations: CampaignCancellations?

        init() {}

        init(_ c: ShardConfiguration) {
            queueCapacity = c.queueCapacity
            replayMaxCount = c.replayMaxCount
            unsettledByteLimit = c.unsettledByteLimit
            minimumWindow = c.minUnsettledBytes
            graceMaxBytes = max(0, c.replayMaxBytes - c.unsettledByteLimit)
            settleAfter = TimeAmount(c.settleAfter)
            settleGrace = TimeAmount(c.settleGrace)
            maxAttempts = c.maxAttempts
            giveUpAfter = c.giveUpAfter.map { TimeAmount($0) }
            cancellations = c.cancellations
        }
    }

    /// A notification in this shard's hands, with its history.
    struct Pending: ReplayItem {
        var notification: PushNotification
        /// Times written to a gateway.
        var attempts = 0
        /// Times answered with status 1 or 255.
        var processingFailures = 0
        /// When it was first answered with status 1 or 255 (by-time give-up).
        var firstFailureAt: NIODeadline?
        /// Its outcome was reported (accepted, by time) before an error proved it discarded: it is being
        /// resent from the grace window, and must not be reported again.
        var reported = false
        /// Times resent after the connection was lost while it was written and unsettled (see
        /// `Outcome.ambiguousResends`).
        var ambiguousResends: UInt8 = 0

        init(notification: PushNotification) {
            self.notification = notification
        }

        /// A settled one an error proved discarded: resent from the grace window, its outcome (accepted)
        /// reported already.
        init(resending s: SettledNotification, app: String) {
            notification = s.notification(app: app)
            attempts = Int(s.attempts)
            processingFailures = Int(s.processingFailures)
            reported = true
        }

        var settled: SettledNotification {
            SettledNotification(notification, attempts: attempts, processingFailures: processingFailures)
        }
    }

    /// What an error response led to, for the driver's log lines (the outcomes and events are kept).
    struct ErrorNotes {
        /// The named identifier was not kept (`sequence_unknown`).
        var sequenceUnknown = false
        /// Notifications proved discarded after they had been settled and forgotten, and the job ids
        /// still remembered (at most 50).
        var lost = 0
        var lostJobs: [String] = []
        /// Jobs already reported accepted that the gateway refused (`refused_after_settle`).
        var refusedAfterSettle: [String] = []
        /// A job refused as malformed (status 2–7).
        var malformed: String?
        /// How many were resent.
        var resent = 0
    }

    let connection: Int
    /// The app every notification of this shard is for (the grace window does not keep it per notification).
    let app: String
    private let config: Configuration
    /// The bulk lane's queue (bounded by `queueCapacity`: callers wait).
    private(set) var queue = CircularBuffer<Pending>(initialCapacity: 1024)
    /// The priority lane's queue: always written from first; not bounded here (the pipeline's
    /// `priority_max_in_flight` bounds it), so a priority batch never waits behind a full bulk queue.
    private(set) var priorityQueue = CircularBuffer<Pending>(initialCapacity: 16)
    private(set) var replay = ReplayBuffer<Pending>()
    private var nextIdentifier: UInt32 = 1
    /// The unsettled window in force (see the rules above).
    private(set) var window: Int
    private var outcomes: [Outcome] = []
    private var events = SenderEvents()

    init(connection: Int, app: String, configuration: Configuration) {
        self.connection = connection
        self.app = app
        self.config = configuration
        window = configuration.unsettledByteLimit
    }

    private var minimumWindow: Int { min(config.minimumWindow, config.unsettledByteLimit) }

    // MARK: events in

    /// Queues `batch`, each notification in its lane's queue. Returns whether any went to the bulk
    /// queue (only those make the caller wait for room).
    @discardableResult
    mutating func submitted(_ batch: [PushNotification]) -> Bool {
        var bulk = false
        for n in batch {
            assert(n.app == app, "a shard sends its app's notifications only")
            if n.lane == .priority {
                priorityQueue.append(Pending(notification: n))
            } else {
                queue.append(Pending(notification: n))
                bulk = true
            }
        }
        return bulk
    }

    /// The bulk queue is over its capacity: callers wait.
    var queueIsFull: Bool { queue.count > config.queueCapacity }

    /// Nothing queued in either lane.
    var queueIsEmpty: Bool { queue.isEmpty && priorityQueue.isEmpty }
    /// Notifications queued in both lanes.
    var queuedCount: Int { queue.count + priorityQueue.count }

    /// Another notification may be written now: something is queued and the unsettled window has room.
    var mayTakeFrame: Bool {
        !queueIsEmpty && replay.count < config.replayMaxCount && replay.bytes < window
    }

    /// Takes the next queued notification, gives it the next identifier, encodes it into `buffer` and
    /// keeps it for replay. Call only when `mayTakeFrame`. Returns false when it wrote nothing: the
    /// notification's campaign is cancelled or paused, and it settles `cancelled` or `held` instead
    /// (design §2.10, §2.11).
    @discardableResult
    mutating func takeFrame(into buffer: inout ByteBuffer) -> Bool {
        // The priority lane first (`docs/design.md §1.4`).
        var p = priorityQueue.isEmpty ? queue.removeFirst() : priorityQueue.removeFirst()
        // A resend of one reported already (accepted, from the grace window: the gateway discarded it) is
        // written again whatever its campaign's state: its outcome went out, so it cannot become another.
        if !p.reported, let cancellations = config.cancellations, let instead = cancellations.instead(of: p.notification) {
            record(p, instead)
            return false
        }
        p.attempts += 1
        let identifier = nextIdentifier
        nextIdentifier &+= 1
        let before = buffer.writerIndex
        p.notification.payload.withUnsafeBytes { payload in
            FrameEncoder.writeCommand2(
                token: p.notification.token, payload: payload, identifier: identifier,
                expiry: p.notification.expiry, priority: p.notification.priority, into: &buffer)
        }
        replay.append(identifier: identifier, item: p, bytes: buffer.writerIndex - before)
        return true
    }

    /// Outcomes are waiting to be taken (``takeBatch()``).
    var hasOutcomes: Bool { !outcomes.isEmpty }

    /// The identifier for the drain probe (it is not kept: its answer is what the driver waits for).
    mutating func takeProbeIdentifier() -> UInt32 {
        defer { nextIdentifier &+= 1 }
        return nextIdentifier
    }

    /// The frames taken since the last flush went out as write number `flush`.
    mutating func flushed(_ flush: UInt64, frames: Int, bytes: Int) {
        replay.assignUnflushed(to: flush)
        events.writes += 1
        events.framesWritten += frames
        events.bytesWritten += bytes
    }

    mutating func writeCompleted(_ flush: UInt64, now: NIODeadline) {
        replay.writeCompleted(flush, at: now)
    }

    /// Settles what waited `settleAfter` since its write completed and forgets what left the grace
    /// window. Returns whether anything settled (the connection proved useful).
    mutating func settleTick(now: NIODeadline) -> Bool {
        var settledBytes = 0
        var settledCount = 0
        var accepted = outcomes
        outcomes = []
        let connection = self.connection
        replay.settleExpired(now: now, settleAfter: config.settleAfter) { e in
            settledBytes += e.bytes
            settledCount += 1
            // As `record(e.item, .accepted)`: one already reported (resent from the grace window) is not
            // reported again.
            if !e.item.reported {
                accepted.append(
                    Outcome(
                        notification: e.item.notification, delivery: .accepted, attempts: e.item.attempts, connection: connection,
                        ambiguousResends: e.item.ambiguousResends))
            }
        }
        outcomes = accepted
        window = min(config.unsettledByteLimit, window + settledBytes)
        forgetSettled(now: now)
        return settledCount > 0
    }

    /// Lets settled notifications go after the grace window, or earlier beyond `graceMaxBytes`.
    mutating func forgetSettled(now: NIODeadline) {
        guard replay.settledCount > 0 else { return }
        replay.forgetSettled(now: now, grace: config.settleGrace, maxBytes: config.graceMaxBytes)
    }

    /// The drain probe was answered: everything kept was processed.
    mutating func probeAnswered() {
        for e in replay.acceptAll() { record(e.item, .accepted) }
    }

    /// An error response (the gateway closes the connection after it): outcomes for the named one and
    /// those before it, and what followed it back at the head of the queue, in order.
    mutating func errorResponse(_ response: ErrorResponse, now: NIODeadline = .distantPast) -> ErrorNotes {
        var notes = ErrorNotes()
        let r = replay.resolve(response)
        for e in r.accepted { record(e.item, .accepted) }
        if r.sequenceUnknown {
            events.sequenceUnknown += 1
            notes.sequenceUnknown = true
        }
        var lost = r.lostAfterSettle
        var lostJobs = r.lost[...]
        if r.forgottenNamedFailed {
            if case .retry = BinaryVerdict(response.status) {
                // A processing error for a notification reported accepted: never delivered, not resendable.
                lost += 1
                if let named = r.forgottenNamed { lostJobs.insert(named, at: lostJobs.startIndex) }
            } else {
                events.refusedAfterSettle += 1
                notes.refusedAfterSettle.append(r.forgottenNamed?.jobID ?? "?")
            }
        }
        events.lostAfterSettle += lost
        notes.lost = lost
        notes.lostJobs = lostJobs.prefix(50).map(\.jobID)

        var front: [Pending] = []
        var behind: [Pending] = []
        if var p = r.failed.map(\.item) ?? r.failedSettled.map({ Pending(resending: $0, app: app) }) {
            switch BinaryVerdict(response.status) {
            case .rejected(let rejection):
                if case .badRequest = rejection { notes.malformed = p.notification.jobID }
                if p.reported { notes.refusedAfterSettle.append(p.notification.jobID) }
                record(p, .rejected(rejection), status: response.status)
            case .retry(let reason):
                p.processingFailures += 1
                let firstFailure = p.firstFailureAt ?? now
                p.firstFailureAt = firstFailure
                let again: Bool
                if let giveUpAfter = config.giveUpAfter {
                    again = now - firstFailure < giveUpAfter
                } else {
                    again = p.processingFailures < config.maxAttempts
                }
                if again {
                    events.retried += 1
                    events.retriedBy[.processingError] += 1
                    // Retried by time, it goes behind the queue rather than first: each attempt
                    // costs a connection (the gateway closes it after the error), and one that
                    // keeps failing must not hold the shard's other notifications back for
                    // `giveUpAfter`; the attempts are spaced by the shard's traffic and its
                    // reconnect back-off. (Counted attempts go first, as before.)
                    if config.giveUpAfter != nil { behind.append(p) } else { front.append(p) }
                } else {
                    if p.reported { notes.refusedAfterSettle.append(p.notification.jobID) }
                    if config.giveUpAfter != nil {
                        events.gaveUp += 1
                        record(p, .rejected(.transient(reason: RetryBudget.gaveUpReason)), status: response.status)
                    } else {
                        record(p, .rejected(.transient(reason: reason)), status: response.status)
                    }
                }
            }
        }
        let discarded = r.discardedSettled.count + r.discarded.count
        events.replayed += discarded
        if discarded > 0 && response.status != .shutdown {
            // Everything behind the bad frame had to go again: write less ahead until frames settle cleanly.
            window = max(minimumWindow, window / 2)
        }
        // Settled by time, reported accepted, but the gateway had not read them: resent from the grace
        // window (their outcome is not reported again).
        events.resentAfterSettle += r.discardedSettled.count
        front += r.discardedSettled.map { Pending(resending: $0, app: app) }
        front += r.discarded.map(\.item)
        notes.resent = front.count + behind.count
        requeueAtFront(front)
        for p in behind {
            if p.notification.lane == .priority { priorityQueue.append(p) } else { queue.append(p) }
        }
        return notes
    }

    /// The connection ended without an error response (or after one: then nothing is kept). Unsettled
    /// notifications that were written may have been processed: resent, counted `ambiguous`; returns
    /// how many. Settled ones stay accepted.
    mutating func connectionLost() -> Int {
        let (written, unwritten) = replay.takeAll()
        events.ambiguous += written.count
        let resent = written.map { entry in
            var p = entry.item
            if p.ambiguousResends < .max { p.ambiguousResends += 1 }
            return p
        }
        requeueAtFront(resent + unwritten.map(\.item))
        return written.count
    }

    mutating func reconnecting() { events.reconnects += 1 }

    // MARK: decisions out

    /// The outcomes and events since the last call, or nil when there are none.
    mutating func takeBatch() -> (outcomes: [Outcome], events: SenderEvents)? {
        guard !outcomes.isEmpty || !events.isEmpty else { return nil }
        defer {
            outcomes = []
            events = SenderEvents()
        }
        return (outcomes, events)
    }

    // MARK: private

    private mutating func record(_ p: Pending, _ delivery: Delivery, status: ErrorStatus? = nil) {
        if p.reported {
            // Its outcome (accepted) went out when it settled. A resend accepted again is not counted
            // twice; one the gateway refused is counted (the caller logs it).
            if case .rejected = delivery { events.refusedAfterSettle += 1 }
            return
        }
        outcomes.append(
            Outcome(
                notification: p.notification, delivery: delivery, code: status.map { String($0.rawValue) },
                attempts: p.attempts, connection: connection, ambiguousResends: p.ambiguousResends))
    }

    /// Puts notifications back at the front of their lane's queue, in their original order.
    private mutating func requeueAtFront(_ items: [Pending]) {
        for p in items.reversed() {
            if p.notification.lane == .priority { priorityQueue.prepend(p) } else { queue.prepend(p) }
        }
    }
}
