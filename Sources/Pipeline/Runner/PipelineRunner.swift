import Foundation
import Kafka
import Logging
import NIOPosix
import Redis
import Sender
import ServiceLifecycle
import Synchronization

/// The assembled pipeline: Kafka → decode → Gate (Redis) → Router/Shards → Settler (Redis, Kafka
/// offsets), with registrations and the feedback poller beside it. Runs as a swift-service-lifecycle
/// `Service`: on graceful shutdown it stops consuming, drains the shards (drain probe), settles what
/// came back, commits offsets and returns.
///
/// Every stage is a child task of `run` (design §1.5): the lanes (`BulkLane`, `PriorityLane`) and the
/// settler in one group, the stages that live as long as the process (`Housekeeping`,
/// campaign control, deferred releases, dead letters) in the group around it.
public final class PipelineRunner: Service, Sendable {
    public let configuration: PipelineConfiguration
    let logger: Logger
    /// The event loops of every connection: gateways, Redis (and, in `run`, the operations port).
    let group: MultiThreadedEventLoopGroup
    /// Whether `run` shuts ``group`` down when it ends (a group it made itself; a caller's outlives it).
    private let ownsGroup: Bool
    let budget: InFlightBudget
    /// The priority lane's own budget (`pipeline.priority_max_in_flight`); nil without `kafka.priority_topic`.
    let priorityBudget: InFlightBudget?
    /// The priority lane's publish times, for its latency histogram (nil without the lane).
    let priorityClock: PriorityClock?
    let inbox = SettlerInbox()
    let observed = Mutex(Observed())
    let waitLog = LeaseWaitLog()
    /// Campaign control (cancel, …) as this process last read it from Redis (design §2.10).
    let controls: CampaignControls
    /// The lanes' jobs waiting at the held-bytes cap (for the gauges).
    let capWaiting = Mutex<[CapWaits]>([])
    /// Fired when the settler gave up on Redis: nothing more is sent, not even by the stop's drain, since
    /// what is sent now could never be recorded (its duplicates would go uncounted).
    let sendingStopped = StopSignal()
    /// When a graceful stop must be over: `drain_timeout_s` after it began.
    private let stopDeadline = Mutex<ContinuousClock.Instant?>(nil)
    /// Metrics (nil: off): updated per batch; gauges sampled every `Housekeeping.metricsSampleInterval`.
    let metrics: PipelineMetrics?
    /// Set when `kafka.outcomes_topic` is: the stages then make each settled job's outcome message.
    let outcomeMessages: OutcomeMessageOptions?
    /// Reasons not to be ready that parts of the process add (a sink refusing writes, …), listed by
    /// `readiness()` beside its own checks.
    public let notReady = ReadinessReasons()
    /// Broadcast channels' storage policies, read from APNs once per channel (nil: no app can broadcast).
    let channelPolicies: ChannelPolicies?
    /// The parts `readiness()` looks at, while running (nil from the start of a stop).
    private let live = Mutex<LiveParts?>(nil)
    private struct LiveParts: Sendable {
        var consumer: KafkaConsumer
        var transports: [any NotificationTransport]
    }

    /// What this instance did, for tests and operators.
    public struct Observed: Sendable {
        /// Jobs this instance took from Kafka.
        public var received = 0
        /// The positions it committed when it stopped (partition → next offset to read).
        public var finalCommitPositions: [Int32: Int64] = [:]
    }

    public var observations: Observed { observed.withLock { $0 } }

