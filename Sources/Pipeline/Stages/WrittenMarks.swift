import Logging
import NIOCore
import Redis
import Sender
import Synchronization
import TimeUnits

/// Sets gate calls' "written" marks in Redis when a transport asks for leave to write them
/// (``WriteClearance``, `docs/design.md §2.4`), one at a time on a Redis connection of their own, so a
/// mark never waits behind a gate or settle call. A mark that cannot be set is retried with back-off: its
/// notifications wait (a write before the mark could be an uncounted duplicate after a crash), and the
/// stop's drain timeout bounds the wait.
///
/// A mark is fenced by the heartbeat its call was gated under (``OwnerHeartbeat``): if the heartbeat
/// lapsed since, other processes may have taken the call's jobs over without seeing a mark, so this
/// process counts them `ambiguous` itself before it writes them (``CallTally``).
final class WrittenMarks: Sendable {
    private typealias Ask = (call: GateCall, tally: CallTally, clearance: WriteClearance)
    private let asks: AsyncStream<Ask>
    private let continuation: AsyncStream<Ask>.Continuation
    private let store: PipelineStore
    let heartbeat: OwnerHeartbeat
    private let logger: Logger
    /// Where `run` sets the marks.
    private let executor: EventLoopTaskExecutor

    /// `eventLoop`: the marks are set on it rather than on Swift's pool. A transport's connection that
    /// asked for a mark writes nothing of its call until it is set; through the pool the way took two
    /// waits for a busy thread, longer than the connection's look-ahead at full rate, and connections
    /// stopped writing at 845 of the 1 200 calls of a 300 000-job run.
    init(store: PipelineStore, heartbeat: OwnerHeartbeat, eventLoop: any EventLoop, logger: Logger) {
        (asks, continuation) = AsyncStream.makeStream(of: Ask.self)
        self.store = store
        self.heartbeat = heartbeat
        self.logger = logger
        self.executor = EventLoopTaskExecutor(eventLoop)
    }

    /// A new gate call, under the heartbeat's current value.
    func newCall() -> GateCall { heartbeat.newCall() }

    /// The leave to write gate call `call`'s notifications: its mark is set when a transport first asks.
    /// `tally`: what the call's notifications count, filled before they are handed on.
    func clearance(call: GateCall, tally: CallTally) -> WriteClearance {
        WriteClearance { [continuation] clearance in continuation.yield((call, tally, clearance)) }
    }

    /// Sets gate call `call`'s mark now and grants `clearance` (a batch for binary shards, which write
    /// what they are given at once). Throws as the Redis call does: the send stage stops, as for a gate
    /// call that fails.
    func markNow(call: GateCall, tally: CallTally, clearance: WriteClearance) async throws {
        try await mark(call, tally: tally)
        clearance.grant()
    }

    /// Records in Redis, before any of gate call `call`'s notifications may be written, the jobs it took
    /// over from a process that died (`resent_after_crash`, and `ambiguous` for those the dead process may
    /// have written; design §2.4). Counted at the next settle instead, a kill -9 between the take-over and
    /// that settle lost the count while the jobs had already gone out once more: a job sent by three
    /// processes in turn was counted once for two duplicates (soak scenario a, two kills).
    /// Exactly once per call (the batch id `takeover-<call>` is the settle's marker). Only the take-over
    /// path pays this round trip.
    func recordTakeOvers(call: GateCall, events: PipelineEvents, campaignEvents: [String: PipelineEvents]) async throws {
        var batch = SettleBatch(id: "takeover-" + call.id, outcomes: [], events: events)
        batch.campaignEvents = campaignEvents
        try await store.settle(batch)
    }

    /// Sets the marks asked for until cancelled.
    func run() async {
        await withTaskExecutorPreference(executor) { await setMarks() }
    }

    private func setMarks() async {
        for await ask in asks {
            var delay = Duration.milliseconds(100)
            while !Task.isCancelled {
                do {
                    try await mark(ask.call, tally: ask.tally)
                    ask.clearance.grant()
                    break
                } catch {
                    logger.warning(
                        "could not mark a batch written in Redis; its notifications wait (retrying)",
                        metadata: ["error": "\(error)", "retry_in_ms": "\(delay.milliseconds)"])
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, .seconds(5))
                }
            }
            if Task.isCancelled { return }
        }
    }

    /// The mark of `call`, fenced by its heartbeat value. Refused (the heartbeat lapsed since the call
    /// was gated), the call's jobs are counted `ambiguous` first — exactly once, by the batch id
    /// `lapsed-<call>` — and the mark is set anyway, so that a take-over after a later crash of this
    /// process counts them again.
    private func mark(_ call: GateCall, tally: CallTally) async throws {
        if try await store.markWritten(call: call.id, heartbeat: call.heartbeat) { return }
        let (events, campaignEvents) = tally.counts
        if events.ambiguous > 0 {
            var batch = SettleBatch(id: "lapsed-" + call.id, outcomes: [], events: events)
            batch.campaignEvents = campaignEvents
            try await store.settle(batch)
        }
        try await store.markWritten(call: call.id, heartbeat: nil)
        logger.info(
            "a batch gated before the heartbeat lapsed is written and counted ambiguous",
            metadata: ["call": "\(call.id)", "notifications": "\(events.ambiguous)"])
    }

    func finish() { continuation.finish() }
}

/// What a gate call's notifications count as `ambiguous` (in the totals and per campaign) if the call must
/// be counted by its own process (``WrittenMarks``): filled by the send stage before the notifications
/// are handed on, read when a transport asks for the mark.
final class CallTally: Sendable {
    private let state = Mutex<(events: PipelineEvents, campaigns: [String: PipelineEvents])>((PipelineEvents(), [:]))

    /// One per notification, in the totals and its campaign's.
    func count(_ notifications: [PushNotification]) {
        var events = PipelineEvents()
        var campaigns: [String: PipelineEvents] = [:]
        for n in notifications {
            events.ambiguous += 1
            if let campaign = n.campaign { campaigns[campaign, default: PipelineEvents()].ambiguous += 1 }
        }
        state.withLock { $0 = (events, campaigns) }
    }

    var counts: (PipelineEvents, [String: PipelineEvents]) { state.withLock { ($0.events, $0.campaigns) } }
}
