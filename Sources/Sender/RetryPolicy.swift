import NIOCore

/// The pieces of the HTTP/2 transport's retry policy (docs/design.md §5.6), each a small
/// value with no I/O and the clock passed in (the event loop's: `NIODeadline`, `TimeAmount`), so each
/// is tested on its own and the connection state machine only combines them:
/// - `RetryReason` / `RetryCounts`: why a request was sent again, counted per reason;
/// - `RetryBudget`: exponential back-off with jitter, bounded by time (`give_up_after_s`) and by the
///   job's own `apns-expiration`, not by a count;
/// - `AIMDWindow`: a connection's concurrent streams shrink when its 5xx share rises with them, or on
///   timeouts, and grow back;
/// - `CircuitBreaker`: a connection whose answers are (almost) only 5xx pauses, then probes;
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
/// attempts, until `giveUpAfter` after its first failure or until its `apns-expiration`,
/// whichever comes first. Apple's guidance for 500 / 503 is to retry later, and an incident lasts
/// minutes: a count of attempts (the old `max_attempts: 3`, ~0.2 s apart) gave up within a second.
public struct RetryBudget: Sendable {
    /// How long after a job's first failure it is dead-lettered `gateway-gave-up`.
    public var giveUpAfter: Duration {
        get { Duration(giveUpAfterAmount) }
        set { giveUpAfterAmount = TimeAmount(newValue) }
    }
    public static let defaultGiveUpAfter = Duration.seconds(3600)
    /// `giveUpAfter` in the event loop's unit, as every first failure reads it.
    private var giveUpAfterAmount = TimeAmount(RetryBudget.defaultGiveUpAfter)
    /// The wait before attempt n + 1 after n failures (full jitter on half of it, capped).
    public var backoff = RetryBudget.defaultBackoff
    public static var defaultBackoff: ReconnectPolicy {
        var p = ReconnectPolicy()
        p.initialDelay = .milliseconds(200)
        p.maximumDelay = .seconds(60)
        p.multiplier = 2
        p.jitter = 0.5
        return p
    }

    public init() {}

    /// Where a job's retries end, on the caller's clock: `giveUpAfter` after `now` (its first failure),
    /// or earlier when its expiration (`expiry`, epoch seconds; 0 = none) comes first. `wallNow` is the
    /// wall clock at `now` (its time since 1970).
    public func deadline(firstFailureAt now: NIODeadline, expiry: UInt32, wallNow: TimeAmount) -> Deadline {
        let byTime = now + giveUpAfterAmount
        guard expiry > 0 else { return Deadline(at: byTime, byExpiry: false) }
        let byExpiry = now + (.seconds(Int64(expiry)) - wallNow)
        return byExpiry < byTime ? Deadline(at: byExpiry, byExpiry: true) : Deadline(at: byTime, byExpiry: false)
    }

    public struct Deadline: Sendable, Equatable {
        public var at: NIODeadline
        /// The job's `apns-expiration` sets it (rather than `giveUpAfter`).
        public var byExpiry: Bool
        public static let none = Deadline(at: .distantFuture, byExpiry: false)
    }

    public enum Decision: Sendable, Equatable {
        /// Send it again at this time.
        case retry(at: NIODeadline)
        /// `giveUpAfter` has passed: dead-letter it `gateway-gave-up`.
        case giveUp
        /// Its `apns-expiration` has passed (or will before the next attempt): Apple would discard it,
        /// so it is dead-lettered `expired` rather than sent.
        case expired
    }

    /// After failure number `failures` (1 = the first) at `now`: when to try again, or to stop. The
    /// last wait is cut to the give-up time, so a job gets one attempt at the very end; an attempt
    /// that would land after the job's expiration is not made.
    public func next(failures: Int, now: NIODeadline, deadline: Deadline, random: inout some RandomNumberGenerator) -> Decision {
        if now >= deadline.at { return deadline.byExpiry ? .expired : .giveUp }
        return resend(at: now + backoff.delay(attempt: max(0, failures - 1), random: &random), now: now, deadline: deadline)
    }