    /// `eventLoopGroup`: the loops to run every connection on, which the caller shuts down once `run`
    /// returned (`run` shares its group with the operations port); nil: a group of
    /// `pipeline.event_loop_threads` loops of the runner's own, shut down at the end of `run`.
    public init(
        configuration: PipelineConfiguration, logger: Logger, metrics: PipelineMetrics? = nil,
        eventLoopGroup: MultiThreadedEventLoopGroup? = nil
    ) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        controls = CampaignControls(logger: logger)
        group = eventLoopGroup ?? MultiThreadedEventLoopGroup(numberOfThreads: configuration.eventLoopThreads)
        ownsGroup = eventLoopGroup == nil
        budget = InFlightBudget(capacity: configuration.maxInFlight, byteCapacity: configuration.maxInFlightBytes)
        outcomeMessages =
            configuration.kafka.outcomesTopic == nil
            ? nil
            : OutcomeMessageOptions(
                appsWithRequestIDs: Set(configuration.apps.filter { $0.transport.capabilities.requestsHaveIDs }.map(\.bundleID)))
        channelPolicies = Self.channelPolicies(configuration, group: group, logger: logger)
        if configuration.kafka.priorityTopic != nil {
            // Large priority messages get a quarter of the byte budget, on top of the bulk lane's.
            priorityBudget = InFlightBudget(
                capacity: configuration.priorityMaxInFlight, byteCapacity: max(1 << 20, configuration.maxInFlightBytes / 4))
            priorityClock = PriorityClock()
        } else {
            priorityBudget = nil
            priorityClock = nil
        }
    }

    public func run() async throws {
        let c = configuration
        let parts = try await assemble()
        for sink in parts.sinks {
            notReady.watch("kafka.sink.\(sink.sink.rawValue)") { sink.problem() }
        }
        live.withLock { $0 = LiveParts(consumer: parts.consumer, transports: parts.transports) }
        logStart(parts)
        KeyFilePermissions.warn(c, logger: logger)
        // The heartbeat lives before the first lease is taken; other processes void this one's leases
        // once it stops beating (a crash), without waiting out the lease.
        try await parts.marks.heartbeat.start(store: parts.settlerStore)
        // A campaign cancelled before this process started is never sent by it.
        try await controls.poll(store: parts.controlStore)

        var failure: (any Error)?
        // The Kafka clients poll while their `run()` runs (design §1.5): children of this group, ended by
        // the `close` at the end of the stop, after the settler recorded what came back.
        await withDiscardingTaskGroup { kafka in
            for client in parts.kafkaClients {
                kafka.addTask {
                    do {
                        try await client.run()
                    } catch {
                        self.logger.error("a Kafka client stopped polling", metadata: ["error": "\(error)"])
                    }
                }
            }
            await withDiscardingTaskGroup { background in
                background.addTask { await self.housekeeping(parts).run() }
                background.addTask { await self.controls.run(store: parts.controlStore) }
                background.addTask { await parts.release.run() }
                background.addTask { await parts.deadLetters.run() }
                failure = await runLanesAndSettle(parts)
                background.cancelAll()
            }
            // A control change no longer waits for this process.
            try? await parts.controlStore.forgetControlAcknowledgement()
            // Stopped: anything still leased (unsettled after a drain timeout) may be taken over at once.
            do {
                try await parts.settlerStore.endHeartbeat()
            } catch {
                logger.warning(
                    "could not remove the heartbeat; it lapses on its own", metadata: ["owner": "\(parts.owner)", "error": "\(error)"])
            }
            if let error = await close(parts) { failure = failure ?? error }
        }
        if ownsGroup { try? await group.shutdownGracefully() }
        if let failure { throw failure }
        logger.info("pipeline stopped")
    }

    /// How the lanes ended.
    private enum LaneEnd: Sendable {
        case lane(Lane, failure: (any Error)?)
        /// A graceful stop began `drainTimeout` ago, and batches taken are still being sent.
        case drainTimeout
        /// The settler gave up: every lane stops now.
        case sendingStopped
        /// A watcher whose event did not come (cancelled once the lanes ended).
        case idle
    }

    /// The lanes and the settler until a stop: the lanes end (a graceful stop, the drain timeout, a
    /// failure), the transports drain, the settler takes what came back. Returns the first failure.
    private func runLanesAndSettle(_ parts: PipelineParts) async -> (any Error)? {
        await withTaskGroup(of: (any Error)?.self) { stages in
            stages.addTask { await self.runSettler(parts) }
            var failure = await runLanes(parts)
            await endStages(parts)
            if let error = await stages.next() ?? nil {
                logger.error("settler stopped: outcomes not recorded stay unsettled and are redelivered", metadata: ["error": "\(error)"])
                failure = failure ?? error
            }
            return failure
        }
    }

    /// The settler until its inbox closes. Returns its failure, having stopped every lane's sending.
    private func runSettler(_ parts: PipelineParts) async -> (any Error)? {
        do {
            try await settler(parts).run()
            return nil
        } catch {
            // Nothing settles any more and the in-flight budget never frees: stop taking and sending
            // jobs, and let the process exit non-zero.
            sendingStopped.fire()
            return error
        }
    }

    /// The lanes until each has ended, or the first failure, the drain timeout or the settler giving up
    /// ends them all. Returns the first lane's failure.
    private func runLanes(_ parts: PipelineParts) async -> (any Error)? {
        let c = configuration
        return await withTaskGroup(of: LaneEnd.self) { lanes in
            var running = addLanes(parts, to: &lanes)
            addStopWatchers(to: &lanes)
            var failure: (any Error)?
            while running > 0, let end = await lanes.next() {
                switch end {
                case .lane(let lane, let error):
                    running -= 1
                    if let error, !(error is CancellationError) {
                        // Either lane's failure stops the process (what is unsettled is redelivered).
                        logger.error(
                            lane == .bulk ? "ingest stopped; shutting down" : "priority lane stopped; shutting down",
                            metadata: ["error": "\(error)"])
                        failure = failure ?? error
                        lanes.cancelAll()
                    }
                case .drainTimeout:
                    logger.warning(
                        "stop: batches taken from Kafka were not all sent before the drain timeout; the rest stay unsettled and are redelivered",
                        metadata: ["drain_timeout_s": "\(c.drainTimeout.components.seconds)"])
                    lanes.cancelAll()
                case .sendingStopped:
                    lanes.cancelAll()
                case .idle:
                    break
                }
            }
            lanes.cancelAll()
            return failure
        }
    }

    /// Starts the bulk lane, and the priority lane when there is one. Returns how many were started:
    /// the lanes' group runs until that many ended.
    private func addLanes(_ parts: PipelineParts, to lanes: inout TaskGroup<LaneEnd>) -> Int {
        lanes.addTask {
            do {
                try await self.bulkLane(parts).run()
                return .lane(.bulk, failure: nil)
            } catch {
                return .lane(.bulk, failure: error)
            }
        }
        guard let priority = parts.priority, let priorityBudget else { return 1 }
        // Its tasks run at a higher priority than the bulk lane's: on a busy machine the
        // cooperative threads take its work before the next bulk batch's decoding or encoding.
        lanes.addTask(priority: .high) {
            do {
                try await self.priorityLane(parts, priority, budget: priorityBudget).run()
                return .lane(.priority, failure: nil)
            } catch {
                return .lane(.priority, failure: error)
            }
        }
        return 2
    }

    /// The watchers that end the lanes from outside: the drain timeout after a graceful stop, and the
    /// settler giving up.
    private func addStopWatchers(to lanes: inout TaskGroup<LaneEnd>) {
        let c = configuration
        // The stop is bounded whatever Apple, Redis or Kafka do (`docs/design.md §1.3`): from a
        // graceful stop, the batches already taken get `drainTimeout` to be gated and sent.
        lanes.addTask {
            guard (try? await gracefulShutdown()) != nil else { return .idle }
            self.logger.info("shutting down: no more jobs taken from Kafka; draining the shards")
            self.live.withLock { $0 = nil }  // readiness: "not running" from here on
            let deadline = ContinuousClock.now + c.drainTimeout
            self.stopDeadline.withLock { $0 = deadline }
            guard (try? await Task.sleep(until: deadline)) != nil else { return .idle }
            return .drainTimeout
        }
        lanes.addTask {
            await self.sendingStopped.wait()
            return self.sendingStopped.isFired ? .sendingStopped : .idle
        }
    }

    /// Once the lanes ended: the transports drain until the stop's deadline, the stages feeding the
    /// settler finish, and its inbox closes so that it ends once it took the rest.
    private func endStages(_ parts: PipelineParts) async {
        live.withLock { $0 = nil }
        let deadline = stopDeadline.withLock { $0 } ?? .now + configuration.drainTimeout
        // An outcomes topic still failing then is given up on: those jobs stay unsettled (redelivered).
        parts.outcomeStream?.giveUp(at: deadline)
        await drain(parts, before: deadline)
        // Dead letters still failing are abandoned: their messages stay unsettled, so are redelivered.
        await parts.deadLetters.finish()
        inbox.close()
    }

    /// Every shard proves what it sent (probe), every HTTP/2 request is answered, or `deadline` passes;
    /// outcomes flow to the settler. Nothing is drained once the settler gave up: nothing more is
    /// written, and the event loops' shutdown closes every connection (what they held stays unsettled).
    private func drain(_ parts: PipelineParts, before deadline: ContinuousClock.Instant) async {
        if sendingStopped.isFired {
            logger.error("settler stopped: not draining the transports (nothing more is sent)")
            return
        }
        let drained = await parts.router.drainAndClose(before: deadline)
        let unanswered = drained.values.joined().reduce(0) { n, r in
            if case .timedOut(let u) = r { return n + u }
            return n
        }
        if unanswered > 0 {
            // Written and unanswered: each may have reached a device. Not counted here: the stop
            // removes the heartbeat, so the process that gets them from Kafka takes their leases over
            // and counts them `ambiguous` then (their batches are marked written), once.
            logger.warning(
                "stop: requests still unanswered at the drain timeout are left unsettled (redelivered; counted ambiguous when taken over)",
                metadata: ["unanswered": "\(unanswered)"])
        }
        logger.info("shards drained", metadata: ["results": "\(drained.mapValues { $0.map { "\($0)" } })"])
    }

    // MARK: readiness

    /// Whether this process can do its work now, and if not, why (one line per problem): the consumer
    /// holds partitions of the jobs topic, each app has a gateway connection up (or idle: connections
    /// open with the first notification after they closed), and no part has a reason in ``notReady``
    /// (the outcomes or dead-letter topic refusing writes past `pipeline.readiness_grace_s`, …). Redis is
    /// checked by the caller, with a connection of its own (the pipeline's wait minutes for Redis before
    /// they fail).
    public func readiness() async -> [String] {
        guard let parts = live.withLock({ $0 }) else { return ["not running: the pipeline is starting or stopping"] }
        var problems: [String] = []
        if parts.consumer.statistics.assignedPartitions.isEmpty {
            problems.append(
                "kafka: no partition of \(configuration.kafka.jobsTopic) assigned to this process (group joining, Kafka unreachable, or more processes than partitions)"
            )
        }
        for t in parts.transports {
            let stats = await t.statistics()
            // `idle`: not connected because nothing needed sending since the last connection closed (or
            // ever): it connects with the next notification. Connecting, backing off, waiting to
            // reconnect or stopped (credentials refused) on every connection is what is not ready.
            let up = stats.contains { ["connected", "draining", "idle"].contains($0.state) }
            if !up {
                let states = Dictionary(grouping: stats, by: \.state).map { "\($0.value.count) \($0.key)" }.sorted().joined(separator: ", ")
                let lastError = stats.compactMap(\.lastError).last.map { "; last error: \($0)" } ?? ""
                problems.append("gateway: no \(t.protocolName) connection of \(t.app) is up (\(states)\(lastError))")
            }
        }
        return problems + notReady.current
    }
}
