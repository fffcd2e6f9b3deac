import Foundation
import Kafka
import Logging
import NIOCore
import NIOPosix
import Redis
import Sender
import ServiceLifecycle

/// Everything a running pipeline is made of, built from its configuration by `PipelineRunner.assemble`.
struct PipelineParts: Sendable {
    var owner: String
    /// The gate's first connection's store (also the registrations' and the feedback's).
    var store: PipelineStore
    /// The settler's (also the heartbeat's and the shard status's).
    var settlerStore: PipelineStore
    var gateStores: [PipelineStore]
    var controlStore: PipelineStore
    var producer: KafkaProducer
    var deadLetter: DeadLetter
    var deadLetters: DeadLetterWriter
    var outcomeStream: OutcomeStream?
    var consumer: KafkaConsumer
    var priority: PriorityParts?
    var marks: WrittenMarks
    var release: DeferredRelease
    /// Signs and checks the jobs released at their pacing slot (design §2.13).
    var releases: ReleaseSignature
    var transports: [any NotificationTransport]
    var router: Router
    /// Every Redis connection, closed at the end.
    var connections: [any RedisConnection]

    /// The topics whose writes must not be lost: the dead-letter topic, and the outcomes topic when set.
    var sinks: [SinkHealth] { [deadLetters.health] + (outcomeStream.map { [$0.health] } ?? []) }

    /// The Kafka clients whose `run()` polls them: the consumers, the dead-letter producer and the
    /// outcomes stream's.
    var kafkaClients: [any Service] {
        var clients: [any Service] = [consumer, producer]
        if let priority { clients.append(priority.consumer) }
        if let outcomeStream { clients.append(outcomeStream.producer) }
        return clients
    }

    /// What the priority lane runs on (`docs/design.md §1.4`).
    struct PriorityParts: Sendable {
        var consumer: KafkaConsumer
        var topic: String
        var store: PipelineStore
        /// The lane's "written" marks, set while its batches are gated.
        var markStore: PipelineStore
    }
}

/// `run`'s Redis connections, each with a store of its own, kept so that all are closed at the end.
/// One server (`redis.url`) or a Redis Cluster (`redis.cluster`): the same calls either way.
struct StoreConnections {
    let redis: PipelineConfiguration.Redis
    let configuration: PipelineStoreConfiguration
    let group: MultiThreadedEventLoopGroup
    let logger: Logger
    /// Every connection opened, in order.
    private(set) var connections: [any RedisConnection] = []

    /// A store on a connection of its own, on the pipeline's event loops.
    mutating func connectedStore() async throws -> PipelineStore {
        let connection = try redis.makeConnection(logger: logger, eventLoopGroup: group)
        connections.append(connection)
        try await connection.connect()
        return PipelineStore(client: connection, configuration: configuration, logger: logger)
    }
}

extension PipelineRunner {
    /// The priority consumer's group: the jobs group's name and `.priority`.
    static func priorityGroup(_ group: String) -> String { group + ".priority" }
    /// Most messages per priority batch: what the priority consumer holds is handed out at once, never
    /// waited for to fill a batch, so a batch is as large as what came while the last one was gated.
    static let priorityBatchSize = 256
    static let priorityPollTimeout: Duration = .milliseconds(2)
    /// librdkafka's prefetch queue (`queued.max.messages.kbytes`) unless `kafka.properties` sets it.
    static let prefetchKilobytes = 8 * 1024

