import Kafka
import Redis
import Synchronization

/// Where every stage drops what it settled: the sender's outcome batches (from event loops) and the
/// ingest stage's own verdicts (dead-lettered, deduped, suppressed). The settler takes everything that
/// piled up in one go and records it with one Redis round trip, then settles the Kafka offsets.
final class SettlerInbox: Sendable {
    struct Item: Sendable {
        var outcomes: [Redis.Outcome] = []
        var refs: [MessageRef] = []
        var events = PipelineEvents()
        var shardEvents: [ShardEvents] = []
        var campaignEvents: [String: PipelineEvents] = [:]
    }

    private struct State {
        var pending = Item()
        var count = 0
        var closed = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func put(_ item: Item) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            // Taken over whole when nothing is pending (the usual case: the settler keeps up), rather
            // than copied element by element.
            if s.pending.outcomes.isEmpty { s.pending.outcomes = item.outcomes } else { s.pending.outcomes.append(contentsOf: item.outcomes) }
            if s.pending.refs.isEmpty { s.pending.refs = item.refs } else { s.pending.refs.append(contentsOf: item.refs) }
            s.pending.events.received += item.events.received
            s.pending.events.replayed += item.events.replayed
            s.pending.events.ambiguous += item.events.ambiguous
            s.pending.events.retried += item.events.retried
            s.pending.events.reconnects += item.events.reconnects
            s.pending.events.resentAfterCrash += item.events.resentAfterCrash
            s.pending.events.inFlightWaits += item.events.inFlightWaits
            s.pending.events.lostAfterSettle += item.events.lostAfterSettle
            s.pending.events.refusedAfterSettle += item.events.refusedAfterSettle
            for (campaign, e) in item.campaignEvents {
                s.pending.campaignEvents[campaign, default: PipelineEvents()].resentAfterCrash += e.resentAfterCrash
                s.pending.campaignEvents[campaign, default: PipelineEvents()].ambiguous += e.ambiguous
            }
            s.pending.shardEvents.append(contentsOf: item.shardEvents)
            s.count += 1
            let w = s.waiter
            s.waiter = nil
            return w
        }
        waiter?.resume()
    }

    /// No more items will come; `take` returns what is left, then nil.
    func close() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.closed = true
            let w = s.waiter
            s.waiter = nil
            return w
        }
        waiter?.resume()
    }

    /// Everything put since the last take (waiting for something if empty); nil once closed and empty.
    func take() async -> Item? {
        while true {
            let result = state.withLock { s -> (Item?, Bool) in
                if s.count > 0 {
                    let item = s.pending
                    s.pending = Item()
                    s.count = 0
                    return (item, false)
                }
                return (nil, s.closed)
            }
            if let item = result.0 { return item }
            if result.1 { return nil }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if s.count > 0 || s.closed { return true }
                    s.waiter = c
                    return false
                }
                if resumeNow { c.resume() }
            }
        }
    }
}
