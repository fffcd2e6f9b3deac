import APNsProtocol
import APNsTransport
import Feedback
import Foundation
import Jobs
import Kafka
import Logging
import NIOCore
import NIOPosix
import Redis
import Sender
import ServiceLifecycle
import Synchronization

/// The assembled pipeline: Kafka → decode → Gate (Redis) → Router/Shards → Settler (Redis, Kafka
/// offsets), with registrations and the feedback poller beside it. Runs as a swift-service-lifecycle
/// `Service`: on graceful shutdown it stops consuming, drains the shards (drain probe), settles what
/// came back, commits offsets and returns.
public final class PipelineRunner: Service, Sendable {
    public let configuration: PipelineConfiguration
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let budget: InFlightBudget
    /// The priority lane's own budget (`pipeline.priority_max_in_flight`); nil without `kafka.priority_topic`.
    private let priorityBudget: InFlightBudget?
    /// The priority lane's publish times, for its latency histogram (nil without the lane).
    private let priorityClock: PriorityClock?
    /// The priority lane's intake (as `intake`): a graceful stop cancels it alone.
    private let priorityIntake = Mutex<Task<Void, Never>?>(nil)
    /// The priority lane's failure, if it ended the process.
    private let priorityFailure = Mutex<(any Error)?>(nil)
    private let inbox = SettlerInbox()
    private let observed = Mutex(Observed())
    private let waitLog = LeaseWaitLog()
    /// Campaign control (cancel, …) as this process last read it from Redis (design §2.10).
    private let controls: CampaignControls
    /// `apps[].max_rate`, by bundle id (empty: no app is paced, and the gate never looks).
    private let appRates: [String: Int]
    /// The stage that takes batches from Kafka (set once `ingest` started it): a graceful stop cancels it
    /// alone, so the batches it already took are still gated and sent (`docs/design.md §1.3`).
    private let intake = Mutex<Task<Void, Never>?>(nil)
    /// Set when the settler gave up on Redis: nothing more is sent, not even by the stop's drain, since
    /// what is sent now could never be recorded (its duplicates would go uncounted).
    private let sendingStopped = Atomic<Bool>(false)
    /// Metrics (nil: off): updated per batch; gauges sampled every `metricsSampleInterval`.
    private let metrics: PipelineMetrics?
    /// Set when `kafka.outcomes_topic` is: the stages then make each settled job's outcome message.
    private let outcomeMessages: OutcomeMessageOptions?
    /// The parts `readiness()` looks at, once `run` built them.
    private let live = Mutex<LiveParts?>(nil)
    private struct LiveParts: Sendable {
        var consumer: KafkaConsumer
        var transports: [any NotificationTransport]
    }
    static let metricsSampleInterval: Duration = .seconds(1)
    /// librdkafka's prefetch queue (`queued.max.messages.kbytes`) unless `kafka.properties` sets it.
    static let prefetchKilobytes = 8 * 1024

    /// What this instance did, for tests and operators.
    public struct Observed: Sendable {
        /// Jobs this instance took from Kafka.
        public var received = 0
        /// The positions it committed when it stopped (partition → next offset to read).
        public var finalCommitPositions: [Int32: Int64] = [:]
    }

    public var observations: Observed { observed.withLock { $0 } }

    public init(configuration: PipelineConfiguration, logger: Logger, metrics: PipelineMetrics? = nil) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        controls = CampaignControls(logger: logger)
        appRates = Dictionary(uniqueKeysWithValues: configuration.apps.compactMap { app in app.maxRate.map { (app.bundleID, $0) } })
        group = MultiThreadedEventLoopGroup(numberOfThreads: configuration.eventLoopThreads)
        budget = InFlightBudget(capacity: configuration.maxInFlight, byteCapacity: configuration.maxInFlightBytes)
        outcomeMessages =
            configuration.kafka.outcomesTopic == nil
            ? nil : OutcomeMessageOptions(http2Apps: Set(configuration.apps.filter { $0.transport == .http2 }.map(\.bundleID)))
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

    /// Most messages per priority batch: what the priority consumer holds is handed out at once, never
    /// waited for to fill a batch, so a batch is as large as what came while the last one was gated.
    static let priorityBatchSize = 256
    static let priorityPollTimeout: Duration = .milliseconds(2)
    /// The priority consumer's group: the jobs group's name and `.priority`.
    static func priorityGroup(_ group: String) -> String { group + ".priority" }

    /// The Kafka position a notification carries through the sender: its partition, offset and lane, which
    /// names its topic (the jobs topic, or the priority topic, design §1.4), so no notification carries
    /// a topic's name.
    static func position(of message: KafkaConsumerMessage, lane: Lane = .bulk) -> SourcePosition {
        SourcePosition(partition: message.partition, offset: message.offset, lane: lane)
    }
    /// The message a position names: in the jobs topic (`topic`), or for the priority lane in `priorityTopic`.
    static func ref(topic: String, priorityTopic: String? = nil, position: SourcePosition) -> MessageRef {
        let topic = position.lane == .priority ? (priorityTopic ?? topic) : topic
        return MessageRef(topic: topic, partition: position.partition, offset: position.offset)
    }

