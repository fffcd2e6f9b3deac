/// The pieces of the HTTP/2 transport's retry policy (issue 28, docs/design.md §5.6), each a small
/// value with no I/O and the clock passed in, so each is tested on its own and the connection state
/// machine only combines them:
/// - `RetryReason` / `RetryCounts`: why a request was sent again, counted per reason;
/// - `RetryBudget`: exponential back-off with jitter, bounded by time (`give_up_after_s`) and by the
///   job's own `apns-expiration`, not by a count;
/// - `AIMDWindow`: a connection's concurrent streams shrink on 503 / 429 and grow back;
/// - `CircuitBreaker`: a connection whose answers are mostly 5xx pauses, then probes;
/// - `DueQueue`: requests waiting for their retry, by due time (a binary heap).

/// Why a request was written again. The raw values index `RetryCounts`.
public enum RetryReason: Int, CaseIterable, Sendable {
    /// 500, 503 (ServiceUnavailable, Shutdown) and other 5xx answers.
    case serverError = 0
    /// 429 TooManyRequests.
    case tooManyRequests
    /// RST_STREAM with a code other than REFUSED_STREAM: the request may have been processed.
    case reset
    /// The connection closed with the request unanswered: it may have been processed.
    case connectionLost
    /// No answer on the stream within `request_timeout_s` while the connection answered others.
    case streamTimeout
    /// RST_STREAM REFUSED_STREAM: not processed (RFC 9113 §8.7).
    case refusedStream
    /// Above a GOAWAY's last stream id: not processed.
    case goAway
    /// 403 ExpiredProviderToken: the token is renewed and the request sent once more.
    case expiredProviderToken
    /// Binary interface: error-response status 1 (processing error) or 255 (unknown).
    case processingError

    /// The counter label (`apns_retries_total{reason=…}`, the dashboard).
    public var label: String {
        switch self {
        case .serverError: "5xx"
        case .tooManyRequests: "429"
        case .reset: "reset"
        case .connectionLost: "connection-lost"
        case .streamTimeout: "stream-timeout"
        case .refusedStream: "refused-stream"
        case .goAway: "goaway"
        case .expiredProviderToken: "expired-provider-token"
        case .processingError: "processing-error"
        }
    }
}

/// Retries per reason, in inline storage: counting one is an addition, with no allocation.
public struct RetryCounts: Sendable, Equatable {
    public static let reasonCount = 9
    private var counts = InlineArray<9, Int>(repeating: 0)

    public init() {}

    public subscript(reason: RetryReason) -> Int {
        get { counts[reason.rawValue] }
        set { counts[reason.rawValue] = newValue }
    }

    public var total: Int {
        var n = 0
        for i in counts.indices { n += counts[i] }
        return n
    }

    public var isEmpty: Bool { total == 0 }

    public static func += (a: inout RetryCounts, b: RetryCounts) {
        for i in a.counts.indices { a.counts[i] += b.counts[i] }
    }

    public static func == (a: RetryCounts, b: RetryCounts) -> Bool {
        for i in a.counts.indices where a.counts[i] != b.counts[i] { return false }
        return true
    }
}

/// How long a job whose fate is "try again" is tried: exponential back-off with jitter between
/// attempts, until `giveUpAfter` seconds after its first failure or until its `apns-expiration`,
/// whichever comes first. Apple's guidance for 500 / 503 is to retry later, and an incident lasts
/// minutes: a count of attempts (the old `max_attempts: 3`, ~0.2 s apart) gave up within a second.
public struct RetryBudget: Sendable {
    /// Seconds after a job's first failure before it is dead-lettered `gateway-gave-up`.
    public var giveUpAfter = RetryBudget.defaultGiveUpAfter
    public static let defaultGiveUpAfter = 3600.0
    /// The wait before attempt n + 1 after n failures (full jitter on half of it, capped).
    public var backoff = RetryBudget.defaultBackoff
    public static var defaultBackoff: ReconnectPolicy {
        var p = ReconnectPolicy()
        p.initialDelay = 0.2
        p.maximumDelay = 60
        p.multiplier = 2
        p.jitter = 0.5
        return p
    }

