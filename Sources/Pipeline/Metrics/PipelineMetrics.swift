import CoreMetrics
import Foundation
import Kafka
import Redis
import Sender
import Synchronization

/// The pipeline's metrics, through swift-metrics: the counters of the `apns:stats` contract (docs/design.md §4.1
/// "Redis keys") with labels, gauges sampled from the transports and the consumer, and histograms.
///
/// The factory is passed in, not taken from `MetricsSystem`: the global can be bootstrapped once per
/// process, and tests run several pipelines (each with its own Prometheus registry) in one process.
///
/// Updates happen per batch (a settle batch, an outcome batch, a Kafka batch), never per job: the
/// outcomes of a batch are counted into a small dictionary first, then each metric moves once.
/// No label names a token or a job; campaigns are not labels (their ids are unbounded; the dashboard
/// and `apns:campaign:<id>` show them).
public final class PipelineMetrics: Sendable {
    /// Prometheus names (`docs/operations.md` §8 lists them with their meaning).
    public enum Name {
        public static let received = "apns_received_total"
        public static let accepted = "apns_accepted_total"
        public static let rejected = "apns_rejected_total"
        public static let suppressed = "apns_suppressed_total"
        public static let deduped = "apns_deduped_total"
        public static let deadLettered = "apns_dead_lettered_total"
        public static let cancelled = "apns_cancelled_total"
        public static let deferred = "apns_deferred_total"
        public static let capped = "apns_capped_total"
        public static let quiet = "apns_quiet_total"
        public static let heldOut = "apns_held_out_total"
        public static let refusals = "apns_gateway_refusals_total"
        public static let replayed = "apns_replayed_total"
        public static let ambiguous = "apns_ambiguous_total"
        public static let retried = "apns_retried_total"
        /// Every resend by its reason (`reason` label: RetryReason's labels).
        public static let retries = "apns_retries_total"
        public static let gaveUp = "apns_gave_up_total"
        public static let reconnects = "apns_reconnects_total"
        public static let sequenceUnknown = "apns_sequence_unknown_total"
        public static let resentAfterSettle = "apns_resent_after_settle_total"
        public static let lostAfterSettle = "apns_lost_after_settle_total"
        public static let refusedAfterSettle = "apns_refused_after_settle_total"
        public static let deadLetterFailures = "apns_dead_letter_failures_total"
        public static let resentAfterCrash = "apns_resent_after_crash_total"
        public static let inFlightWaits = "apns_in_flight_waits_total"
        public static let writes = "apns_gateway_writes_total"
        public static let framesWritten = "apns_gateway_frames_written_total"
        public static let bytesWritten = "apns_gateway_written_bytes_total"
        public static let inFlightJobs = "apns_in_flight_jobs"
        public static let connectionUp = "apns_connection_up"
        public static let connections = "apns_connections"
        public static let queueDepth = "apns_connection_queue_depth"
        public static let replayBuffer = "apns_replay_buffer_notifications"
        public static let replayBufferBytes = "apns_replay_buffer_bytes"
        public static let streamsInUse = "apns_http2_streams_in_use"
        public static let consumerLag = "apns_kafka_consumer_lag_messages"
        public static let assignedPartitions = "apns_kafka_assigned_partitions"
        public static let settlementLatency = "apns_settlement_latency_seconds"
        public static let kafkaBatch = "apns_kafka_batch_messages"
        public static let settleBatch = "apns_settle_batch_outcomes"
        public static let answerLatency = "apns_gateway_answer_latency_seconds"
        public static let providerTokenAge = "apns_provider_token_age_seconds"
        /// Live Activity pushes handed to the transport at priority 10, per app: each one draws on the
        /// device's Live Activity budget (docs/operations.md §6).
        public static let liveActivityPriority10 = "apns_live_activity_priority10_total"
        /// Broadcasts (jobs for a channel) handed to the transport, per app: each is one request that
        /// reaches every device subscribed to its channel, so they are counted apart from device pushes.
        public static let broadcasts = "apns_broadcasts_total"
        /// Messages delivered to `kafka.outcomes_topic`, by `outcome` (design.md §3.5).
        public static let outcomeMessages = "apns_outcome_messages_total"
        /// Outcome messages the outcomes topic did not take (each retried; settling waits for them).
        public static let outcomeMessageFailures = "apns_outcome_message_failures_total"
        /// The priority lane (`kafka.priority_topic`): a priority job's Kafka timestamp (its publish) to
        /// its transport reporting it accepted, every accepted priority job.
        public static let priorityLatency = "apns_priority_latency_seconds"
        /// Messages the priority lane took from its topic.
        public static let priorityReceived = "apns_priority_received_total"
        /// Per sink (`outcomes`, `dead_letter`) and topic: seconds since the oldest write still failing
        /// first failed (0 when every write is delivered).
        public static let sinkFailing = "apns_sink_failing_seconds"
        /// Jobs held in Redis (paused, scheduled, paced, `apps[].max_rate`), every process's together
        /// (read from Redis: the same in every process).
        public static let heldJobs = "apns_held_jobs"
        /// Their bytes, as the caps count them (`redis.held_max_bytes`).
        public static let heldBytes = "apns_held_bytes"
        /// Jobs this process keeps, unsettled, because the held slots had no room for them.
        public static let heldCapWaiting = "apns_held_cap_waiting_jobs"
        /// Partitions this process holds (does not fetch) while their jobs wait for room.
        public static let heldPartitions = "apns_kafka_held_partitions"
    }