    public func run() async throws {
        let c = configuration
        let bootstrap = try c.kafka.resolvedBootstrapServers()
        var storeConfig = PipelineStoreConfiguration()
        storeConfig.keyPrefix = c.redis.prefix
        storeConfig.dedupRetention = .seconds(c.redis.dedupTTLHours * 3600)
        storeConfig.inFlightLease = .seconds(c.redis.inFlightLeaseSeconds)
        storeConfig.dedupBucketWidth = .seconds(c.redis.dedupBucketHours * 3600)
        storeConfig.dedupSubBuckets = c.redis.dedupSubBuckets
        storeConfig.tokenBuckets = c.redis.tokenBuckets
        storeConfig.ownerHeartbeat = .seconds(c.redis.ownerHeartbeatSeconds)
        // Per-tag key names are cached for the configured apps only (the decoder refuses the others).
        storeConfig.apps = Set(c.apps.map(\.bundleID))
        c.redis.apply(to: &storeConfig)
        // This process's identity as a lease holder (logged, and on its heartbeat key).
        let owner = storeConfig.leaseOwner
        // Two connections: the gate's round trips and the settler's overlap instead of queueing behind
        // each other on one socket.
        // One server (`redis.url`) or a Redis Cluster (`redis.cluster`): the same calls either way.
        let redis = try c.redis.makeConnection(logger: logger, eventLoopGroup: group)
        let settlerRedis = try c.redis.makeConnection(logger: logger, eventLoopGroup: group)
        try await redis.connect()
        try await settlerRedis.connect()
        let store = PipelineStore(client: redis, configuration: storeConfig, logger: logger)
        let settlerStore = PipelineStore(client: settlerRedis, configuration: storeConfig, logger: logger)
        // Before the first gate: this file's dedup layout must find the records Redis holds (a changed
        // bucket width would let every job accepted within the retention through again).
        try await store.verifyDedupLayout()
        // The gate's further connections: one gate call in flight on each (`ingest`).
        var gateRedis: [any RedisConnection] = []
        for _ in 1..<max(1, c.gateCallsInFlight) {
            let connection = try c.redis.makeConnection(logger: logger, eventLoopGroup: group)
            try await connection.connect()
            gateRedis.append(connection)
        }
        let gateStores = [store] + gateRedis.map { PipelineStore(client: $0, configuration: storeConfig, logger: logger) }

        // This producer writes dead letters only: its size limit is the pipeline file's, whatever
        // `kafka.properties` says for the consumers.
        var producerProperties = c.kafka.properties
        producerProperties["message.max.bytes"] = String(c.kafka.deadLetterMaxBytes)
        // How long one dead-letter write may take before it is reported failed and retried (librdkafka
        // retries inside it; its default, 300 s, would hide an unusable DLQ for five minutes).
        producerProperties["message.timeout.ms"] = String(c.kafka.deadLetterTimeoutMs)
        let producer = try KafkaProducer(
            configuration: KafkaProducerConfiguration(bootstrapServers: bootstrap, properties: producerProperties), logger: logger)
        let deadLetter = DeadLetter(producer: producer, topic: c.kafka.deadLetterTopic, maxMessageBytes: c.kafka.deadLetterMaxBytes)
        let deadLetters = DeadLetterWriter(deadLetter: deadLetter, store: store, inbox: inbox, logger: logger, metrics: metrics)
        // The outcomes stream's producer, of its own (its messages are small and many; a dead letter may be
        // large): a write failing this long is reported, logged and retried, as a dead letter's.
        let outcomeStream: OutcomeStream? = try c.kafka.outcomesTopic.flatMap { topic in
            guard let options = self.outcomeMessages else { return nil }
            var properties = c.kafka.properties
            properties["message.timeout.ms"] = String(c.kafka.deadLetterTimeoutMs)
            let producer = try KafkaProducer(
                configuration: KafkaProducerConfiguration(bootstrapServers: bootstrap, properties: properties), logger: logger)
            return OutcomeStream(topic: topic, options: options, producer: producer, logger: logger, metrics: self.metrics)
        }
        var consumerProperties = c.kafka.properties
        if metrics != nil, consumerProperties["statistics.interval.ms"] == nil {
            // librdkafka's statistics carry the consumer lag per partition (a gauge); `properties` may change the period.
            consumerProperties["statistics.interval.ms"] = "5000"
        }
        if consumerProperties["queued.max.messages.kbytes"] == nil {
            // librdkafka prefetches up to this much per consumer beyond what `run` buffers itself; its
            // default (64 MiB, ~100 MiB of resident memory with its per-message overhead) was most of
            // `run`'s peak RSS. 8 MiB is ~16 000 jobs of ~500 bytes ahead of the pipeline, on top of the
            // consumer's own buffer. (Librdkafka 2.0 fetches again up to a second after the queue was
            // full; the consumer nudges it, `FetchNudge`. Even so a 4 MiB queue read ~17 000 jobs/s
            // in a 1M-job `ops/bench e2e` run where 8 MiB read ~100 000.)
            consumerProperties["queued.max.messages.kbytes"] = String(Self.prefetchKilobytes)
        }
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: bootstrap, groupID: c.kafka.group, topics: [c.kafka.jobsTopic], properties: consumerProperties,
                sessionTimeout: .milliseconds(c.kafka.sessionTimeoutMs), maxBatchSize: c.kafka.batchSize,
                // Four batches ahead of ingest, behind librdkafka's own queue: ten cost ~4 MiB more at
                // the peak for no speed (1M-job runs, 2026-11-25).
                maxBufferedMessages: max(c.kafka.batchSize * 4, 4_000)),
            logger: logger)
        // The priority lane (`docs/design.md §1.4`): a consumer of its own, in a group of its own
        // (`<group>.priority`, as registrations have `<group>.registrations`), so a bulk backlog holding
        // the jobs consumer's poll thread (back-pressure, §1.2) never holds the priority topic's messages,
        // nor a rebalance of the priority topic (an eager rebalance waits for every member of a group,
        // and a held poll thread rejoins late). Its own gate connection: its gate calls never queue
        // behind the bulk lane's.
        var priorityLane: PriorityLaneParts?
        if let topic = c.kafka.priorityTopic, let priorityBudget {
            var properties = consumerProperties
            if c.kafka.properties["queued.max.messages.kbytes"] == nil { properties["queued.max.messages.kbytes"] = "1024" }
            // A fetch waits at most this long for data (a real broker answers as soon as a message comes;
            // librdkafka's mock cluster waits it out): the priority consumer asks more often than the
            // jobs consumer's 50 ms.
            if c.kafka.properties["fetch.wait.max.ms"] == nil { properties["fetch.wait.max.ms"] = "5" }
            var consumerConfiguration = KafkaConsumerConfiguration(
                bootstrapServers: bootstrap, groupID: Self.priorityGroup(c.kafka.group), topics: [topic], properties: properties,
                sessionTimeout: .milliseconds(c.kafka.sessionTimeoutMs), maxBatchSize: Self.priorityBatchSize,
                maxBufferedMessages: max(c.priorityMaxInFlight, Self.priorityBatchSize))
            // A message is handed on within ~2 ms of librdkafka having it, never held to fill a batch
            // (the jobs consumer waits up to 100 ms: measured, that was most of a priority job's latency).
            consumerConfiguration.pollTimeout = Self.priorityPollTimeout
            let priorityConsumer = try KafkaConsumer(configuration: consumerConfiguration, logger: logger)
            let connection = try c.redis.makeConnection(logger: logger)
            try await connection.connect()
            let markConnection = try c.redis.makeConnection(logger: logger)
            try await markConnection.connect()
            priorityLane = PriorityLaneParts(
                consumer: priorityConsumer, budget: priorityBudget, topic: topic, redis: connection,
                store: PipelineStore(client: connection, configuration: storeConfig, logger: logger), markRedis: markConnection,
                markStore: PipelineStore(client: markConnection, configuration: storeConfig, logger: logger))
        }

        let inbox = self.inbox
        let jobsTopic = c.kafka.jobsTopic
        let priorityTopic = c.kafka.priorityTopic
        let priorityClock = self.priorityClock
        let metrics = self.metrics
        let outcomeMessages = self.outcomeMessages
        let onOutcomes: OutcomeHandler = { batch in
            metrics?.senderEvents(app: batch.app, batch.events)
            if let priorityClock, let metrics { priorityClock.observeAccepted(batch, metrics: metrics) }
            let share = Self.settlerShare(batch, topic: jobsTopic, priorityTopic: priorityTopic, messages: outcomeMessages)
            inbox.put(share.item)
            // Jobs the gateway refused settle once their dead letters are stored.
            if !share.deadLetters.isEmpty { deadLetters.write(share.deadLetters, settle: share.deadLetterItem) }
        }
        // One factory for the process: its transports of a kind share a connection limiter (the gateway
        // counts connection attempts, whichever app makes them).
        let factory = TransportFactory(group: group, logger: logger)
        let transports = try c.apps.map { app -> any NotificationTransport in
            var configuration = try c.transportConfiguration(for: app)
            configuration.cancellations = controls.cancellations  // checked right before each write (design §2.10)
            return try factory.make(configuration, onOutcomes: onOutcomes)
        }
        let router = Router(transports: transports)
        live.withLock { $0 = LiveParts(consumer: consumer, transports: transports) }
        logger.info(
            "pipeline starting",
            metadata: [
                "bootstrap": "\(bootstrap)", "group": "\(c.kafka.group)", "topic": "\(c.kafka.jobsTopic)",
                "priority_topic": "\(c.kafka.priorityTopic ?? "none")",
                "apps": "\(c.apps.map { "\($0.bundleID) (\($0.transport.rawValue))" }.joined(separator: ", "))", "owner": "\(owner)",
                "redis": "\((try? c.redis.target())?.redactedDescription ?? "?")", "event_loop_threads": "\(c.eventLoopThreads)",
                "outcomes_topic": "\(c.kafka.outcomesTopic ?? "none")",
                // The proxy's URL with its password as ***; the NO_PROXY list as read.
                "http2_proxy":
                    "\(c.http2.proxy.map { "\($0.proxy) (\($0.proxy.source))" + ($0.noProxy.isEmpty ? "" : ", not for \($0.noProxy.joined(separator: ","))") } ?? "none")",
            ])
        KeyFilePermissions.warn(c, logger: logger)

        // The heartbeat lives before the first lease is taken; other processes void this one's leases
        // once it stops beating (a crash), without waiting out the lease.
        try await store.beat(description: Self.ownerDescription)
        let heartbeat = Task { await self.beatHeartbeat(store: settlerStore) }
        // The batches' written marks (one SET per batch, before it reaches the transports) on a connection
        // of their own, so they never wait behind a gate or settle call.
        let markRedis = try c.redis.makeConnection(logger: logger, eventLoopGroup: group)
        try await markRedis.connect()
        let marks = WrittenMarks(store: PipelineStore(client: markRedis, configuration: storeConfig, logger: logger), logger: logger)
        let marking = Task { await marks.run() }
        // Campaign control (design §2.10), on a connection of its own: read once before the first gate (a
        // campaign cancelled before this process started is never sent by it), then every 250 ms.
        let controlRedis = try c.redis.makeConnection(logger: logger)
        try await controlRedis.connect()
        let controlStore = PipelineStore(client: controlRedis, configuration: storeConfig, logger: logger)
        try await controls.poll(store: controlStore)
        let controlling = Task { await self.controls.run(store: controlStore) }
        // Deferred jobs go back to the jobs topic once their campaign may send (design §2.11): on a
        // connection of its own (a release waits for Kafka's delivery), through the dead-letter producer.
        let releaseRedis = try c.redis.makeConnection(logger: logger)
        try await releaseRedis.connect()
        let release = DeferredRelease(
            store: PipelineStore(client: releaseRedis, configuration: storeConfig, logger: logger), producer: producer,
            topic: c.kafka.jobsTopic, controls: controls, logger: logger)
        let releasing = Task { await release.run() }
        // The Kafka clients poll while their `run()` runs (a thread each, design §1.5), until their `close()`
        // at the end of the stop. (Nothing between here and there throws; after a failure before here
        // nothing polls, and a client once released closes itself.)
        let kafkaPolling = Task { [consumer, producer, outcomeStream, lane = priorityLane] in
            await withDiscardingTaskGroup { group in
                for client in [consumer, producer, lane?.consumer, outcomeStream?.producer] as [(any Service)?] {
                    if let client { group.addTask { try? await client.run() } }
                }
            }
        }
        let ingest = Task {
            try await self.ingest(consumer: consumer, gateStores: gateStores, router: router, deadLetters: deadLetters, marks: marks)
        }
        // The priority lane's tasks run at a higher priority than the bulk lane's (its decoding and send
        // tasks inherit it): on a busy machine the cooperative threads take its work before the next
        // bulk batch's decoding or encoding, which would otherwise each hold a thread for milliseconds.
        let priorityIngest = priorityLane.map { lane in
            Task(priority: .high) {
                do {
                    try await self.priorityIngest(lane, router: router, deadLetters: deadLetters, marks: marks)
                } catch is CancellationError {
                } catch {
                    // As a failure of the bulk lane: the process stops (what is unsettled is redelivered).
                    self.logger.error("priority lane stopped; shutting down", metadata: ["error": "\(error)"])
                    self.priorityFailure.withLock { $0 = error }
                    ingest.cancel()
                }
            }
        }
        // If the settler fails (Redis gone for longer than the client waits), nothing settles any more
        // and the in-flight budget never frees: stop taking jobs, and let the process exit non-zero.
        let settler = Task {
            do {
                try await self.settle(store: settlerStore, consumer: consumer, priority: priorityLane, outcomes: outcomeStream)
            } catch {
                self.sendingStopped.store(true, ordering: .relaxed)
                ingest.cancel()
                priorityIngest?.cancel()
                throw error
            }
        }
        let sidecars = Task {
            try await withThrowingDiscardingTaskGroup { tasks in
                if let topic = c.kafka.registrationsTopic {
                    tasks.addTask {
                        try await RegistrationsStage(
                            bootstrap: bootstrap, configuration: c, topic: topic, store: store, deadLetter: deadLetter, logger: self.logger
                        ).run()
                    }
                }
                if c.feedbackIntervalMinutes > 0, c.apps.contains(where: { $0.transport == .binary }) {
                    tasks.addTask { try await self.feedbackSchedule(store: store) }
                }
                tasks.addTask { try await self.publishShardStatus(transports: transports, store: settlerStore) }
                if let metrics {
                    tasks.addTask { try await self.sampleGauges(metrics, transports: transports, consumer: consumer) }
                }
            }
        }

        var failure: (any Error)?
        await withGracefulShutdownHandler {
            do {
                try await ingest.value
            } catch is CancellationError {
            } catch {
                logger.error("ingest stopped; shutting down", metadata: ["error": "\(error)"])
                failure = error
            }
        } onGracefulShutdown: {
            self.logger.info("shutting down: no more jobs taken from Kafka; draining the shards")
            self.live.withLock { $0 = nil }  // readiness: "not running" from here on
            // Only the intake stops: batches already taken are still gated and sent.
            self.intake.withLock { $0 }?.cancel()
            self.priorityIntake.withLock { $0 }?.cancel()
        }
        // The stop is bounded whatever Apple, Redis or Kafka do (`docs/design.md §1.3`): the batches
        // already taken get until `drainTimeout` to be gated and sent, and the transports until the same
        // moment to have their answers; then what is unanswered is left unsettled (Kafka redelivers it).
        let stopDeadline = ContinuousClock.now + c.drainTimeout
        // An outcomes topic still failing then is given up on: those jobs stay unsettled (redelivered).
        outcomeStream?.giveUp(at: stopDeadline)
        self.intake.withLock { $0 }?.cancel()
        if await !Self.finished(ingest, before: stopDeadline) {
            logger.warning(
                "stop: batches taken from Kafka were not all sent before the drain timeout; the rest stay unsettled and are redelivered",
                metadata: ["drain_timeout_s": "\(c.drainTimeout.components.seconds)"])
            ingest.cancel()
        }
        if let priorityIngest {
            self.priorityIntake.withLock { $0 }?.cancel()
            let wrapped: Task<Void, any Error> = Task { await priorityIngest.value }
            if await !Self.finished(wrapped, before: stopDeadline) {
                logger.warning("stop: priority jobs taken were not all sent before the drain timeout; the rest stay unsettled")
                priorityIngest.cancel()
            }
        }
        if let error = priorityFailure.withLock({ $0 }) { failure = failure ?? error }
        // Dead letters still failing are abandoned: their messages stay unsettled, so are redelivered.
        await deadLetters.finish()
        sidecars.cancel()
        if sendingStopped.load(ordering: .relaxed) {
            // The settler gave up on Redis: nothing more is written; the event loops' shutdown below closes
            // every connection, and what they held stays unsettled.
            logger.error("settler stopped: not draining the transports (nothing more is sent)")
        } else {
            // Drain: every shard proves what it sent (probe), every HTTP/2 request is answered, or the
            // deadline passes; outcomes flow to the settler.
            let drained = await router.drainAndClose(before: stopDeadline)
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
        inbox.close()
        do {
            try await settler.value
        } catch {
            logger.error("settler stopped: outcomes not recorded stay unsettled and are redelivered", metadata: ["error": "\(error)"])
            failure = failure ?? error
        }
        _ = try? await sidecars.value
        heartbeat.cancel()
        await heartbeat.value
        marks.finish()
        marking.cancel()
        await marking.value
        controlling.cancel()
        await controlling.value
        releasing.cancel()
        await releasing.value
        // A control change no longer waits for this process.
        try? await controlStore.forgetControlAcknowledgement()
        // Stopped: anything still leased (unsettled after a drain timeout) may be taken over at once.
        do {
            try await settlerStore.endHeartbeat()
        } catch {
            logger.warning("could not remove the heartbeat; it lapses on its own", metadata: ["owner": "\(owner)", "error": "\(error)"])
        }
        let positions = consumer.commitPositions
        observed.withLock { o in
            for (tp, offset) in positions where tp.topic == c.kafka.jobsTopic { o.finalCommitPositions[tp.partition] = offset }
        }
        await consumer.close()  // commits the settled positions
        if let lane = priorityLane {
            await lane.consumer.close()
            await lane.redis.close()
            await lane.markRedis.close()
            if let error = lane.consumer.finalCommitError {
                logger.error(
                    "final Kafka commit of the priority topic failed: settled messages will be consumed again by the next process",
                    metadata: ["error": "\(error.message)"])
                failure = failure ?? error
            }
        }
        if let error = consumer.finalCommitError {
            // Nothing is lost (the messages come again, and dedup keeps accepted ones from being sent
            // twice), but a clean exit would hide that Kafka was unreachable: exit non-zero.
            logger.error(
                "final Kafka commit failed: settled messages will be consumed again by the next process",
                metadata: ["error": "\(error.message)"])
            failure = failure ?? error
        }
        await producer.close()
        await outcomeStream?.close()
        await kafkaPolling.value  // every Kafka client's `run()` returned: their poll threads ended
        await redis.close()
        await settlerRedis.close()
        await markRedis.close()
        await controlRedis.close()
        await releaseRedis.close()
        for connection in gateRedis { await connection.close() }
        try? await group.shutdownGracefully()
        if let failure { throw failure }
        logger.info("pipeline stopped")
    }

    /// Whether `task` ended before `deadline`; it is not cancelled here, and not waited for after it.
    static func finished(_ task: Task<Void, any Error>, before deadline: ContinuousClock.Instant) async -> Bool {
        let once = OnceFlag()
        return await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let resume = { @Sendable (value: Bool) in
                if once.claim() { c.resume(returning: value) }
            }
            Task {
                _ = try? await task.value
                resume(true)
            }
            Task {
                try? await Task.sleep(until: deadline)
                resume(false)
            }
        }
    }

    // MARK: ingest

    /// A batch from Kafka, decoded: valid jobs, and the refused messages with their reason and outcome
    /// (a job that failed to decode has no id, app or token to count it under).
    struct DecodedBatch: Sendable {
        var messages: [KafkaConsumerMessage]
        /// The valid jobs, in order, and the index of each one's message in `messages` (a job and its
        /// message are not copied from stage to stage as a pair: a `Job` is one reference).
        var jobs: [Job]
        var jobMessages: [Int]
        var deadLetters: [(message: KafkaConsumerMessage, reason: String, outcome: Redis.Outcome)]
        /// The outcomes stream's messages of `deadLetters` (`kafka.outcomes_topic`; empty without it).
        var deadLetterMessages: [OutcomeMessage] = []
        /// Jobs gated again because another copy was in flight: not counted as received a second time.
        var isRetry = false
    }

    /// How long a job whose id is in flight elsewhere waits before it is gated again.
    static let inFlightRetryDelay: Duration = .milliseconds(500)

    /// Two stages joined by a hand-off of two batches: Kafka + decoding, then gate + send. Decoding the
    /// next batch (CPU here) overlaps the gate's round trip for this one (CPU in Redis).
    private func ingest(
        consumer: KafkaConsumer, gateStores: [PipelineStore], router: Router, deadLetters: DeadLetterWriter, marks: WrittenMarks
    ) async throws {
        let handoff = BatchHandoff<DecodedBatch>(capacity: 2)
        // Apple's limits differ by transport and push type: the decoder lets the largest through, and
        // each job is held to its own app's limit when its payload is encoded (gateAndSend).
        // Jobs for apps the pipeline file does not name are refused here, before the gate: an app name
        // from a message never becomes a Redis key, a cached key table or a metric label (issue 28).
        let decoder = JobDecoder(payloadLimit: configuration.largestPayloadLimit, apps: KnownApps(configuration.apps.map(\.bundleID)))
        let decoding = Task {
            defer { handoff.finish() }
            if Task.isCancelled { return }
            // A campaign's jobs share their payload and alerts: read once, encoded once per variant.
            let templates = JobTemplates()
            while !Task.isCancelled {
                guard let batch = await consumer.nextBatch(), !batch.isEmpty else {
                    if Task.isCancelled { break }
                    continue
                }
                // Cancelled while waiting (stopping): the batch is left unsettled, so Kafka redelivers it.
                guard await budget.acquire(batch: batch) else { break }
                observed.withLock { $0.received += batch.count }
                metrics?.kafkaBatch(batch)
                await handoff.put(decode(batch, decoder: decoder, templates: templates))
            }
        }
        intake.withLock { $0 = decoding }
        // The gate runs ahead of the send stage, with up to `gateStores.count` gate calls in flight at
        // once, each on a connection of its own (so one call's large reply never waits behind another's): Redis
        // decides on the next batches while this process encodes and hands the current one to the shards.
        // Batches are sent in the order they were decoded, whatever order their gate calls finish in, so
        // one token's jobs keep their order. Two copies of one job id in batches gated at once are safe:
        // Redis runs the two scripts one after the other, each call's leases carry its own call id, so
        // the second finds the first's lease and answers "in flight" (GateOverlapTests).
        let gated = BatchHandoff<PendingGate>(capacity: gateStores.count)
        let gateSlots = InFlightBudget(capacity: gateStores.count)
        let gating = Task {
            defer { gated.finish() }
            var turn = 0
            while let d = await handoff.next() {
                // The send stage failed while this waited: issue no more calls.
                guard await gateSlots.acquire(1) else { break }
                if Task.isCancelled {
                    gateSlots.release(1)
                    break
                }
                let gateStore = gateStores[turn % gateStores.count]
                turn &+= 1
                let callID = PipelineStore.newBatchID()
                let call = Task {
                    defer { gateSlots.release(1) }
                    return try await self.gate(d, call: callID, store: gateStore)
                }
                await gated.put(PendingGate(decoded: d, call: callID, decisions: call))
            }
        }
        // Stopping: the decoding stage ends at cancellation; batches it already took are still gated
        // and sent.
        do {
            try await withTaskCancellationHandler {
                while let pending = await gated.next() {
                    // The settler gave up: what is sent now could never be settled.
                    if sendingStopped.load(ordering: .relaxed) { break }
                    let g = GatedBatch(decoded: pending.decoded, call: pending.call, decisions: try await pending.decisions.value)
                    try await send(g, lane: .bulk, router: router, deadLetters: deadLetters, handoff: handoff, marks: marks)
                }
            } onCancel: {
                decoding.cancel()
            }
        } catch {
            // The send stage failed: stop the stages before it (what they hold stays unsettled, so
            // Kafka redelivers it).
            decoding.cancel()
            gating.cancel()
            handoff.finish()
            gated.finish()
            // Gate calls already issued end on their own (their leases lapse unsettled, as after a crash).
            while let pending = await gated.next() { pending.decisions.cancel() }
            throw error
        }
        // A gate call's failure (Redis gone longer than the client waits) ended the send stage above
        // with its error; here everything was gated and sent.
        await gating.value
    }

    /// Decodes a batch from Kafka: its valid jobs, and its refused messages with their reasons.
    private func decode(_ batch: [KafkaConsumerMessage], decoder: JobDecoder, templates: JobTemplates) -> DecodedBatch {
        let now = UInt32(Date().timeIntervalSince1970)
        var d = DecodedBatch(messages: batch, jobs: [], jobMessages: [], deadLetters: [])
        d.jobs.reserveCapacity(batch.count)
        d.jobMessages.reserveCapacity(batch.count)
        for index in batch.indices {
            do throws(JobError) {
                let job = try batch[index].value.withUnsafeBytes { raw in
                    Result { () throws(JobError) in try decoder.decode(raw, now: now, templates: templates) }
                }.get()
                d.jobs.append(job)
                d.jobMessages.append(index)
            } catch {
                let m = batch[index]
                // A job valid but for its app keeps its id and campaign: counted in the campaign's
                // progress, as when the router refused it. Its app is no label or key (issue 28).
                d.deadLetters.append(
                    (
                        m, error.reason.rawValue,
                        Redis.Outcome(jobID: error.jobID ?? "", app: "", tokenHex: "", campaign: error.campaign, kind: .deadLettered)
                    ))
                if outcomeMessages != nil {
                    // No valid job: its id and campaign when it was valid but for its app, else nothing.
                    d.deadLetterMessages.append(
                        OutcomeMessage(id: error.jobID, campaign: error.campaign, outcome: .deadLettered, reason: error.reason.rawValue))
                }
                logger.debug(
                    "job refused", metadata: ["reason": "\(error.reason.rawValue)", "detail": "\(error.detail)", "offset": "\(m.ref)"])
            }
        }
        return d
    }

    // MARK: the priority lane

    /// What the priority lane runs on (`docs/design.md §1.4`).
    struct PriorityLaneParts: Sendable {
        var consumer: KafkaConsumer
        var budget: InFlightBudget
        var topic: String
        var redis: any RedisConnection
        var store: PipelineStore
        /// The lane's "written" marks, set while its batches are gated.
        var markRedis: any RedisConnection
        var markStore: PipelineStore
    }

    /// The dead-letter reason of a campaign's job published to the priority topic: campaigns stay in
    /// the bulk lane, so a campaign published to the wrong topic never takes the lane from urgent jobs.
    static let campaignOnPriorityTopic = "campaign-on-priority-topic"

    /// The priority lane: its consumer's batches (whatever came since the last one: never waited for to
    /// fill), its own budget, one gate call at a time on its own connection, then the transports' priority
    /// queues. Settles through the same settler as the bulk lane.
    private func priorityIngest(
        _ lane: PriorityLaneParts, router: Router, deadLetters: DeadLetterWriter, marks: WrittenMarks
    ) async throws {
        let handoff = BatchHandoff<DecodedBatch>(capacity: 2)
        let decoder = JobDecoder(payloadLimit: configuration.largestPayloadLimit, apps: KnownApps(configuration.apps.map(\.bundleID)))
        let clock = priorityClock
        let decoding = Task {
            defer { handoff.finish() }
            if Task.isCancelled { return }
            let templates = JobTemplates()
            while !Task.isCancelled {
                guard let batch = await lane.consumer.nextBatch(), !batch.isEmpty else {
                    if Task.isCancelled { break }
                    continue
                }
                guard await lane.budget.acquire(batch: batch) else { break }
                observed.withLock { $0.received += batch.count }
                metrics?.priorityBatch(batch.count)
                clock?.note(batch)
                if logger.logLevel <= .debug, let t = batch.first?.timestampMilliseconds {
                    logger.debug(
                        "priority batch taken",
                        metadata: ["count": "\(batch.count)", "publish_to_taken_ms": "\(Int64(Date().timeIntervalSince1970 * 1000) - t)"])
                }
                var d = decode(batch, decoder: decoder, templates: templates)
                if d.jobs.contains(where: { $0.campaign != nil }) {
                    var jobs: [Job] = []
                    var jobMessages: [Int] = []
                    for (job, m) in zip(d.jobs, d.jobMessages) {
                        if let campaign = job.campaign {
                            d.deadLetters.append(
                                (
                                    batch[m], Self.campaignOnPriorityTopic,
                                    Redis.Outcome(
                                        jobID: job.id, app: job.app, tokenHex: job.recipientKey, campaign: campaign, kind: .deadLettered,
                                        isBroadcast: job.channel != nil)
                                ))
                        } else {
                            jobs.append(job)
                            jobMessages.append(m)
                        }
                    }
                    d.jobs = jobs
                    d.jobMessages = jobMessages
                    logger.warning(
                        "campaign jobs on the priority topic are dead-lettered: publish campaigns to the jobs topic",
                        metadata: ["topic": "\(lane.topic)", "reason": "\(Self.campaignOnPriorityTopic)"])
                }
                await handoff.put(d)
            }
        }
        priorityIntake.withLock { $0 = decoding }
        do {
            try await withTaskCancellationHandler {
                while let d = await handoff.next() {
                    if sendingStopped.load(ordering: .relaxed) { break }
                    let call = PipelineStore.newBatchID()
                    let gateStart = ContinuousClock.now
                    // The batch's "written" mark is set while it is gated, on a connection of its own (design
                    // §1.4): one Redis wait instead of two before a priority job can be written.
                    async let marked: Void = lane.markStore.markWritten(call: call)
                    let decisions = try await gate(d, call: call, store: lane.store)
                    try await marked
                    if logger.logLevel <= .debug {
                        logger.debug(
                            "priority batch gated",
                            metadata: ["count": "\(d.jobs.count)", "gate_ms": "\((ContinuousClock.now - gateStart).milliseconds)"])
                    }
                    try await send(
                        GatedBatch(decoded: d, call: call, decisions: decisions), lane: .priority, marked: true, router: router,
                        deadLetters: deadLetters,
                        handoff: handoff, marks: marks)
                    if logger.logLevel <= .debug, let t = d.messages.first?.timestampMilliseconds {
                        logger.debug(
                            "priority batch handed to the transports",
                            metadata: [
                                "count": "\(d.jobs.count)", "publish_to_handoff_ms": "\(Int64(Date().timeIntervalSince1970 * 1000) - t)",
                            ])
                    }
                }
            } onCancel: {
                decoding.cancel()
            }
        } catch {
            decoding.cancel()
            handoff.finish()
            throw error
        }
        await decoding.value
    }

    /// A decoded batch whose gate call is under way.
    struct PendingGate: Sendable {
        var decoded: DecodedBatch
        /// The gate call's id: its leases name it, and so does its batch's written mark.
        var call: String
        var decisions: Task<[GateDecision], any Error>
    }

    /// A decoded batch and the gate's decision for each of its jobs, in order.
    struct GatedBatch: Sendable {
        var decoded: DecodedBatch
        var call: String
        var decisions: [GateDecision]
    }

    /// The gate: one Redis round trip for the whole batch.
    private func gate(_ d: DecodedBatch, call: String, store: PipelineStore) async throws -> [GateDecision] {
        if d.jobs.isEmpty { return [] }
        // Campaign control (design §2.10): one atomic load per batch while no campaign has any.
        var decided: [Int: GateDecision] = [:]
        // Jobs of a cancelled campaign: gated like the others, so that one accepted before the cancel
        // settles `deduped` (a redelivery after a rebalance), not `cancelled` as well; the others are not
        // sent (design §2.10).
        var cancelled = Set<Int>()
        let snapshot = controls.snapshot
        if snapshot != nil || !appRates.isEmpty {
            let control = snapshot ?? [:]
            // Jobs of a paused, scheduled or paced campaign are held in Redis (one call for the batch) and
            // settle `deferred`: no lease, no place in the in-flight budget, no partition held up (design
            // §2.11–§2.13). A paced campaign's jobs whose slot is due now are admitted.
            let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
            var deferrals: [Deferral] = []
            var deferralOf: [String: Int] = [:]
            var indices: [[Int]] = []
            for (index, job) in d.jobs.enumerated() {
                let state = job.campaign.flatMap { control[$0] }
                if state?.cancelled == true {
                    cancelled.insert(index)
                    continue
                }
                let appRate = appRates.isEmpty ? nil : appRates[job.app]
                guard state != nil || appRate != nil else { continue }
                let message = d.messages[d.jobMessages[index]]
                // Where it is held (a campaign, or `@app:<bundle id>` for an app's max_rate) and how.
                let held: (name: String, mode: Deferral.Mode)
                if let state, let campaign = job.campaign, state.paused {
                    held = (campaign, .hold(dueMs: nowMs))
                } else if DeferredRelease.holdsSlot(message) {
                    continue  // released at its pacing slot: admitted without taking another
                } else if let state, let campaign = job.campaign, let rate = state.rate {
                    held = (campaign, .pace(rate: rate, notBeforeMs: state.startAtMs ?? 0))
                } else if let state, let campaign = job.campaign, let at = state.startAtMs, at > nowMs {
                    held = (campaign, .hold(dueMs: at))
                } else if let appRate {
                    // The app's max_rate, for jobs whose campaign sets no pace of its own.
                    held = (DeferredRelease.appDeferral(job.app), .pace(rate: appRate, notBeforeMs: 0))
                } else {
                    continue
                }
                let key = "\(held.name)\u{0}\(held.mode)"
                let k: Int
                if let known = deferralOf[key] {
                    k = known
                } else {
                    k = deferrals.count
                    deferralOf[key] = k
                    deferrals.append(Deferral(campaign: held.name, mode: held.mode, messages: []))
                    indices.append([])
                }
                deferrals[k].messages.append(DeferredMessage.member(key: message.key, value: message.value))
                indices[k].append(index)
            }
            if !deferrals.isEmpty {
                let admitted = try await store.deferJobs(deferrals, nowMs: nowMs)
                for (k, jobs) in indices.enumerated() {
                    for (position, index) in jobs.enumerated() where !admitted[k][position] { decided[index] = .deferred }
                }
            }
        }
        var requests: [GateRequest] = []
        requests.reserveCapacity(d.jobs.count - decided.count)
        for (index, job) in d.jobs.enumerated() where decided.isEmpty || decided[index] == nil {
            if let channel = job.channel {
                requests.append(GateRequest(jobID: job.id, app: job.app, channelID: channel.value))
            } else {
                requests.append(GateRequest(jobID: job.id, app: job.app, tokenHex: job.tokenHex))
            }
        }
        var decisions: [GateDecision]
        if decided.isEmpty {
            decisions = try await store.gate(requests, call: call)
        } else {
            // Jobs decided here take no lease and are not in the gate call; the others keep their order.
            var gated = try await store.gate(requests, call: call).makeIterator()
            decisions = d.jobs.indices.map { decided[$0] ?? gated.next()! }
        }
        for index in cancelled {
            switch decisions[index] {
            case .admitted, .takenOver: decisions[index] = .cancelled
            default: break  // deduped (accepted before the cancel), suppressed, or in flight (gated again)
            }
        }
        return decisions
    }

    /// `marked`: the batch's "written" mark is set already (the priority lane sets it while the batch is
    /// gated); else it is set as `WrittenMarks` decides.
    private func send(
        _ g: GatedBatch, lane: Lane, marked: Bool = false, router: Router, deadLetters: DeadLetterWriter,
        handoff: BatchHandoff<DecodedBatch>, marks: WrittenMarks
    ) async throws {
        let c = configuration
        let d = g.decoded
        let decisions = g.decisions
        let apps = Dictionary(uniqueKeysWithValues: c.apps.map { ($0.bundleID, $0) })
        let batch = d.messages
        let jobs = d.jobs
        var refused = d.deadLetters
        var refusedMessages = d.deadLetterMessages
        // Leave to write this batch: its gate call's "written" mark (below).
        let clearance = marks.clearance(call: g.call)
        // The gate's decisions, mapped without I/O: what settles now, what is sent, what is gated again.
        let verdicts = GateVerdicts(
            decisions: decisions, jobs: jobs, isRetry: d.isRetry, received: batch.count, outcomeMessages: outcomeMessages != nil
        ) {
            batch[d.jobMessages[$0]].ref
        }
        for wait in verdicts.waits { waitLog.note(jobID: wait.jobID, holder: wait.holder, logger: logger) }
        var notifications: [PushNotification] = []
        notifications.reserveCapacity(verdicts.admitted.count)
        // The encoder is made once per run of jobs of one app and push type.
        var encoderFor: (app: String, pushType: APNsPushType?, encoder: PayloadEncoder)?
        // Priority-10 Live Activity pushes per app, counted for the metrics (they draw on a budget).
        var liveActivity10: [String: Int] = [:]
        // Broadcasts handed to each app's transport, counted apart from device pushes for the metrics.
        var broadcasts: [String: Int] = [:]
        let jobIDKey = c.gateway.embedJobID ? "jid" : nil
        // An HTTP/2 notification carries its job's token hex to its outcome (its settle needs it, and
        // answers come within milliseconds). A binary shard holds its notifications for the settle delay
        // (~25 000 at 100k jobs/s): there the hex would be ~100 bytes more per notification, more memory
        // than making it again at the settle costs in CPU. Looked up once per run of jobs of one app.
        var keepsHexFor: (app: String, keeps: Bool)?
        // Whether a notification goes to a binary app: its batch is then marked written before the hand-off.
        var hasBinaryApp = false
        func keepsTokenHex(_ app: String) -> Bool {
            if let known = keepsHexFor, known.app == app { return known.keeps }
            let keeps = apps[app]?.transport != .binary
            keepsHexFor = (app, keeps)
            if !keeps { hasBinaryApp = true }
            return keeps
        }
        for admitted in verdicts.admitted {
            let job = jobs[admitted.index]
            // An index, not a copy of the message (a copy per job was a retain and release of its bytes).
            let m = d.jobMessages[admitted.index]
            do {
                let app = job.app
                let pushType = job.pushType
                let channel = job.channel
                if channel != nil, let config = apps[app] {
                    try config.checkCanBroadcast()
                } else if let pushType, pushType.requiresTokenAuthentication, let config = apps[app] {
                    try config.checkCanSend(pushType)
                }
                // One branch for a 32-byte token (every token seen so far): only another size looks up the app.
                if !job.token.fitsBinaryInterface, let config = apps[app] { try config.checkCanSend(tokenOf: job.token) }
                let encoder: PayloadEncoder
                if let e = encoderFor, e.app == app, e.pushType == pushType {
                    encoder = e.encoder
                } else {
                    encoder = PayloadEncoder(
                        limit: c.payloadLimit(app: apps[app], pushType: pushType), truncatesAlertBody: c.gateway.truncateAlert)
                    encoderFor = (app, pushType, encoder)
                }
                let payload = try job.encodedPayload(language: admitted.language, encoder: encoder, jobIDKey: jobIDKey)
                let position = SourcePosition(partition: batch[m].partition, offset: batch[m].offset, lane: lane)
                if let channel {
                    notifications.append(
                        PushNotification(
                            jobID: job.id, app: app, recipient: .channel(channel), payload: payload, expiry: job.expiry,
                            priority: job.priority, campaign: job.campaign, collapseID: job.collapseID, pushType: pushType,
                            position: position, clearance: clearance))
                    broadcasts[app, default: 0] += 1
                } else {
                    notifications.append(
                        PushNotification(
                            jobID: job.id, app: app, token: job.token, tokenHex: keepsTokenHex(app) ? job.tokenHex : nil,
                            payload: payload, expiry: job.expiry, priority: job.priority, campaign: job.campaign,
                            collapseID: job.collapseID, pushType: pushType, position: position, clearance: clearance))
                }
                if pushType == .liveactivity && job.priority == .immediate { liveActivity10[app, default: 0] += 1 }
            } catch {
                // e.g. the localized alert makes the payload too large.
                refused.append(
                    (
                        batch[m], error.reason.rawValue,
                        Redis.Outcome(
                            jobID: job.id, app: job.app, tokenHex: job.recipientKey, campaign: job.campaign, kind: .deadLettered,
                            isBroadcast: job.channel != nil)
                    ))
                if outcomeMessages != nil {
                    refusedMessages.append(OutcomeMessage(job: job, outcome: .deadLettered, reason: error.reason.rawValue))
                }
            }
        }
        var settled = verdicts.settled
        if settled.events.resentAfterCrash > 0 {
            // Jobs taken over from a dead process: counted in Redis before any of them can be written again.
            var events = PipelineEvents()
            events.resentAfterCrash = settled.events.resentAfterCrash
            events.ambiguous = settled.events.ambiguous
            var perCampaign: [String: PipelineEvents] = [:]
            for (campaign, e) in settled.campaignEvents where e.resentAfterCrash != 0 || e.ambiguous != 0 {
                perCampaign[campaign] = PipelineEvents(ambiguous: e.ambiguous, resentAfterCrash: e.resentAfterCrash)
                settled.campaignEvents[campaign]?.resentAfterCrash = 0
                settled.campaignEvents[campaign]?.ambiguous = 0
            }
            try await marks.recordTakeOvers(call: g.call, events: events, campaignEvents: perCampaign)
            metrics?.takenOver(events.resentAfterCrash)
            settled.events.resentAfterCrash = 0
            settled.events.ambiguous = 0
        }
        inbox.put(settled)
        for (app, count) in liveActivity10 { metrics?.liveActivityPriority10(app: app, count: count) }
        for (app, count) in broadcasts { metrics?.broadcastsSent(app: app, count: count) }
        // Dead letters are delivered to the DLQ (delivery checked) before their offsets may settle; a
        // write that fails is retried in the background while the valid jobs go on.
        if !refused.isEmpty {
            var settled = SettlerInbox.Item()
            for d in refused {
                settled.outcomes.append(d.outcome)
                settled.refs.append(d.message.ref)
            }
            settled.messages = refusedMessages
            deadLetters.write(refused.map { ($0.message, $0.reason) }, settle: settled)
        }
        if !verdicts.regate.isEmpty {
            let inFlight = verdicts.regate
            let retry = DecodedBatch(
                messages: inFlight.map { batch[d.jobMessages[$0]] }, jobs: inFlight.map { jobs[$0] }, jobMessages: Array(inFlight.indices),
                deadLetters: [], isRetry: true)
            Task {
                try? await Task.sleep(for: Self.inFlightRetryDelay)
                await handoff.put(retry)
            }
        }
        if !notifications.isEmpty {
            // Before any of it is written, its gate call is marked "written": if this process dies, whoever
            // takes its leases over counts these jobs `ambiguous` (they may reach a device twice), and only
            // these (issue 28). HTTP/2 connections ask for the mark when the batch nears the front of their
            // queue (up to `connections × queue_capacity` wait there); a binary shard writes what it is
            // given at once, so a batch with binary apps is marked before the hand-off.
            if marked {
                // The priority lane's mark: a priority request at the head of a connection's queue would
                // otherwise wait for it behind the bulk batches' marks (one connection asks them in turn).
                clearance.grant()
            } else if hasBinaryApp {
                try await marks.markNow(call: g.call, clearance: clearance)
            }
            let orphans = try await router.send(notifications)
            if !orphans.isEmpty {
                // Validated jobs for an app with no certificate here: dead letters, with the reason.
                var orphanItem = SettlerInbox.Item()
                let byPosition = Dictionary(uniqueKeysWithValues: batch.map { (Self.position(of: $0, lane: lane), $0) })
                for n in orphans {
                    orphanItem.outcomes.append(
                        Redis.Outcome(
                            jobID: n.jobID, app: n.app, tokenHex: n.recipientKey, campaign: n.campaign, kind: .deadLettered,
                            isBroadcast: n.channel != nil))
                    if let position = n.position {
                        orphanItem.refs.append(Self.ref(topic: c.kafka.jobsTopic, priorityTopic: c.kafka.priorityTopic, position: position))
                    }
                    if outcomeMessages != nil {
                        orphanItem.messages.append(
                            OutcomeMessage(notification: n, outcome: .deadLettered, reason: "no-certificate-for-app"))
                    }
                }
                logger.error("jobs for apps without a certificate are dead-lettered", metadata: ["count": "\(orphans.count)"])
                deadLetters.write(
                    orphans.compactMap { n in n.position.flatMap { byPosition[$0] }.map { ($0, "no-certificate-for-app") } },
                    settle: orphanItem)
            }
        }
    }

    /// What the settler makes of a transport's outcome batch: `item` settles now; the jobs a gateway
    /// refused for good (bad request, or a transient failure past its attempts) are dead-lettered first,
    /// as the job that was sent, and `deadLetterItem` settles them once their letters are stored.
    struct SettlerShare {
        var item = SettlerInbox.Item()
        var deadLetters: [DeadLetterWriter.Letter] = []
        var deadLetterItem = SettlerInbox.Item()
    }

    /// Dead-letter reasons (the DLQ's `reason` header) of jobs a gateway refused; the gateway's own
    /// reason is in the `gateway-reason` header.
    enum GatewayRefusal {
        static let badRequest = "gateway-bad-request"
        static let transient = "gateway-gave-up"
        static let header = "gateway-reason"

        /// The dead-letter reason of a job the gateway refused for good.
        static func reason(_ rejection: Rejection) -> String {
            if case .badRequest = rejection { badRequest } else { transient }
        }
    }

    /// `messages`: also make each outcome's message for the outcomes stream (`kafka.outcomes_topic` is set).
    static func settlerShare(
        _ batch: OutcomeBatch, topic: String, priorityTopic: String? = nil, messages: OutcomeMessageOptions? = nil
    ) -> SettlerShare {
        var share = SettlerShare()
        share.item = settlerItem(batch, topic: topic, priorityTopic: priorityTopic, keepingDeadLetters: false, messages: messages)
        for o in batch.outcomes {
            guard let rejection = o.rejection, o.kind == .deadLettered, let position = o.notification.position else { continue }
            let reason = GatewayRefusal.reason(rejection)
            let message = KafkaConsumerMessage(
                topic: position.lane == .priority ? (priorityTopic ?? topic) : topic, partition: position.partition,
                offset: position.offset, key: Array(o.notification.recipientKey.utf8),
                value: sentJob(o.notification), headers: [KafkaHeader(key: GatewayRefusal.header, string: rejection.reason)])
            share.deadLetters.append((message, reason))
            share.deadLetterItem.outcomes.append(redisOutcome(o))
            share.deadLetterItem.refs.append(ref(topic: topic, priorityTopic: priorityTopic, position: position))
            if let messages {
                share.deadLetterItem.messages.append(
                    OutcomeMessage(o, kind: .deadLettered, reason: reason, http2: messages.http2Apps.contains(batch.app)))
            }
        }
        return share
    }

    /// The job as it was sent, in the jobs topic's format: its payload is the one the gateway refused
    /// (localized, and with `jid` in dev setups), so an operator can read it or publish it again.
    static func sentJob(_ n: PushNotification) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(n.payload.count + 256)
        func key(_ name: String) {
            out.append(out.isEmpty ? UInt8(ascii: "{") : UInt8(ascii: ","))
            JSONWriter.writeString(name, into: &out)
            out.append(UInt8(ascii: ":"))
        }
        key("id")
        JSONWriter.writeString(n.jobID, into: &out)
        key("app")
        JSONWriter.writeString(n.app, into: &out)
        if let channel = n.channel {
            key("channel")
            JSONWriter.writeString(channel.value, into: &out)
        } else {
            key("token")
            JSONWriter.writeString(n.tokenHex, into: &out)
        }
        key("payload")
        out.append(contentsOf: n.payload)
        key("expiry")
        out.append(contentsOf: Array(String(n.expiry).utf8))
        key("priority")
        out.append(contentsOf: Array(String(n.priority.rawValue).utf8))
        if let campaign = n.campaign {
            key("campaign")
            JSONWriter.writeString(campaign, into: &out)
        }
        if let collapseID = n.collapseID {
            key("collapse_id")
            JSONWriter.writeString(collapseID, into: &out)
        }
        if let pushType = n.pushType {
            key("push_type")
            JSONWriter.writeString(pushType.rawValue, into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func redisOutcome(_ o: Sender.Outcome) -> Redis.Outcome {
        // The settler acts on what a rejection means, never on a protocol's status number.
        var suppression: TokenSuppression?
        // A broadcast never suppresses anything (a channel is no token; `Outcome` already turns such an
        // answer into a dead letter): checked here too, so no path can write a channel id as a token.
        if o.notification.channel == nil, case .rejected(.invalidToken(let since, let reason)) = o.delivery {
            suppression = TokenSuppression(since: since, reason: reason)
        }
        let kind: Redis.OutcomeKind =
            switch o.kind {
            case .accepted: .accepted
            case .rejected: .rejected
            case .deadLettered: .deadLettered
            case .cancelled: .cancelled
            case .deferred: .deferred
            }
        // The id's fingerprint from its bytes (a campaign job's id is never made as a String) and the
        // token's hash from its hex written into a buffer: its hex as a String (which a binary
        // notification does not keep) only when a suppression writes it.
        let n = o.notification
        let fingerprint = n.withJobIDBytes { JobFingerprint(jobIDBytes: $0) }
        let tokenHash: UInt32
        if let channel = n.channel {
            // The bucket the gate leased it in (`GateRequest(jobID:app:channelID:)`).
            tokenHash = RedisKeys.tokenHash(hex: channel.value)
        } else {
            tokenHash = withUnsafeTemporaryAllocation(byteCount: n.token.hexCount, alignment: 1) { hex in
                n.token.writeHex(into: hex)
                return RedisKeys.tokenHash(hexBytes: UnsafeRawBufferPointer(hex))
            }
        }
        var outcome = Redis.Outcome(
            fingerprint: fingerprint, app: o.app, tokenHash: tokenHash, tokenHex: suppression == nil ? nil : n.tokenHex,
            campaign: n.campaign, kind: kind, code: o.code, suppressToken: suppression, shard: o.connection)
        outcome.isBroadcast = n.channel != nil
        return outcome
    }

    /// The outcomes of `batch` as the settler records them, with the batch's events. Without
    /// `keepingDeadLetters`, dead-lettered outcomes that carry a Kafka position are left out (they settle
    /// through `settlerShare`'s dead letters).
    /// With `messages`, each outcome's message for the outcomes stream too.
    static func settlerItem(
        _ batch: OutcomeBatch, topic: String, priorityTopic: String? = nil, keepingDeadLetters: Bool = true,
        messages: OutcomeMessageOptions? = nil
    ) -> SettlerInbox.Item {
        var item = SettlerInbox.Item()
        item.outcomes.reserveCapacity(batch.outcomes.count)
        for o in batch.outcomes {
            // The transport's ambiguous resends of this notification, now that it has settled, counted
            // for its campaign (the totals already have them, from `batch.events.ambiguous`). Before the
            // dead-letter skip: those resends happened whichever way the outcome settles.
            if o.ambiguousResends > 0, let campaign = o.notification.campaign {
                item.campaignEvents[campaign, default: PipelineEvents()].ambiguous += Int(o.ambiguousResends)
            }
            if !keepingDeadLetters, o.kind == .deadLettered, o.notification.position != nil { continue }
            if o.kind == .deferred, let campaign = o.notification.campaign {
                // Held back by its transport (its campaign paused): kept in Redis as the job that would have
                // been sent, published again on resume (design §2.11).
                let n = o.notification
                item.deferred.append(
                    Deferral(
                        campaign: campaign, mode: .hold(dueMs: Int64(Date().timeIntervalSince1970 * 1000)),
                        messages: [DeferredMessage.member(key: Array(n.recipientKey.utf8), value: sentJob(n))]))
            }
            let outcome = redisOutcome(o)
            item.outcomes.append(outcome)
            if let position = o.notification.position {
                item.refs.append(ref(topic: topic, priorityTopic: priorityTopic, position: position))
            }
            // A job held back (its campaign paused) is not done: its message comes when it settles after
            // the release.
            if let messages, outcome.kind != .deferred {
                let reason = o.kind == .deadLettered ? o.rejection.map(GatewayRefusal.reason) : nil
                item.messages.append(OutcomeMessage(o, kind: outcome.kind, reason: reason, http2: messages.http2Apps.contains(batch.app)))
            }
        }
        item.events.replayed = batch.events.replayed
        item.events.ambiguous = batch.events.ambiguous
        item.events.retried = batch.events.retried
        item.events.reconnects = batch.events.reconnects
        item.events.lostAfterSettle = batch.events.lostAfterSettle
        item.events.refusedAfterSettle = batch.events.refusedAfterSettle
        item.events.gaveUp = batch.events.gaveUp
        if !batch.events.retriedBy.isEmpty {
            for reason in RetryReason.allCases where batch.events.retriedBy[reason] > 0 {
                item.events.retriedBy[reason.label] = batch.events.retriedBy[reason]
            }
        }
        if batch.events.replayed > 0 {
            item.shardEvents.append(ShardEvents(app: batch.app, shard: batch.connection, replayed: batch.events.replayed))
        }
        return item
    }

    // MARK: settling

    /// One Redis round trip per gathered batch, then the Kafka offsets, then the in-flight budget. With
    /// the outcomes stream, the batch's outcome messages are delivered first (one wait for all of them):
    /// nothing is recorded or committed before its message is in the outcomes topic.
    private func settle(
        store: PipelineStore, consumer: KafkaConsumer, priority: PriorityLaneParts?, outcomes: OutcomeStream?
    ) async throws {
        while let item = await inbox.take() {
            // Jobs a transport held back are stored before their messages settle (one call).
            if !item.deferred.isEmpty { _ = try await store.deferJobs(Self.byCampaign(item.deferred)) }
            if !item.outcomes.isEmpty || item.events != PipelineEvents() || !item.campaignEvents.isEmpty {
                var batch = SettleBatch(outcomes: item.outcomes, events: item.events, shardEvents: item.shardEvents)
                batch.campaignEvents = item.campaignEvents
                if let outcomes, !item.messages.isEmpty { try await outcomes.publish(item.messages, at: batch.settledAt) }
                try await store.settle(batch)
                metrics?.settled(outcomes: item.outcomes, events: item.events)
            }
            var refs = item.refs
            if let priority, !refs.isEmpty {
                // Each lane's positions go back to its own consumer and budget.
                let priorityRefs = refs.filter { $0.topic == priority.topic }
                if !priorityRefs.isEmpty {
                    refs.removeAll { $0.topic == priority.topic }
                    _ = priority.consumer.settle(priorityRefs)
                    priority.budget.release(refs: priorityRefs)
                    priorityClock?.forget(priorityRefs)
                }
            }
            if !refs.isEmpty {
                _ = consumer.settle(refs)
                budget.release(refs: refs)
                metrics?.committable(consumer.commitPositions, topic: configuration.kafka.jobsTopic)
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

    // MARK: heartbeat

    /// `host pid` on the heartbeat key, so an operator can tell which process holds a lease.
    static let ownerDescription = "\(ProcessInfo.processInfo.hostName) pid \(ProcessInfo.processInfo.processIdentifier)"

    /// Refreshes the heartbeat four times per lifetime until cancelled. A refresh that fails is logged and
    /// retried at the next tick; if Redis stays away longer than the heartbeat lives, other processes may
    /// take this one's leases over (and count what they resend), which is why it beats this often.
    private func beatHeartbeat(store: PipelineStore) async {
        let interval = store.configuration.ownerHeartbeat / 4
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            if Task.isCancelled { break }
            do {
                try await store.beat(description: Self.ownerDescription)
            } catch {
                logger.warning(
                    "heartbeat not refreshed: if it lapses, other processes take over this one's leases",
                    metadata: ["owner": "\(store.configuration.leaseOwner)", "error": "\(error)"])
            }
        }
    }

    // MARK: feedback

    /// Writes each shard's state to `apns:shard:<app>:<n>` every few seconds, for dashboards.
    private func publishShardStatus(transports: [any NotificationTransport], store: PipelineStore) async throws {
        while !Task.isCancelled {
            for transport in transports {
                for s in await transport.statistics() {
                    try? await store.updateShard(
                        ShardStatus(
                            app: s.app, shard: s.index, state: s.state, gateway: s.gateway, connectedSince: s.connectedSince,
                            lastError: s.lastError))
                }
            }
            try await Task.sleep(for: .seconds(5))
        }
    }

    /// The gauges: in-flight jobs, every connection's state and buffers, the consumer's assignment and lag.
    private func sampleGauges(_ metrics: PipelineMetrics, transports: [any NotificationTransport], consumer: KafkaConsumer) async throws {
        while !Task.isCancelled {
            metrics.inFlight(budget.inFlight)
            var all: [(transport: String, statistics: [ConnectionStatistics])] = []
            for t in transports { all.append((t.protocolName, await t.statistics())) }
            metrics.connections(all)
            metrics.consumer(assigned: consumer.statistics.assignedPartitions.count, lag: consumer.consumerLag)
            try await Task.sleep(for: Self.metricsSampleInterval)
        }
    }

    // MARK: readiness

    /// Whether this process can do its work now, and if not, why (one line per problem): the consumer
    /// holds partitions of the jobs topic, and each app has a gateway connection up (or idle: connections
    /// open with the first notification after they closed). Redis is checked by the caller, with a
    /// connection of its own (the pipeline's wait minutes for Redis before they fail).
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
        return problems
    }

    /// Polls every app's feedback service at start and then every `feedback.interval_minutes`.
    private func feedbackSchedule(store: PipelineStore) async throws {
        let c = configuration
        // Binary apps only: Apple's feedback service belongs to the binary interface (HTTP/2's 410
        // answers replace it).
        let apps = c.apps.compactMap { a -> FeedbackApp? in
            guard a.transport == .binary, let credentials = c.credentials(for: a) else { return nil }
            let address = a.feedbackAddress ?? c.gateway.feedbackAddress
            return FeedbackApp(
                credentials: credentials,
                endpoint: FeedbackEndpoint(host: address.host, port: address.port, serverHostname: c.gateway.serverHostname))
        }
        let poller = FeedbackPoller(store: store, eventLoopGroup: group, logger: logger)
        await FeedbackSchedule(
            apps: apps, poller: poller, interval: .seconds(Int64(c.feedbackIntervalMinutes * 60)), logger: logger
        ).run()
    }
}

/// Logs jobs waiting on another live process's lease, at most once per interval (a rebalance can make
/// thousands wait at once): how many since the last line, one example job and holder.
final class LeaseWaitLog: Sendable {
    private let state = Mutex<(count: Int, last: ContinuousClock.Instant?)>((0, nil))
    private let interval: Duration

    init(interval: Duration = .seconds(10)) {
        self.interval = interval
    }

    func note(jobID: String, holder: String, logger: Logger) {
        let now = ContinuousClock.now
        let report = state.withLock { s -> Int? in
            s.count += 1
            if let last = s.last, now - last < interval { return nil }
            s.last = now
            defer { s.count = 0 }
            return s.count
        }
        if let report {
            logger.warning(
                "jobs wait on another live process's in-flight lease",
                metadata: ["jobs": "\(report)", "example.job": "\(jobID)", "example.owner": "\(holder)"])
        }
    }
}

/// True for the first caller of `claim` only: one continuation resumed by whichever of two racers ends first.
final class OnceFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func claim() -> Bool { !flag.exchange(true, ordering: .acquiringAndReleasing) }
}