    /// Connects to Redis and Kafka and builds the transports; fails (with what to fix) before any job is taken.
    func assemble() async throws -> PipelineParts {
        let c = configuration
        let bootstrap = try c.kafka.resolvedBootstrapServers()
        let storeConfig = storeConfiguration()
        var stores = StoreConnections(redis: c.redis, configuration: storeConfig, group: group, logger: logger)
        // The gate's round trips and the settler's overlap instead of queueing behind each other on one socket.
        let store = try await stores.connectedStore()
        let settlerStore = try await stores.connectedStore()
        // Before the first gate: this file's dedup layout must find the records Redis holds (a changed
        // bucket width would let every job accepted within the retention through again).
        try await store.verifyDedupLayout()
        // The gate's further connections: one gate call in flight on each (`BulkLane`).
        var gateStores = [store]
        for _ in 1..<max(1, c.gateCallsInFlight) { gateStores.append(try await stores.connectedStore()) }

        let producer = try makeDeadLetterProducer(bootstrap: bootstrap)
        let deadLetter = DeadLetter(producer: producer, topic: c.kafka.deadLetterTopic, maxMessageBytes: c.kafka.deadLetterMaxBytes)
        let deadLetters = DeadLetterWriter(
            deadLetter: deadLetter, store: store, inbox: inbox, logger: logger, metrics: metrics, readinessGrace: c.readinessGrace)
        let outcomeStream = try makeOutcomeStream(bootstrap: bootstrap)
        let consumerProperties = jobsConsumerProperties()
        let consumer = try makeJobsConsumer(bootstrap: bootstrap, properties: consumerProperties)
        let priority = try await makePriorityParts(bootstrap: bootstrap, consumerProperties: consumerProperties, stores: &stores)
        let transports = try makeTransports(onOutcomes: outcomeHandler(deadLetters: deadLetters))
        // The batches' written marks (one call per batch, right before it reaches the transports) on a
        // connection of their own, so they never wait behind a gate or settle call.
        let marks = WrittenMarks(
            store: try await stores.connectedStore(), heartbeat: OwnerHeartbeat(description: Housekeeping.ownerDescription),
            logger: logger)
        // Campaign control (design §2.10) and the release of deferred jobs (§2.11; a release waits for
        // Kafka's delivery, through the dead-letter producer) on connections of their own.
        let controlStore = try await stores.connectedStore()
        // The key only `run` reads (in Redis, made by the first `run`): a released paced job's signature.
        let releases = ReleaseSignature(key: try await controlStore.releaseKey())
        let release = DeferredRelease(
            store: try await stores.connectedStore(), producer: producer, topic: c.kafka.jobsTopic, controls: controls,
            releases: releases, logger: logger)
        return PipelineParts(
            owner: storeConfig.leaseOwner, store: store, settlerStore: settlerStore, gateStores: gateStores, controlStore: controlStore,
            producer: producer, deadLetter: deadLetter, deadLetters: deadLetters, outcomeStream: outcomeStream, consumer: consumer,
            priority: priority, marks: marks, release: release, releases: releases, transports: transports,
            router: Router(transports: transports), connections: stores.connections)
    }

    /// What every store of this process is made with: the file's `redis` keys, in the store's units.
    func storeConfiguration() -> PipelineStoreConfiguration {
        let c = configuration
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
        return storeConfig
    }

    /// The dead-letter producer (it also writes released deferred jobs back to the jobs topic).
    private func makeDeadLetterProducer(bootstrap: String) throws -> KafkaProducer {
        let c = configuration
        // This producer writes dead letters only: its size limit is the pipeline file's, whatever
        // `kafka.properties` says for the consumers.
        var producerProperties = c.kafka.properties
        producerProperties["message.max.bytes"] = String(c.kafka.deadLetterMaxBytes)
        // How long one dead-letter write may take before it is reported failed and retried (librdkafka
        // retries inside it; its default, 300 s, would hide an unusable DLQ for five minutes).
        producerProperties["message.timeout.ms"] = String(c.kafka.deadLetterTimeoutMs)
        return try KafkaProducer(
            configuration: KafkaProducerConfiguration(bootstrapServers: bootstrap, properties: producerProperties), logger: logger)
    }

    /// The outcomes stream (nil without `kafka.outcomes_topic`), with a producer of its own: its
    /// messages are small and many, a dead letter may be large. A write failing this long is reported,
    /// logged and retried, as a dead letter's.
    private func makeOutcomeStream(bootstrap: String) throws -> OutcomeStream? {
        let c = configuration
        return try c.kafka.outcomesTopic.flatMap { topic in
            guard let options = self.outcomeMessages else { return nil }
            var properties = c.kafka.properties
            properties["message.timeout.ms"] = String(c.kafka.deadLetterTimeoutMs)
            let producer = try KafkaProducer(
                configuration: KafkaProducerConfiguration(bootstrapServers: bootstrap, properties: properties), logger: logger)
            return OutcomeStream(
                topic: topic, options: options, producer: producer, logger: logger, metrics: self.metrics, readinessGrace: c.readinessGrace)
        }
    }

    /// `kafka.properties` with the consumers' defaults where the file sets none (the priority consumer
    /// starts from these too).
    func jobsConsumerProperties() -> [String: String] {
        var consumerProperties = configuration.kafka.properties
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
        return consumerProperties
    }