    public init() {}

    /// Where a job's retries end, in the caller's monotonic seconds: `giveUpAfter` after `now` (its
    /// first failure), or earlier when its expiration (`expiry`, epoch seconds; 0 = none) comes first.
    /// `wallNow` is the wall clock at `now`.
    public func deadline(firstFailureAt now: Double, expiry: UInt32, wallNow: Double) -> Deadline {
        let byTime = now + giveUpAfter
        guard expiry > 0 else { return Deadline(at: byTime, byExpiry: false) }
        let byExpiry = now + (Double(expiry) - wallNow)
        return byExpiry < byTime ? Deadline(at: byExpiry, byExpiry: true) : Deadline(at: byTime, byExpiry: false)
    }

    public struct Deadline: Sendable, Equatable {
        public var at: Double
        /// The job's `apns-expiration` sets it (rather than `giveUpAfter`).
        public var byExpiry: Bool
        public static let none = Deadline(at: .infinity, byExpiry: false)
    }

    public enum Decision: Sendable, Equatable {
        /// Send it again at this time.
        case retry(at: Double)
        /// `giveUpAfter` has passed: dead-letter it `gateway-gave-up`.
        case giveUp
        /// Its `apns-expiration` has passed (or will before the next attempt): Apple would discard it,
        /// so it is dead-lettered `expired` rather than sent.
        case expired
    }

    /// After failure number `failures` (1 = the first) at `now`: when to try again, or to stop. The
    /// last wait is cut to the give-up time, so a job gets one attempt at the very end; an attempt
    /// that would land after the job's expiration is not made.
    public func next(failures: Int, now: Double, deadline: Deadline, random: inout some RandomNumberGenerator) -> Decision {
        if now >= deadline.at { return deadline.byExpiry ? .expired : .giveUp }
        let due = now + backoff.delay(attempt: max(0, failures - 1), random: &random)
        if due < deadline.at { return .retry(at: due) }
        return deadline.byExpiry ? .expired : .retry(at: deadline.at)
    }

    /// Dead-letter reasons (docs/design.md §5.6).
    public static let gaveUpReason = "gateway-gave-up"
    public static let expiredReason = "expired"
}

/// Additive increase, multiplicative decrease of a connection's concurrent streams: each 503 / 429
/// halves the window (at most once per window's worth of answers, so one burst of refusals is one
/// decrease), each other answer adds 1 / window (one stream per window of answers), up to the cap.
/// An incident then slows sending instead of turning every open stream into a failure.
public struct AIMDWindow: Sendable, Equatable {
    /// The window, in streams; `.infinity` until the first decrease (the cap rules alone).
    public private(set) var value = Double.infinity
    /// Answers still to come before another decrease counts.
    private var holdoff = 0

    public init() {}

    /// At the cap with nothing to count down: a success changes nothing (the common case).
    public var isFull: Bool { value == .infinity && holdoff == 0 }

    /// Streams allowed under `cap` (the server's and the configuration's limit).
    public func limit(cap: Int) -> Int { value >= Double(cap) ? cap : max(1, Int(value)) }

    public mutating func success(cap: Int) {
        if holdoff > 0 { holdoff -= 1 }
        guard value < Double(cap) else { return }
        value += 1 / max(1, value)
        if value >= Double(cap) { value = .infinity }
    }

    public mutating func congestion(cap: Int) {
        if holdoff > 0 {
            holdoff -= 1
            return
        }
        value = max(1, min(value, Double(cap)) / 2)
        holdoff = Int(value.rounded(.up))
    }
}