    /// The same rules for a resend whose time is chosen elsewhere (a request the server proved it did
    /// not process goes again at once, and after a back-off only when that repeats): never at or past
    /// the job's expiration, and never past the give-up time but for one last attempt there.
    public func resend(at due: NIODeadline, now: NIODeadline, deadline: Deadline) -> Decision {
        if now >= deadline.at { return deadline.byExpiry ? .expired : .giveUp }
        if due < deadline.at { return .retry(at: due) }
        return deadline.byExpiry ? .expired : .retry(at: deadline.at)
    }

    /// Dead-letter reasons (docs/design.md §5.6).
    public static let gaveUpReason = "gateway-gave-up"
    public static let expiredReason = "expired"
}

/// A connection's concurrent streams (its window), moved by load and not by answers that say nothing
/// about load. Additive increase (one stream per window of answers, up to the cap), multiplicative
/// decrease (halving) on the signs of too much load:
/// - a stream or the connection timing out (`timeout`);
/// - a 5xx share that *rises with the window*. Whether it does is measured: over samples of answers
///   (at least `sampleAnswers`, and a window's worth), a share above its reference by more than
///   chance explains is a rise. The reference is the share measured at the smallest window since (0
///   at first): samples at about that window refine it, a wider one never moves it. A rise at a wider
///   window than the reference's is the share growing with the window: halved. A rise at the same
///   window is tested: the window is halved for one sample, a probe. If the share falls with it, the
///   server was overloaded and the window stays halved. If it does not, the share is not ours to fix
///   (a failing front end, a partial incident): the window is restored and that share becomes the
///   reference. While 5xx come, the window grows by one stream per sample, so each sample measures
///   one window (without them, by one stream per window of answers).
///
/// So a random 30 % of 503s costs their retries (back-off per job) and one probe, not a window that
/// halves on every burst of them down to one stream, which made a partial incident a crawl; 429
/// (about one device token) does not move it at all. A host answering only 5xx is the circuit
/// breaker's to stop.
public struct AIMDWindow: Sendable, Equatable {
    public struct Settings: Sendable, Equatable {
        /// Answers per measurement of the 5xx share (at least; a window's worth when it is wider).
        public var sampleAnswers = 200
        /// The least rise of the share that counts, beside three standard errors of a sample.
        public var minimumRise = 0.05
        public init() {}
    }

    public let settings: Settings
    /// The window, in streams; `.infinity` while at the cap (the cap rules alone).
    public private(set) var value = Double.infinity
    /// Answers still to come before another decrease counts (a burst of timeouts is one decrease).
    private var holdoff = 0
    /// Answers are being sampled: a 5xx came since the share was last found to be 0.
    private var sampling = false
    private var sampled = 0
    private var errors = 0
    /// The 5xx share the window's samples are compared with, and the window it was measured at.
    public private(set) var reference = 0.0
    private var referenceWindow = Double.infinity
    /// A halving under way to see whether the share follows the window: the share that rose and the
    /// window it rose at.
    private var probe: (share: Double, window: Double)?

    public init(settings: Settings = Settings()) { self.settings = settings }

    public static func == (a: AIMDWindow, b: AIMDWindow) -> Bool {
        a.value == b.value && a.holdoff == b.holdoff && a.sampling == b.sampling && a.sampled == b.sampled
            && a.errors == b.errors && a.reference == b.reference && a.referenceWindow == b.referenceWindow
            && a.probe?.share == b.probe?.share
            && a.probe?.window == b.probe?.window
    }

    /// At the cap with nothing to count: an answer changes nothing (the common case).
    public var isFull: Bool { value == .infinity && holdoff == 0 && !sampling }

    /// Halved to test whether the 5xx share follows the window.
    public var isProbing: Bool { probe != nil }