    /// The connection states a transport reports (ConnectionStatistics.state), each a row of `apns_connections`.
    static let connectionStates = ["idle", "connecting", "connected", "backing-off", "waiting", "draining", "closing", "stopped", "closed"]

    /// Buckets of the histograms, for the factory (`PrometheusMetricsFactory.durationHistogramBuckets`
    /// and `valueHistogramBuckets` are keyed by name).
    public static let latencyBuckets: [Duration] = [
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500),
        .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(300), .seconds(900),
    ]
    /// The sender's own fixed buckets (`GatewayAnswerLatency`), so Prometheus' buckets match them.
    public static let answerLatencyBuckets: [Duration] = GatewayAnswerLatency.upperBounds
    /// The priority lane's latency buckets: its goal is a p99 of 100 ms (benchmarks.md §7.3).
    public static let priorityLatencyBuckets: [Duration] = [
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
    ]
    public static let batchBuckets: [Double] = [1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10_000]

    private let factory: any MetricsFactory
    private let transports: [String: String]
    private struct Key: Hashable {
        var name: String
        var labels: [String]
    }
    private let counters = Mutex<[Key: Counter]>([:])
    private let gauges = Mutex<[Key: Gauge]>([:])
    private let timers = Mutex<[Key: CoreMetrics.Timer]>([:])
    private let received: Counter
    private let resentAfterCrash: Counter
    private let inFlightWaits: Counter
    private let deadLetterFailures: Counter
    private let inFlightJobs: Gauge
    private let assignedPartitions: Gauge
    private let settlementLatency: CoreMetrics.Timer
    private let kafkaBatch: Recorder
    private let settleBatch: Recorder
    private let priorityLatency: CoreMetrics.Timer
    /// Per partition, (offset, Kafka timestamp) of the first message of each batch not yet known settled:
    /// the latency histogram samples one message per partition and batch (per-batch work, not per job).
    private let latencySamples = Mutex<[Int32: [(offset: Int64, timestampMs: Int64)]]>([:])

    /// `transports`: app → `binary` / `http2`, the `transport` label of what is counted by app.
    public init(factory: any MetricsFactory, transports: [String: String]) {
        self.factory = factory
        self.transports = transports
        received = Counter(label: Name.received, factory: factory)
        resentAfterCrash = Counter(label: Name.resentAfterCrash, factory: factory)
        inFlightWaits = Counter(label: Name.inFlightWaits, factory: factory)
        deadLetterFailures = Counter(label: Name.deadLetterFailures, factory: factory)
        inFlightJobs = Gauge(label: Name.inFlightJobs, factory: factory)
        assignedPartitions = Gauge(label: Name.assignedPartitions, factory: factory)
        settlementLatency = CoreMetrics.Timer(label: Name.settlementLatency, factory: factory)
        kafkaBatch = Recorder(label: Name.kafkaBatch, factory: factory)
        settleBatch = Recorder(label: Name.settleBatch, factory: factory)
        priorityLatency = CoreMetrics.Timer(label: Name.priorityLatency, factory: factory)
        // Every series exists from the start (at 0), so rates and alerts work before the first event.
        for (app, transport) in transports {
            for name in [Name.accepted, Name.rejected, Name.replayed, Name.ambiguous, Name.retried, Name.reconnects, Name.gaveUp] {
                _ = counter(name, ["app": app, "transport": transport])
            }
            for name in [
                Name.suppressed, Name.deduped, Name.deadLettered, Name.cancelled, Name.deferred, Name.capped, Name.quiet, Name.heldOut,
            ] {
                _ = counter(name, ["app": app])
            }
        }
    }

    private func counter(_ name: String, _ labels: KeyValuePairs<String, String>) -> Counter {
        let key = Key(name: name, labels: labels.flatMap { [$0.key, $0.value] })
        return counters.withLock { cache in
            if let c = cache[key] { return c }
            let c = Counter(label: name, dimensions: labels.map { ($0.key, $0.value) }, factory: factory)
            cache[key] = c
            return c
        }
    }

    private func gauge(_ name: String, _ labels: KeyValuePairs<String, String>) -> Gauge {
        let key = Key(name: name, labels: labels.flatMap { [$0.key, $0.value] })
        return gauges.withLock { cache in
            if let g = cache[key] { return g }
            let g = Gauge(label: name, dimensions: labels.map { ($0.key, $0.value) }, factory: factory)
            cache[key] = g
            return g
        }
    }

    private func timer(_ name: String, _ labels: KeyValuePairs<String, String>) -> CoreMetrics.Timer {
        let key = Key(name: name, labels: labels.flatMap { [$0.key, $0.value] })
        return timers.withLock { cache in
            if let t = cache[key] { return t }
            let t = CoreMetrics.Timer(label: name, dimensions: labels.map { ($0.key, $0.value) }, factory: factory)
            cache[key] = t
            return t
        }
    }

    private func transport(_ app: String) -> String { transports[app] ?? "none" }

    // MARK: events

    /// A batch taken from Kafka (and the first message per partition, for the latency histogram).
    func kafkaBatch(_ messages: [KafkaConsumerMessage]) {
        received.increment(by: messages.count)
        kafkaBatch.record(messages.count)
        var firsts: [Int32: (Int64, Int64)] = [:]
        for m in messages where firsts[m.partition] == nil {
            if let t = m.timestampMilliseconds { firsts[m.partition] = (m.offset, t) }
        }
        guard !firsts.isEmpty else { return }
        latencySamples.withLock { samples in
            for (partition, sample) in firsts {
                // Bounded: a partition whose samples never settle (revoked) keeps at most the newest 256.
                if samples[partition, default: []].count >= 256 { samples[partition]!.removeFirst() }
                samples[partition, default: []].append(sample)
            }
        }
    }

    /// What one settle call recorded in Redis (the same outcomes and events, so the metrics and
    /// `apns:stats` move together).
    func settled(outcomes: [SettledOutcome], events: PipelineEvents) {
        struct OutcomeKey: Hashable {
            var app: String
            var kind: SettledOutcomeKind
        }
        struct RefusalKey: Hashable {
            var app: String
            var code: String
        }
        var byOutcome: [OutcomeKey: Int] = [:]
        var byRefusal: [RefusalKey: Int] = [:]
        // Outcomes come in runs of one app and kind (a shard's settle tick): counted per run, so the
        // dictionary is touched once per run rather than once per job.
        var run: (key: OutcomeKey, count: Int)?
        // Read in place: `for o in outcomes` copied every outcome (a reference count per string).
        for i in outcomes.indices {
            let kind = outcomes[i].kind
            if let r = run, r.key.kind == kind, r.key.app == outcomes[i].app {
                run!.count += 1
            } else {
                if let r = run { byOutcome[r.key, default: 0] += r.count }
                run = (OutcomeKey(app: outcomes[i].app, kind: kind), 1)
            }
            if let code = outcomes[i].code { byRefusal[RefusalKey(app: outcomes[i].app, code: code), default: 0] += 1 }
        }
        if let r = run { byOutcome[r.key, default: 0] += r.count }
        for (key, n) in byOutcome {
            // A message that failed to decode has no app; an app the pipeline file does not name never
            // becomes a label (one series per name a producer invents would grow without bound).
            let app = transports[key.app] == nil ? "unknown" : key.app
            switch key.kind {
            case .accepted: counter(Name.accepted, ["app": app, "transport": transport(key.app)]).increment(by: n)
            case .rejected: counter(Name.rejected, ["app": app, "transport": transport(key.app)]).increment(by: n)
            case .suppressed: counter(Name.suppressed, ["app": app]).increment(by: n)
            case .deduped: counter(Name.deduped, ["app": app]).increment(by: n)
            case .deadLettered: counter(Name.deadLettered, ["app": app]).increment(by: n)
            case .cancelled: counter(Name.cancelled, ["app": app]).increment(by: n)
            case .deferred: counter(Name.deferred, ["app": app]).increment(by: n)
            case .capped: counter(Name.capped, ["app": app]).increment(by: n)
            case .quiet: counter(Name.quiet, ["app": app]).increment(by: n)
            case .heldOut: counter(Name.heldOut, ["app": app]).increment(by: n)
            }
        }
        for (key, n) in byRefusal {
            let app = transports[key.app] == nil ? "unknown" : key.app
            counter(Name.refusals, ["app": app, "transport": transport(key.app), "code": key.code]).increment(by: n)
        }
        if events.resentAfterCrash > 0 { resentAfterCrash.increment(by: events.resentAfterCrash) }
        if events.inFlightWaits > 0 { inFlightWaits.increment(by: events.inFlightWaits) }
        settleBatch.record(outcomes.count)
    }

    /// Jobs a gate call took over from a dead process (counted in Redis before they are sent again, not
    /// with their settle batch).
    func takenOver(_ n: Int) {
        if n > 0 { resentAfterCrash.increment(by: n) }
    }

    /// A transport's outcome batch: its connection events (counted here, with the app, as they are
    /// reported; Redis counts the same numbers when the batch settles).
    func senderEvents(app: String, _ e: SenderEvents) {
        guard !e.isEmpty else { return }
        let labels: KeyValuePairs<String, String> = ["app": app, "transport": transport(app)]
        if e.replayed > 0 { counter(Name.replayed, labels).increment(by: e.replayed) }
        if e.ambiguous > 0 { counter(Name.ambiguous, labels).increment(by: e.ambiguous) }
        if e.retried > 0 { counter(Name.retried, labels).increment(by: e.retried) }
        if e.gaveUp > 0 { counter(Name.gaveUp, labels).increment(by: e.gaveUp) }
        if !e.retriedBy.isEmpty {
            for reason in RetryReason.allCases where e.retriedBy[reason] > 0 {
                counter(Name.retries, ["app": app, "transport": transport(app), "reason": reason.label]).increment(by: e.retriedBy[reason])
            }
        }
        if e.reconnects > 0 { counter(Name.reconnects, labels).increment(by: e.reconnects) }
        if e.sequenceUnknown > 0 { counter(Name.sequenceUnknown, labels).increment(by: e.sequenceUnknown) }
        if e.resentAfterSettle > 0 { counter(Name.resentAfterSettle, labels).increment(by: e.resentAfterSettle) }
        if e.lostAfterSettle > 0 { counter(Name.lostAfterSettle, labels).increment(by: e.lostAfterSettle) }
        if e.refusedAfterSettle > 0 { counter(Name.refusedAfterSettle, labels).increment(by: e.refusedAfterSettle) }
        if e.writes > 0 { counter(Name.writes, labels).increment(by: e.writes) }
        if e.framesWritten > 0 { counter(Name.framesWritten, labels).increment(by: e.framesWritten) }
        if e.bytesWritten > 0 { counter(Name.bytesWritten, labels).increment(by: e.bytesWritten) }
        let latency = e.answerLatency
        if !latency.isEmpty {
            // swift-metrics records one value at a time: each bucket is replayed as its count of the
            // bucket's mean, which lies in the same bucket (Prometheus' bucket counts and sum stay
            // exact). Here, off the connection's event loop, not in the sender's per-request path.
            let histogram = timer(Name.answerLatency, labels)
            for i in latency.counts.indices where latency.counts[i] > 0 {
                let n = latency.counts[i]
                let mean = latency.nanoseconds[i] / Int64(n)
                for _ in 0..<n { histogram.recordNanoseconds(mean) }
            }
        }
    }

    func deadLetterFailed(_ count: Int) { deadLetterFailures.increment(by: count) }

    /// A settle batch's outcome messages were delivered (one call per batch, counted by outcome first).
    func outcomeMessages(_ messages: [OutcomeMessage]) {
        var byOutcome: [SettledOutcomeKind: Int] = [:]
        for m in messages { byOutcome[m.outcome, default: 0] += 1 }
        for (outcome, count) in byOutcome { counter(Name.outcomeMessages, ["outcome": outcome.rawValue]).increment(by: count) }
    }

    /// `count` outcome messages failed one attempt (they are sent again).
    func outcomeMessageFailures(_ count: Int) { counter(Name.outcomeMessageFailures, [:]).increment(by: count) }

    /// `count` priority-10 Live Activity pushes of `app` went to its transport (one call per app per batch).
    func liveActivityPriority10(app: String, count: Int) {
        counter(Name.liveActivityPriority10, ["app": app]).increment(by: count)
    }

    /// `count` broadcasts of `app` went to its transport (one call per app per batch).
    func broadcastsSent(app: String, count: Int) {
        counter(Name.broadcasts, ["app": app]).increment(by: count)
    }

    /// After a settle: samples below each partition's commit position (everything before it is settled)
    /// are observed, from their Kafka timestamp to now.
    func committable(_ positions: [TopicPartition: Int64], topic: String) {
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let observed = latencySamples.withLock { samples -> [Int64] in
            var out: [Int64] = []
            for (tp, position) in positions where tp.topic == topic {
                guard var list = samples[tp.partition], !list.isEmpty else { continue }
                let settled = list.prefix { $0.offset < position }
                if settled.isEmpty { continue }
                out.append(contentsOf: settled.map { nowMs - $0.timestampMs })
                list.removeFirst(settled.count)
                samples[tp.partition] = list
            }
            return out
        }
        for ms in observed { settlementLatency.recordMilliseconds(max(0, ms)) }
    }

    /// A batch taken by the priority lane (counted as received too; its messages are no sample of the
    /// jobs topic's settlement latency).
    func priorityBatch(_ count: Int) {
        received.increment(by: count)
        counter(Name.priorityReceived, [:]).increment(by: count)
    }

    /// A priority job reported accepted, `latencyMs` after it was published.
    func priorityAccepted(latencyMs: Int64) {
        priorityLatency.recordMilliseconds(latencyMs)
    }

    // MARK: gauges (sampled)

    func inFlight(_ jobs: Int) { inFlightJobs.record(jobs) }

    /// Held jobs in Redis (all campaigns, from Redis) and, in this process, the jobs waiting at the cap
    /// and the partitions held for them.
    func held(jobs: Int64, bytes: Int64) {
        gauge(Name.heldJobs, [:]).record(jobs)
        gauge(Name.heldBytes, [:]).record(bytes)
    }

    func heldCap(waiting: Int, partitions: Int) {
        gauge(Name.heldCapWaiting, [:]).record(waiting)
        gauge(Name.heldPartitions, [:]).record(partitions)
    }

    /// Every connection of every transport: state, queue, and what it holds unsettled (a replay buffer, or
    /// streams: ``TransportConfiguration/unsettledHolding``). `transport`: each one's configuration type.
    func connections(_ all: [(transport: any TransportConfiguration.Type, statistics: [ConnectionStatistics])]) {
        for (kind, stats) in all {
            let transport = kind.protocolName
            var perState: [String: [String: Int]] = [:]
            var tokenAge: [String: Int64] = [:]
            for s in stats {
                let labels: KeyValuePairs<String, String> = ["app": s.app, "transport": transport, "connection": String(s.index)]
                gauge(Name.connectionUp, labels).record(s.state == "connected" || s.state == "draining" ? 1 : 0)
                gauge(Name.queueDepth, labels).record(s.queueDepth)
                switch kind.unsettledHolding {
                case .openStreams:
                    // Requests written and not answered yet: the streams open on the connection.
                    gauge(Name.streamsInUse, ["app": s.app, "connection": String(s.index)]).record(s.replayCount)
                case .replayBuffer:
                    gauge(Name.replayBuffer, ["app": s.app, "connection": String(s.index)]).record(s.replayCount)
                    gauge(Name.replayBufferBytes, ["app": s.app, "connection": String(s.index)]).record(s.replayBytes)
                }
                perState[s.app, default: [:]][s.state, default: 0] += 1
                if let age = s.providerTokenAge { tokenAge[s.app] = max(tokenAge[s.app] ?? 0, age) }
            }
            // The oldest token an app's connections send (they share one per (team, key)).
            for (app, age) in tokenAge { gauge(Name.providerTokenAge, ["app": app]).record(age) }
            for (app, counts) in perState {
                for state in Set(Self.connectionStates).union(counts.keys) {
                    gauge(Name.connections, ["app": app, "transport": transport, "state": state]).record(counts[state] ?? 0)
                }
            }
        }
    }

    /// How long each sink's oldest failing write has been failing (zero: none is).
    func sinks(_ all: [(sink: String, topic: String, failingFor: Duration)]) {
        for s in all {
            let (seconds, attoseconds) = s.failingFor.components
            gauge(Name.sinkFailing, ["sink": s.sink, "topic": s.topic]).record(Double(seconds) + Double(attoseconds) / 1e18)
        }
    }

    /// The consumer's assignment and, per partition, its lag (librdkafka statistics).
    func consumer(assigned: Int, lag: [TopicPartition: Int64]) {
        assignedPartitions.record(assigned)
        for (tp, messages) in lag {
            gauge(Name.consumerLag, ["topic": tp.topic, "partition": String(tp.partition)]).record(messages)
        }
    }
}
