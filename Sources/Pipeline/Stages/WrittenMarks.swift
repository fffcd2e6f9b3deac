import Logging
import Redis
import Sender
import TimeUnits

/// Sets gate calls' "written" marks in Redis (`docs/design.md §2.4`): the send stage's step right before
/// it hands a batch to the transports. When that is, the transports decide by their back-pressure: a
/// transport takes a batch once its queues hold no more than a few windows of streams (HTTP/2) or what a
/// shard writes at once (binary), so a crash counts `ambiguous` about what may have been written, not
/// everything queued behind Apple's stream limits. The marks go on a Redis connection of their own, so
/// a mark never waits behind a gate or settle call. A mark that cannot be set is retried with back-off:
/// its batch waits (a write before the mark could be an uncounted duplicate after a crash), and a stop
/// cancels the wait.
///
/// A mark is fenced by the heartbeat its call was gated under (``OwnerHeartbeat``): if the heartbeat
/// lapsed since, other processes may have taken the call's jobs over without seeing a mark, so this
/// process counts them `ambiguous` itself before it writes them.
struct WrittenMarks: Sendable {
    let store: PipelineStore
    let heartbeat: OwnerHeartbeat
    let logger: Logger

    /// A new gate call, under the heartbeat's current value.
    func newCall() -> GateCall { heartbeat.newCall() }

    /// Sets `call`'s mark under the heartbeat it was gated with, retrying a failed Redis call with
    /// back-off until it is answered or the task is cancelled. `false`: refused, the heartbeat lapsed
    /// since (``countLapsed(_:notifications:)`` must come before any of the call is written).
    func fencedMark(_ call: GateCall) async throws -> Bool {
        var delay = Duration.milliseconds(100)
        while true {
            do {
                return try await store.markWritten(call: call.id, heartbeat: call.heartbeat)
            } catch {
                try Task.checkCancellation()
                logger.warning(
                    "could not mark a batch written in Redis; its notifications wait (retrying)",
                    metadata: ["error": "\(error)", "retry_in_ms": "\(delay.milliseconds)"])
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
        }
    }

    /// A call whose fenced mark was refused: its notifications are counted `ambiguous` first — exactly
    /// once, by the batch id `lapsed-<call>` — and the mark is set anyway, so that a take-over after a
    /// later crash of this process counts them again.
    func countLapsed(_ call: GateCall, notifications: [PushNotification]) async throws {
        var events = PipelineEvents()
        var campaigns: [String: PipelineEvents] = [:]
        for n in notifications {
            events.ambiguous += 1
            if let campaign = n.campaign { campaigns[campaign, default: PipelineEvents()].ambiguous += 1 }
        }
        if events.ambiguous > 0 {
            var batch = SettleBatch(id: "lapsed-" + call.id, outcomes: [], events: events)
            batch.campaignEvents = campaigns
            try await store.settle(batch)
        }
        try await store.markWritten(call: call.id, heartbeat: nil)
        logger.info(
            "a batch gated before the heartbeat lapsed is written and counted ambiguous",
            metadata: ["call": "\(call.id)", "notifications": "\(events.ambiguous)"])
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
}

/// Where a batch's "written" mark stands when the send stage takes it.
enum WrittenMarkState: Sendable {
    /// Not set yet: the send stage sets it before the hand-off.
    case due
    /// Set (the priority lane sets it while the batch is gated).
    case set
    /// Refused: the heartbeat lapsed since the call was gated (``WrittenMarks/countLapsed(_:notifications:)``).
    case lapsed
}