    /// Streams allowed under `cap` (the server's and the configuration's limit).
    public func limit(cap: Int) -> Int { value >= Double(cap) ? cap : max(1, Int(value)) }

    /// An answer that is not a 5xx (429 excepted: it is about one device token, not the connection).
    public mutating func success(cap: Int) {
        if holdoff > 0 { holdoff -= 1 }
        if sampling { return count(serverError: false, cap: cap) }
        guard value < Double(cap) else { return }
        grow(by: 1 / max(1, value), cap: cap)
    }

    private mutating func grow(by streams: Double, cap: Int) {
        value += streams
        if value >= Double(cap) { value = .infinity }
    }

    /// A 5xx answer: sampled, and the window halved only when their share rises with it.
    public mutating func serverError(cap: Int) {
        if holdoff > 0 { holdoff -= 1 }
        sampling = true
        count(serverError: true, cap: cap)
    }

    /// A stream unanswered past its deadline, or the connection stuck: too much in flight for the
    /// server (or the path) to answer in time. Halves the window, at most once per window of answers.
    public mutating func timeout(cap: Int) {
        guard holdoff == 0 else { return }
        probe = nil
        halve(cap: cap)
        holdoff = Int(value.rounded(.up))
    }

    private mutating func halve(cap: Int) {
        value = max(1, min(value, Double(cap)) / 2)
    }

    private mutating func count(serverError: Bool, cap: Int) {
        sampled += 1
        if serverError { errors += 1 }
        guard sampled >= max(settings.sampleAnswers, limit(cap: cap)) else { return }
        let share = Double(errors) / Double(sampled)
        let n = Double(sampled)
        let none = errors == 0
        sampled = 0
        errors = 0
        let window = min(value, Double(cap))
        if let probe {
            self.probe = nil
            // Compared sample with sample: both have their noise.
            if share < probe.share - rise(over: probe.share, answers: n / 2, errors: 3) {
                // It fell with the window: load. The window stays halved.
                (reference, referenceWindow) = (share, window)
            } else {
                value = probe.window >= Double(cap) ? .infinity : probe.window
                (reference, referenceWindow) = ((share + probe.share) / 2, probe.window)
            }
        } else if none && value == .infinity {
            // No 5xx in a whole sample at the cap: back to not counting.
            sampling = false
            (reference, referenceWindow) = (0, .infinity)
        } else if share <= reference + rise(over: reference, answers: n, errors: 4) {
            if window < referenceWindow {
                (reference, referenceWindow) = (share, window)
            } else if window <= referenceWindow * 1.25 {
                reference += (share - reference) / 4
            }
            if value < Double(cap) { grow(by: 1, cap: cap) }
        } else if window > referenceWindow * 1.25 {
            halve(cap: cap)  // the share rose as the window grew from the reference's
        } else {
            probe = (share, window)
            halve(cap: cap)
        }
    }

    /// How far from `share` a sample of `answers` must lie to count: that many standard errors, and
    /// at least `minimumRise`. A rise over the reference takes four (chance gives one in 30,000 samples:
    /// a probe costs a sample at half the window, but a probe misread as load costs the window's regrowth);
    /// the probe's own verdict compares two samples (their noise adds: `answers` halved) at three.
    private func rise(over share: Double, answers: Double, errors: Double) -> Double {
        max(settings.minimumRise, errors * (share * (1 - share) / answers).squareRoot())
    }
}

