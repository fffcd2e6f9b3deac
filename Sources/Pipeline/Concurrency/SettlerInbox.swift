import Kafka
import Redis
import Synchronization

/// Where every stage drops what it settled: the sender's outcome batches (from event loops) and the
/// ingest stage's own verdicts (dead-lettered, deduped, suppressed). The settler takes what piled up in
/// one go — up to about `outcomesPerTake` outcomes — and records it with one Redis round trip, then
/// settles the Kafka offsets.
///
/// Why a cap: when the settler falls behind, everything pending used to go in one call (tens of thousands
/// of outcomes: a settle command of several MiB built in Swift, copied into hiredis' buffer, answered,
/// all at once), and that burst was a good part of `run`'s peak memory. A put adds to the newest pending
/// item until it holds `outcomesPerTake` outcomes, then starts another; `take` hands out the oldest. An
/// item is never split, so a message's offset settles with (never before) its outcome.
final class SettlerInbox: Sendable {
    struct Item: Sendable {
        var outcomes: [SettledOutcome] = []
        var refs: [MessageRef] = []
        var events = PipelineEvents()
        var shardEvents: [ShardEvents] = []
        var campaignEvents: [String: PipelineEvents] = [:]
        /// The outcomes stream's messages of these outcomes (`kafka.outcomes_topic`; empty without it).
        /// Delivered before the outcomes are recorded and the refs settled.
        var messages: [OutcomeMessage] = []
        /// Jobs a transport held back (their campaign paused): stored in Redis before the outcomes settle.
        var deferred: [Deferral] = []
    }

    private struct State {
        /// Oldest first; each holds up to `outcomesPerTake` outcomes (or one item put larger than that).
        var pending: [Item] = []
        var closed = false
        /// The settler's wait, when it waits: finished to wake it (it then takes under the lock).
        var waiter: AsyncStream<Void>.Continuation?
    }

    private let state = Mutex(State())
    let outcomesPerTake: Int

    /// The default cap: a settle call of ~1 MiB of arguments.
    static let defaultOutcomesPerTake = 8192

    init(outcomesPerTake: Int = SettlerInbox.defaultOutcomesPerTake) {
        self.outcomesPerTake = max(1, outcomesPerTake)
    }

    func put(_ item: Item) {
        let waiter = state.withLock { s -> AsyncStream<Void>.Continuation? in
            if let last = s.pending.indices.last, s.pending[last].outcomes.count + item.outcomes.count <= outcomesPerTake {
                Self.merge(item, into: &s.pending[last])
            } else {
                // Taken over whole (the usual case when the settler keeps up), not copied element by element.
                s.pending.append(item)
            }
            let w = s.waiter
            s.waiter = nil
            return w
        }
        waiter?.finish()
    }

    private static func merge(_ item: Item, into pending: inout Item) {
        if pending.outcomes.isEmpty { pending.outcomes = item.outcomes } else { pending.outcomes.append(contentsOf: item.outcomes) }
        if !item.deferred.isEmpty { pending.deferred.append(contentsOf: item.deferred) }
        if pending.refs.isEmpty { pending.refs = item.refs } else { pending.refs.append(contentsOf: item.refs) }
        if !item.messages.isEmpty {
            if pending.messages.isEmpty { pending.messages = item.messages } else { pending.messages.append(contentsOf: item.messages) }
        }
        pending.events.received += item.events.received
        pending.events.replayed += item.events.replayed
        pending.events.ambiguous += item.events.ambiguous
        pending.events.retried += item.events.retried
        pending.events.reconnects += item.events.reconnects
        pending.events.resentAfterCrash += item.events.resentAfterCrash
        pending.events.inFlightWaits += item.events.inFlightWaits
        pending.events.lostAfterSettle += item.events.lostAfterSettle
        pending.events.refusedAfterSettle += item.events.refusedAfterSettle
        pending.events.gaveUp += item.events.gaveUp
        for (reason, n) in item.events.retriedBy { pending.events.retriedBy[reason, default: 0] += n }
        for (campaign, e) in item.campaignEvents {
            pending.campaignEvents[campaign, default: PipelineEvents()].resentAfterCrash += e.resentAfterCrash
            pending.campaignEvents[campaign, default: PipelineEvents()].ambiguous += e.ambiguous
        }
        pending.shardEvents.append(contentsOf: item.shardEvents)
    }

    /// No more items will come; `take` returns what is left, then nil.
    func close() {
        let waiter = state.withLock { s -> AsyncStream<Void>.Continuation? in
            s.closed = true
            let w = s.waiter
            s.waiter = nil
            return w
        }
        waiter?.finish()
    }

    /// The oldest pending item: what was put since the last take, up to about `outcomesPerTake` outcomes
    /// (waiting for something if empty); nil once closed and empty, or when the caller is cancelled with
    /// nothing pending (a stop never hangs on an inbox nobody puts into again: design §1.3).
    func take() async -> Item? {
        while true {
            let result = state.withLock { s -> (Item?, Bool) in
                if !s.pending.isEmpty { return (s.pending.removeFirst(), false) }
                return (nil, s.closed)
            }
            if let item = result.0 { return item }
            if result.1 || Task.isCancelled { return nil }
            // Wait for a put or the close (each finishes the stream), or the caller's cancellation (which
            // ends the stream's iteration); then look again under the lock. The item stays in `pending`
            // until taken there, so a wait cancelled as it is woken loses nothing.
            let (wake, waiter) = AsyncStream.makeStream(of: Void.self)
            let now = state.withLock { s -> Bool in
                if !s.pending.isEmpty || s.closed { return true }
                s.waiter = waiter
                return false
            }
            if !now {
                for await _ in wake {}
            }
        }
    }
}
