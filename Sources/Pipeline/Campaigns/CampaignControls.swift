import Logging
import Redis
import Sender
import Synchronization

/// This process's copy of the campaign control state (`{<p>}:control`, design §2.10): what the gate and
/// the transports consult, refreshed by ``run(store:)`` with one Redis call per ``pollInterval`` (never
/// per job or per batch).
///
/// The gate reads it once per batch (``snapshot``): while no campaign has any control state that is one
/// atomic load, and the batch is gated as before. The transports read ``cancellations`` right before
/// each write (one atomic load while nothing is cancelled).
final class CampaignControls: Sendable {
    /// How often each `run` process reads the control state: a `campaign cancel` returns about this long
    /// (plus one round trip) after it changed the state, once every process applied it.
    static let pollInterval: Duration = .milliseconds(250)
    /// How often each process removes the cancels that outlived their campaign.
    static let expiryInterval: Duration = .seconds(60)

    /// What the transports check right before writing.
    let cancellations = CampaignCancellations()
    /// Whether any campaign has control state (the gate's fast path: false means nothing to look up).
    private let active = Atomic<Bool>(false)
    private let states = Mutex<[String: CampaignControlState]>([:])
    /// The version applied last (-1: none yet); only the control loop writes it.
    private let applied = Atomic<Int64>(-1)
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    /// The campaigns with control state, or nil when there are none (one atomic load).
    var snapshot: [String: CampaignControlState]? {
        guard active.load(ordering: .acquiring) else { return nil }
        return states.withLock { $0 }
    }

    /// The control version this process applied last (-1 before the first load).
    var appliedVersion: Int64 { applied.load(ordering: .relaxed) }

    /// Applies a snapshot read from Redis: the gate and the transports use it from now on.
    func apply(_ read: CampaignControlSnapshot) {
        states.withLock { $0 = read.campaigns }
        cancellations.replace(
            cancelled: Set(read.campaigns.filter { $0.value.cancelled }.keys),
            paused: Set(read.campaigns.filter { $0.value.paused && !$0.value.cancelled }.keys))
        active.store(!read.campaigns.isEmpty, ordering: .releasing)
        applied.store(read.version, ordering: .relaxed)
    }

    /// One poll: reads the state if its version changed, applies it, then records the version as seen
    /// (`{<p>}:control:seen`), in that order, so a `campaign cancel` returns only once this process acts
    /// on it. Returns whether anything changed.
    @discardableResult
    func poll(store: PipelineStore) async throws -> Bool {
        guard let read = try await store.pollControl(applied: appliedVersion) else { return false }
        let before = snapshot ?? [:]
        apply(read)
        try await store.acknowledgeControl(version: read.version)
        if before != read.campaigns {
            logger.notice(
                "campaign control changed",
                metadata: [
                    "version": "\(read.version)",
                    "campaigns":
                        "\(read.campaigns.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.stored)" }.joined(separator: " "))",
                ])
        }
        return true
    }

    /// Polls every ``pollInterval`` until cancelled. A failed poll keeps the last state (logged at most
    /// every 10 s); a `campaign cancel` waits for this process meanwhile, and names it if it times out.
    func run(store: PipelineStore) async {
        var lastWarning: ContinuousClock.Instant?
        var nextExpiry = ContinuousClock.now + Self.expiryInterval
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: Self.pollInterval)
                try await poll(store: store)
                if ContinuousClock.now >= nextExpiry {
                    nextExpiry = ContinuousClock.now + Self.expiryInterval
                    // A cancel outlives its campaign's hash by nothing (design §2.10): the campaign's other
                    // keys are gone then, and its jobs, if ever published again, are a new run.
                    let removed = try await store.expireCancellations(retentionMs: store.jobMarkRetention * 1000)
                    if !removed.isEmpty {
                        logger.notice("expired campaign cancels removed", metadata: ["campaigns": "\(removed.joined(separator: " "))"])
                    }
                }
            } catch is CancellationError {
                return
            } catch {
                let now = ContinuousClock.now
                if lastWarning.map({ now - $0 > .seconds(10) }) ?? true {
                    lastWarning = now
                    logger.warning(
                        "campaign control not read from Redis; keeping the last state", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