/// Pauses a connection whose answers are (almost) only 5xx: over each `window` answers, `threshold` or
/// more 5xx opens it for `openFor` (doubling on each failed probe, up to `maxOpenFor`); then
/// one probe request goes out: a non-5xx answer closes it, a 5xx opens it again. While it is open the
/// connection takes no new work and its queue goes to healthy connections.
///
/// It is for a host that is down, not for one that fails some requests: those are retried per job
/// (`RetryBudget`), and the window (`AIMDWindow`) judges whether they come from load. Half of 20
/// answers tripped it by chance under a random 30 % of 503s (one window in 21), pausing the
/// connection each time; 36 of 40 is beyond chance below about 70 % (one window in 400 there, none in
/// 10^14 at 30 %), and still stops a down host after 40 answers.
public struct CircuitBreaker: Sendable, Equatable {
    public struct Settings: Sendable, Equatable {
        /// Answers per verdict, and the share of 5xx among them that opens the breaker.
        public var window = 40
        public var threshold = 0.9
        /// The first pause; each failed probe doubles it, up to `maxOpenFor` (one request per pause
        /// is all a down host sees from this connection).
        public var openFor = Duration.milliseconds(500)
        public var maxOpenFor = Duration.seconds(5)
        public init() {}
    }

    public enum State: Sendable, Equatable {
        case closed
        case open(until: NIODeadline)
        /// One probe may be in flight.
        case halfOpen
    }

    public let settings: Settings
    public private(set) var state = State.closed
    private var answers = 0
    private var errors = 0
    /// Opens since it was last closed by a good probe.
    private var trips = 0
    /// Another connection to the host found it answering while this one's probe was in flight: that
    /// probe left before the host came back, so a 5xx to it earns one more probe, not a longer pause
    /// (on a loaded machine the gap is wide enough that one connection idled for `maxOpenFor` while
    /// the other carried all the work).
    private var hostAnsweredDuringProbe = false

    public init(settings: Settings = Settings()) { self.settings = settings }

    /// An answer: `serverError` for a 5xx. Returns true when this answer opened the breaker.
    public mutating func record(serverError: Bool, now: NIODeadline) -> Bool {
        if case .closed = state, !serverError, answers + 1 < settings.window {
            answers += 1  // the common case (a 200 on a healthy connection): one addition
            return false
        }
        switch state {
        case .open:
            return false  // answers to streams sent before it opened
        case .halfOpen:
            if serverError, hostAnsweredDuringProbe {
                hostAnsweredDuringProbe = false
                return false
            }
            hostAnsweredDuringProbe = false
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
    public mutating func tick(now: NIODeadline) -> Bool {
        guard case .open(let until) = state, now >= until else { return false }
        state = .halfOpen
        return true
    }

    public var isOpen: Bool {
        if case .open = state { return true }
        return false
    }

    /// Ends a pause early (another connection's probe found the host answering again): the next
    /// request is this connection's probe. A failed one still doubles the next pause, but for a probe
    /// that was already in flight: it gets one more.
    public mutating func endPause() {
        switch state {
        case .open: state = .halfOpen
        case .halfOpen: hostAnsweredDuringProbe = true
        case .closed: break
        }
    }

    private mutating func open(now: NIODeadline) {
        // Worked out when it opens (rarely), from the settings as given.
        let longest = TimeAmount(settings.maxOpenFor)
        let (doubled, overflow) = TimeAmount(settings.openFor).nanoseconds.multipliedReportingOverflow(by: Int64(1) << min(trips, 20))
        let wait = overflow ? longest : min(longest, .nanoseconds(doubled))
        trips += 1
        state = .open(until: now + wait)
    }
}

/// Items by due time, earliest first (a binary min-heap): a retry waits here, holding no stream and
/// no place in the queue, and taking the due ones costs O(log n) each rather than a scan of all.
struct DueQueue<Element> {
    private var heap: [(due: NIODeadline, seq: UInt64, element: Element)] = []
    /// Ties keep their insertion order.
    private var nextSeq: UInt64 = 0

    var count: Int { heap.count }
    var isEmpty: Bool { heap.isEmpty }
    var nextDue: NIODeadline? { heap.first?.due }

    mutating func insert(_ element: Element, due: NIODeadline) {
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
    mutating func popDue(now: NIODeadline) -> Element? {
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
