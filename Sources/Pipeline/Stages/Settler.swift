import Kafka
import Redis

/// The settle stage: one Redis round trip per gathered batch, then the Kafka offsets, then the in-flight
/// budget. With the outcomes stream, the batch's outcome messages are delivered first (one wait for all
/// of them): nothing is recorded or committed before its message is in the outcomes topic.
struct Settler: Sendable {
    /// A lane's consumer and budget: each lane's positions go back to its own.
    struct LaneSink: Sendable {
        var consumer: KafkaConsumer
        var budget: InFlightBudget
        /// The topic whose positions are this lane's.
        var topic: String
    }

    let inbox: SettlerInbox
    let store: PipelineStore
    let bulk: LaneSink
    let priority: LaneSink?
    let priorityClock: PriorityClock?
    let outcomes: OutcomeStream?
    let metrics: PipelineMetrics?

    /// Until the inbox is closed and empty (or the task is cancelled); throws when Redis or the outcomes
    /// topic fail for longer than their clients wait.
    func run() async throws {
        while let item = await inbox.take() {
            // Jobs a transport held back are stored before their messages settle, whatever the caps: they
            // were taken from Kafka already (design §2.11).
            if !item.deferred.isEmpty { _ = try await store.deferJobs(Self.byCampaign(item.deferred), enforcingCaps: false) }
            if !item.outcomes.isEmpty || item.events != PipelineEvents() || !item.campaignEvents.isEmpty {
                var batch = SettleBatch(outcomes: item.outcomes, events: item.events, shardEvents: item.shardEvents)
                batch.campaignEvents = item.campaignEvents
                if let outcomes, !item.messages.isEmpty { try await outcomes.publish(item.messages, at: batch.settledAt) }
                try await store.settle(batch)
                metrics?.settled(outcomes: item.outcomes, events: item.events)
            }
            var refs = item.refs
            if let priority, !refs.isEmpty {
                let priorityRefs = refs.filter { $0.topic == priority.topic }
                if !priorityRefs.isEmpty {
                    refs.removeAll { $0.topic == priority.topic }
                    _ = priority.consumer.settle(priorityRefs)
                    priority.budget.release(refs: priorityRefs)
                    priorityClock?.forget(priorityRefs)
                }
            }
            if !refs.isEmpty {
                if let metrics {
                    let positions = bulk.consumer.settleReportingPositions(refs)
                    bulk.budget.release(refs: refs)
                    metrics.committable(positions, topic: bulk.topic)
                } else {
                    _ = bulk.consumer.settle(refs)
                    bulk.budget.release(refs: refs)
                }
            }
        }
    }

    /// Transport-held jobs come one deferral each: one per campaign in the call (they are all holds, due
    /// when held; the first one's time stands for the campaign's).
    static func byCampaign(_ deferrals: [Deferral]) -> [Deferral] {
        var merged: [Deferral] = []
        var index: [String: Int] = [:]
        for d in deferrals {
            if let i = index[d.campaign] {
                merged[i].messages.append(contentsOf: d.messages)
            } else {
                index[d.campaign] = merged.count
                merged.append(d)
            }
        }
        return merged
    }
}