/// Pauses a connection whose answers are mostly 5xx: over each `window` answers, `threshold` or more
/// 5xx opens it for `openFor` seconds (doubling on each failed probe, up to `maxOpenFor`); then one
/// probe request goes out: a non-5xx answer closes it, a 5xx opens it again. While it is open the
/// connection takes no new work and its queue goes to healthy connections.
public struct CircuitBreaker: Sendable, Equatable {
    public struct Settings: Sendable, Equatable {
        /// Answers per verdict, and the share of 5xx among them that opens the breaker.
        public var window = 20
        public var threshold = 0.5
        /// The first pause; each failed probe doubles it, up to `maxOpenFor` (one request per pause
        /// is all a down host sees from this connection).
        public var openFor = 0.5
        public var maxOpenFor = 5.0
        public init() {}
    }

    public enum State: Sendable, Equatable {
        case closed
        case open(until: Double)
        /// One probe may be in flight.
        case halfOpen
    }

    public let settings: Settings
    public private(set) var state = State.closed
    private var answers = 0
    private var errors = 0
    /// Opens since it was last closed by a good probe.
    private var trips = 0

    public init(settings: Settings = Settings()) { self.settings = settings }

    /// An answer: `serverError` for a 5xx. Returns true when this answer opened the breaker.
    public mutating func record(serverError: Bool, now: Double) -> Bool {
        if case .closed = state, !serverError, answers + 1 < settings.window {
            answers += 1  // the common case (a 200 on a healthy connection): one addition
            return false
        }
        switch state {
        case .open:
            return false  // answers to streams sent before it opened
        case .halfOpen:
            if serverError {
                open(now: now)
                return true
            }
            state = .closed
            trips = 0
            answers = 0
            errors = 0
            return false
        case .closed:
            answers += 1
            if serverError { errors += 1 }
            guard answers >= settings.window else { return false }
            let trip = Double(errors) >= settings.threshold * Double(answers)
            answers = 0
            errors = 0
            if trip { open(now: now) }
            return trip
        }
    }

    /// Moves an open breaker to half-open once its time is up; returns true when it did.
    public mutating func tick(now: Double) -> Bool {
        guard case .open(let until) = state, now >= until else { return false }
        state = .halfOpen
        return true
    }

    public var isOpen: Bool {
        if case .open = state { return true }
        return false
    }

    private mutating func open(now: Double) {
        let wait = min(settings.maxOpenFor, settings.openFor * Double(1 << min(trips, 20)))
        trips += 1
        state = .open(until: now + wait)
    }
}

/// Items by due time, earliest first (a binary min-heap): a retry waits here, holding no stream and
/// no place in the queue, and taking the due ones costs O(log n) each rather than a scan of all.
struct DueQueue<Element> {
    private var heap: [(due: Double, seq: UInt64, element: Element)] = []
    /// Ties keep their insertion order.
    private var nextSeq: UInt64 = 0

    var count: Int { heap.count }
    var isEmpty: Bool { heap.isEmpty }
    var nextDue: Double? { heap.first?.due }

    mutating func insert(_ element: Element, due: Double) {
        heap.append((due, nextSeq, element))
        nextSeq &+= 1
        var i = heap.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard less(i, parent) else { break }
            heap.swapAt(i, parent)
            i = parent
        }
    }

    /// The earliest item if it is due at `now`.
    mutating func popDue(now: Double) -> Element? {
        guard let first = heap.first, first.due <= now else { return nil }
        let last = heap.removeLast()
        guard !heap.isEmpty else { return last.element }
        let top = heap[0].element
        heap[0] = last
        var i = 0
        while true {
            let l = 2 * i + 1
            let r = l + 1
            var m = i
            if l < heap.count, less(l, m) { m = l }
            if r < heap.count, less(r, m) { m = r }
            if m == i { break }
            heap.swapAt(i, m)
            i = m
        }
        return top
    }

    /// Everything, in no particular order (the queue is left empty).
    mutating func removeAll() -> [Element] {
        defer { heap.removeAll() }
        return heap.map(\.element)
    }

    private func less(_ a: Int, _ b: Int) -> Bool {
        heap[a].due < heap[b].due || (heap[a].due == heap[b].due && heap[a].seq < heap[b].seq)
    }
}