    /// The jobs topic's consumer, in the file's group.
    private func makeJobsConsumer(bootstrap: String, properties: [String: String]) throws -> KafkaConsumer {
        let c = configuration
        return try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: bootstrap, groupID: c.kafka.group, topics: [c.kafka.jobsTopic], properties: properties,
                sessionTimeout: .milliseconds(c.kafka.sessionTimeoutMs), maxBatchSize: c.kafka.batchSize,
                // Four batches ahead of ingest, behind librdkafka's own queue: ten cost ~4 MiB more at
                // the peak for no speed (1M-job runs).
                maxBufferedMessages: max(c.kafka.batchSize * 4, 4_000)),
            logger: logger)
    }

    /// The priority lane (`docs/design.md §1.4`; nil without `kafka.priority_topic`): a consumer of its
    /// own, in a group of its own (`<group>.priority`, as registrations have `<group>.registrations`), so
    /// a bulk backlog holding the jobs consumer's poll thread (back-pressure, §1.2) never holds the
    /// priority topic's messages, nor a rebalance of the priority topic (an eager rebalance waits for
    /// every member of a group, and a held poll thread rejoins late). Its own gate connection: its gate
    /// calls never queue behind the bulk lane's.
    private func makePriorityParts(
        bootstrap: String, consumerProperties: [String: String], stores: inout StoreConnections
    ) async throws -> PipelineParts.PriorityParts? {
        let c = configuration
        guard let topic = c.kafka.priorityTopic else { return nil }
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
        return PipelineParts.PriorityParts(
            consumer: priorityConsumer, topic: topic, store: try await stores.connectedStore(),
            markStore: try await stores.connectedStore())
    }

    /// What the transports call with their outcomes. Runs on the transports' event loops: hands the
    /// settler its share at once, never waits.
    private func outcomeHandler(deadLetters: DeadLetterWriter) -> OutcomeHandler {
        let inbox = self.inbox
        let jobsTopic = configuration.kafka.jobsTopic
        let priorityTopic = configuration.kafka.priorityTopic
        let priorityClock = self.priorityClock
        let metrics = self.metrics
        let outcomeMessages = self.outcomeMessages
        return { batch in
            metrics?.senderEvents(app: batch.app, batch.events)
            if let priorityClock, let metrics { priorityClock.observeAccepted(batch, metrics: metrics) }
            let share = OutcomeRecords.settlerShare(batch, topic: jobsTopic, priorityTopic: priorityTopic, messages: outcomeMessages)
            inbox.put(share.item)
            // Jobs the gateway refused settle once their dead letters are stored.
            if !share.deadLetters.isEmpty { deadLetters.write(share.deadLetters, settle: share.deadLetterItem) }
        }
    }

    /// One transport per app, from one factory for the process: its transports of a kind share a
    /// connection limiter (the gateway counts connection attempts, whichever app makes them).
    private func makeTransports(onOutcomes: @escaping OutcomeHandler) throws -> [any NotificationTransport] {
        let c = configuration
        let factory = TransportFactory(group: group, logger: logger)
        return try c.apps.map { app -> any NotificationTransport in
            var configuration = try c.transportConfiguration(for: app)
            configuration.cancellations = controls.cancellations  // checked right before each write (design §2.10)
            return try factory.make(configuration, onOutcomes: onOutcomes)
        }
    }

    func logStart(_ parts: PipelineParts) {
        let c = configuration
        logger.info(
            "pipeline starting",
            metadata: [
                "bootstrap": "\((try? c.kafka.resolvedBootstrapServers()) ?? "?")", "group": "\(c.kafka.group)",
                "topic": "\(c.kafka.jobsTopic)", "priority_topic": "\(c.kafka.priorityTopic ?? "none")",
                "apps": "\(c.apps.map { "\($0.bundleID) (\($0.transport.rawValue))" }.joined(separator: ", "))", "owner": "\(parts.owner)",
                "redis": "\((try? c.redis.target())?.redactedDescription ?? "?")", "event_loop_threads": "\(c.eventLoopThreads)",
                "outcomes_topic": "\(c.kafka.outcomesTopic ?? "none")",
                // The proxy's URL with its password as ***; the NO_PROXY list as read.
                "http2_proxy":
                    "\(c.http2.proxy.map { "\($0.proxy) (\($0.proxy.source))" + ($0.noProxy.isEmpty ? "" : ", not for \($0.noProxy.joined(separator: ","))") } ?? "none")",
            ])
    }

    // MARK: the stages, from the parts

    func dispatch(_ parts: PipelineParts) -> Dispatch {
        Dispatch(
            configuration: configuration, router: parts.router, marks: parts.marks, deadLetters: parts.deadLetters, inbox: inbox,
            makesOutcomeMessages: outcomeMessages != nil, metrics: metrics, waitLog: waitLog, channelPolicies: channelPolicies,
            logger: logger)
    }

    func intake(consumer: KafkaConsumer, budget: InFlightBudget, lane: Lane) -> Intake {
        Intake(
            consumer: consumer, budget: budget,
            decoder: BatchDecoder(configuration: configuration, makesOutcomeMessages: outcomeMessages != nil, logger: logger),
            onReceived: { n in self.observed.withLock { $0.received += n } }, metrics: metrics,
            clock: lane == .priority ? priorityClock : nil, logger: logger)
    }

    func bulkLane(_ parts: PipelineParts) -> BulkLane {
        BulkLane(
            intake: intake(consumer: parts.consumer, budget: budget, lane: .bulk),
            gate: Gate(controls: controls, configuration: configuration, releases: parts.releases),
            gateStores: parts.gateStores, dispatch: dispatch(parts), capWaits: capWaits(parts, consumer: parts.consumer),
            sendingStopped: sendingStopped)
    }

    func priorityLane(_ parts: PipelineParts, _ priority: PipelineParts.PriorityParts, budget: InFlightBudget) -> PriorityLane {
        PriorityLane(
            intake: intake(consumer: priority.consumer, budget: budget, lane: .priority),
            gate: Gate(controls: controls, configuration: configuration, releases: parts.releases, lane: .priority), store: priority.store,
            markStore: priority.markStore, dispatch: dispatch(parts), capWaits: capWaits(parts, consumer: priority.consumer),
            sendingStopped: sendingStopped, logger: logger)
    }

    /// A lane's jobs waiting at the held-bytes cap (their room is read on the release's connection).
    func capWaits(_ parts: PipelineParts, consumer: KafkaConsumer) -> CapWaits {
        let waits = CapWaits(consumer: consumer, store: parts.release.store, controls: controls, logger: logger)
        capWaiting.withLock { $0.append(waits) }
        return waits
    }

    func settler(_ parts: PipelineParts) -> Settler {
        Settler(
            inbox: inbox, store: parts.settlerStore,
            bulk: Settler.LaneSink(consumer: parts.consumer, budget: budget, topic: configuration.kafka.jobsTopic),
            priority: parts.priority.flatMap { p in
                priorityBudget.map { Settler.LaneSink(consumer: p.consumer, budget: $0, topic: p.topic) }
            },
            priorityClock: priorityClock, outcomes: parts.outcomeStream, metrics: metrics)
    }

    func housekeeping(_ parts: PipelineParts) -> Housekeeping {
        Housekeeping(
            configuration: configuration, store: parts.settlerStore, heartbeat: parts.marks.heartbeat, gateStore: parts.store,
            transports: parts.transports,
            consumer: parts.consumer, budget: budget, deadLetter: parts.deadLetter, sinks: parts.sinks, group: group, metrics: metrics,
            capWaits: { [self] in self.capWaiting.withLock { $0 } }, logger: logger)
    }

    /// Commits the settled positions and closes every client; returns the first failure worth a non-zero exit.
    func close(_ parts: PipelineParts) async -> (any Error)? {
        var failure: (any Error)?
        let positions = parts.consumer.commitPositions
        observed.withLock { o in
            for (tp, offset) in positions where tp.topic == configuration.kafka.jobsTopic { o.finalCommitPositions[tp.partition] = offset }
        }
        await parts.consumer.close()  // commits the settled positions
        if let priority = parts.priority {
            await priority.consumer.close()
            if let error = priority.consumer.finalCommitError {
                logger.error(
                    "final Kafka commit of the priority topic failed: settled messages will be consumed again by the next process",
                    metadata: ["error": "\(error.message)"])
                failure = failure ?? error
            }
        }
        if let error = parts.consumer.finalCommitError {
            // Nothing is lost (the messages come again, and dedup keeps accepted ones from being sent
            // twice), but a clean exit would hide that Kafka was unreachable: exit non-zero.
            logger.error(
                "final Kafka commit failed: settled messages will be consumed again by the next process",
                metadata: ["error": "\(error.message)"])
            failure = failure ?? error
        }
        await parts.producer.close()
        await parts.outcomeStream?.close()
        for connection in parts.connections { await connection.close() }
        return failure
    }
}
