/// The lifecycle of a ``KafkaConsumer``: its states, and for each event the action it calls for.
///
/// Pure (no librdkafka, no lock, no thread): `ConsumerCore` keeps it in its `Mutex` with the data the
/// states share (the offset tracker, the buffer, the waiting tasks) and performs the actions; the
/// tests drive it directly.
///
///     initializing ──run()──▶ consuming(polling) ⇄ consuming(holding) ──stop──▶ closing ──closed()──▶ finished
///          └───────────────────────────────stop (close() before run(), release)──────▶ closing
///
/// A stop is `close()`, the cancellation of `run()`, the graceful shutdown when the configuration asks
/// for it (``KafkaConsumerConfiguration/stopsOnGracefulShutdown``), or the release of a consumer whose
/// `run()` is not running.
struct ConsumerStateMachine: Sendable {
    enum State: Sendable, Equatable {
        /// The handle is made and subscribed; `run()` was not called yet, so nothing polls: rebalances and
        /// fetched messages wait in librdkafka's queue.
        case initializing
        /// `run()`'s poll thread polls librdkafka (`.polling`) or, its buffer full, waits for a wake-up
        /// instead (`.holding`, `docs/design.md §1.2`).
        case consuming(Consuming)
        /// Stopping: the thread that runs the close (the poll thread, or one of the close's own when
        /// `run()` never started) commits once, leaves the group (`rd_kafka_consumer_close`) and destroys
        /// the handle. Nothing in that path blocks or sleeps (see `ConsumerCore.shutdown`).
        case closing
        /// The handle is destroyed: `nextBatch()` returns nil, commit requests fail with `closed`.
        case finished
    }

    enum Consuming: Sendable, Equatable {
        case polling
        /// `drained`: the buffer was drained to half its bounds since the hold began; the poll thread
        /// polls again at its next step.
        case holding(drained: Bool)
    }

    private(set) var state: State = .initializing

    // MARK: run()

    enum RunAction: Sendable, Equatable {
        /// Start the poll thread (and return when it ended).
        case startPollThread
        /// A stop came first: nothing to poll; return once the consumer is closed.
        case awaitClosed
        /// `run()` is already running: a consumer has one poll loop.
        case alreadyRunning
    }

    mutating func run() -> RunAction {
        switch state {
        case .initializing:
            state = .consuming(.polling)
            return .startPollThread
        case .consuming:
            return .alreadyRunning
        case .closing, .finished:
            return .awaitClosed
        }
    }

    // MARK: The poll thread's steps

    enum PollAction: Sendable, Equatable {
        /// Poll librdkafka for a batch (serving rebalances and logs).
        case poll
        /// The hold ended (the buffer drained to half): poll again.
        case resume
        /// The buffer is full: wait for a wake-up (or the next commit due), then ask again.
        case hold
        /// Leave the poll loop and close.
        case close
    }

    /// What the poll thread does next; asked at the top of each of its iterations.
    mutating func nextPollAction() -> PollAction {
        switch state {
        case .consuming(.polling):
            return .poll
        case .consuming(.holding(drained: true)):
            state = .consuming(.polling)
            return .resume
        case .consuming(.holding(drained: false)):
            return .hold
        case .closing:
            return .close
        case .initializing, .finished:
            preconditionFailure("no poll thread runs in state \(state)")
        }
    }

    /// The buffer reached one of its bounds. Returns true when the poll thread starts holding now (what
    /// `KafkaConsumerStatistics.pauses` counts).
    mutating func bufferFull() -> Bool {
        guard case .consuming(.polling) = state else { return false }
        state = .consuming(.holding(drained: false))
        return true
    }

    /// The buffer was drained to half its bounds. Returns true when the holding poll thread must be woken.
    mutating func bufferDrained() -> Bool {
        guard case .consuming(.holding(drained: false)) = state else { return false }
        state = .consuming(.holding(drained: true))
        return true
    }

    var isHolding: Bool {
        if case .consuming(.holding) = state { return true }
        return false
    }

    // MARK: Stopping

    enum StopAction: Sendable, Equatable {
        /// The poll thread closes at its next step: wake it (it may be in librdkafka's poll or holding).
        case wakePollThread
        /// No poll thread ever ran: close on a thread of the stop's own.
        case closeWithoutPollThread
        /// Already closing or closed.
        case none
    }

    mutating func stop() -> StopAction {
        switch state {
        case .initializing:
            state = .closing
            return .closeWithoutPollThread
        case .consuming:
            state = .closing
            return .wakePollThread
        case .closing, .finished:
            return .none
        }
    }

    /// The close ended: the handle is destroyed.
    mutating func closed() {
        precondition(state == .closing, "closed() in state \(state)")
        state = .finished
    }

    /// Whether the close has begun (the rebalance callback then does no blocking lookup).
    var isClosing: Bool { state == .closing || state == .finished }

    var isFinished: Bool { state == .finished }

    /// Whether a commit request can still be served (by the poll thread, once it runs).
    var acceptsCommitRequests: Bool {
        switch state {
        case .initializing, .consuming: return true
        case .closing, .finished: return false
        }
    }
}
