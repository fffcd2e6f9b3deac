import Logging
import Sender
import Synchronization

/// Whether a topic the pipeline must not lose a write to — the outcomes topic, the dead-letter topic —
/// takes its writes. A write that fails is retried for as long as it takes and nothing is dropped (its
/// messages stay unsettled); this says so: how long the oldest write still failing has been failing (a
/// gauge), a readiness reason once that passes the grace (`pipeline.readiness_grace_s`), and which
/// failures to log — at most one line per ``logInterval``, since many writes retrying at once, and the
/// first quick steps of each one's back-off, would otherwise log several lines a second.
final class SinkHealth: Sendable {
    enum Sink: String, Sendable {
        case outcomes
        case deadLetter = "dead_letter"

        var name: String {
            switch self {
            case .outcomes: "outcomes topic"
            case .deadLetter: "dead-letter topic"
            }
        }

        /// What waits meanwhile, for the readiness line.
        var consequence: String {
            switch self {
            case .outcomes: "nothing settles or commits past them, and intake stops at pipeline.max_in_flight"
            case .deadLetter: "the refused messages wait unsettled, and their partitions commit no further"
            }
        }
    }

    /// One write (a settle batch's outcome messages, a hand-over of dead letters), from its first attempt
    /// to its delivery or abandonment.
    struct Write: Sendable {
        fileprivate let id: Int
    }

    /// What a failure line says beside its own message.
    struct Report: Sendable {
        /// Since the first failed attempt of the oldest write still failing.
        var failingFor: Duration
        /// Writes failing now.
        var writes: Int
        /// Failed attempts since the last line (this one included).
        var failures: Int
        /// Past the grace: `/readyz` says not ready.
        var pastGrace: Bool

        /// The line's metadata, under `prefix` (`outcomes`, `dlq`).
        func metadata(prefix: String) -> Logger.Metadata {
            [
                "\(prefix).failing_for_s": "\(failingFor.components.seconds)", "\(prefix).writes_failing": "\(writes)",
                "\(prefix).failures_since_last_line": "\(failures)",
                "readiness": pastGrace
                    ? "not ready (failing for pipeline.readiness_grace_s or longer)" : "ready (within pipeline.readiness_grace_s)",
            ]
        }
    }

    let sink: Sink
    let topic: String
    let grace: Duration
    let logInterval: Duration
    /// The longest error text kept for the readiness line.
    static let maxErrorBytes = 200

    private struct State {
        var nextID = 0
        /// Write → when its first failed attempt began.
        var failingSince: [Int: ContinuousClock.Instant] = [:]
        var lastError = ""
        var lastLine: ContinuousClock.Instant?
        var failuresSinceLine = 0
    }
    private let state = Mutex(State())

    init(sink: Sink, topic: String, grace: Duration, logInterval: Duration = .seconds(10)) {
        self.sink = sink
        self.topic = topic
        self.grace = grace
        self.logInterval = logInterval
    }

    func begin() -> Write {
        state.withLock { s in
            defer { s.nextID &+= 1 }
            return Write(id: s.nextID)
        }
    }

    /// An attempt of `write` that began at `attemptStarted` failed with `error`. Returns what to log when
    /// a line is due (the first failure after the last line's interval), else nil.
    func failed(_ write: Write, attemptStarted: ContinuousClock.Instant, error: String, now: ContinuousClock.Instant = .now) -> Report? {
        state.withLock { s in
            if s.failingSince[write.id] == nil { s.failingSince[write.id] = attemptStarted }
            s.lastError = error
            s.failuresSinceLine += 1
            if let last = s.lastLine, now - last < logInterval { return nil }
            s.lastLine = now
            defer { s.failuresSinceLine = 0 }
            let failingFor = s.failingSince.values.min().map { now - $0 } ?? .zero
            return Report(
                failingFor: failingFor, writes: s.failingSince.count, failures: s.failuresSinceLine, pastGrace: failingFor >= grace)
        }
    }

    /// `write` is over: delivered, or given up at a stop (its messages stay unsettled).
    func end(_ write: Write) {
        state.withLock { _ = $0.failingSince.removeValue(forKey: write.id) }
    }

    /// How long the oldest write still failing has been failing; zero when none is.
    func failingFor(now: ContinuousClock.Instant = .now) -> Duration {
        state.withLock { s in s.failingSince.values.min().map { now - $0 } ?? .zero }
    }

    /// The readiness line once a write has been failing for the grace or longer, else nil.
    func problem(now: ContinuousClock.Instant = .now) -> String? {
        let (oldest, writes, error) = state.withLock { s in (s.failingSince.values.min(), s.failingSince.count, s.lastError) }
        guard let oldest, now - oldest >= grace else { return nil }
        let seconds = (now - oldest).components.seconds
        return "kafka: the \(sink.name) \(topic) has refused writes for \(seconds) s (\(writes) write\(writes == 1 ? "" : "s") "
            + "retrying; last error: \(error.boundedUTF8(Self.maxErrorBytes))): \(sink.consequence); nothing is dropped"
    }
}
