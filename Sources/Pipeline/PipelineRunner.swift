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
    private let inbox = SettlerInbox()
    private let observed = Mutex(Observed())

    /// What this instance did, for tests and operators.
    public struct Observed: Sendable {
        /// Jobs this instance took from Kafka.
        public var received = 0
        /// The positions it committed when it stopped (partition → next offset to read).
        public var finalCommitPositions: [Int32: Int64] = [:]
    }

    public var observations: Observed { observed.withLock { $0 } }

    public init(configuration: PipelineConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        budget = InFlightBudget(capacity: configuration.maxInFlight)
    }

    /// The Kafka position a notification carries through the sender (the jobs topic is the only one
    /// the sender sees, so the topic is not repeated in every notification).
    static func position(of message: KafkaConsumerMessage) -> SourcePosition {
        SourcePosition(partition: message.partition, offset: message.offset)
    }
    static func ref(topic: String, position: SourcePosition) -> MessageRef {
        MessageRef(topic: topic, partition: position.partition, offset: position.offset)
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
        // Two connections: the gate's round trips and the settler's overlap instead of queueing behind
        // each other on one socket.
        let redis = try RedisClient(url: c.redis.url, logger: logger)
        let settlerRedis = try RedisClient(url: c.redis.url, logger: logger)
        try await redis.connect()
        try await settlerRedis.connect()
        let store = PipelineStore(client: redis, configuration: storeConfig, logger: logger)
        let settlerStore = PipelineStore(client: settlerRedis, configuration: storeConfig, logger: logger)

        let producer = try KafkaProducer(
            configuration: KafkaProducerConfiguration(bootstrapServers: bootstrap, properties: c.kafka.properties), logger: logger)
        let deadLetter = DeadLetter(producer: producer, topic: c.kafka.deadLetterTopic)
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: bootstrap, groupID: c.kafka.group, topics: [c.kafka.jobsTopic], properties: c.kafka.properties,
                sessionTimeout: .milliseconds(c.kafka.sessionTimeoutMs), maxBatchSize: c.kafka.batchSize,
                maxBufferedMessages: max(c.kafka.batchSize * 20, 20_000)),
            logger: logger)

        let inbox = self.inbox
        let jobsTopic = c.kafka.jobsTopic
        // One limiter for the process: the gateway counts connection attempts, whichever app makes them.
        let limiter = ConnectionLimiter(attemptsPerSecond: c.gateway.shard.reconnect.attemptsPerSecondPerGateway)
        let http2Limiter = ConnectionLimiter(attemptsPerSecond: c.http2.reconnect.attemptsPerSecondPerGateway)
        let onOutcomes: OutcomeHandler = { batch in inbox.put(Self.settlerItem(batch, topic: jobsTopic)) }
        let transports = try c.apps.map { app -> any NotificationTransport in
            switch app.transport {
            case .binary:
                return try SenderPool(
                    configuration: PoolConfiguration(
                        credentials: c.credentials(for: app)!, gateways: app.gateways ?? c.gateway.addresses,
                        shards: app.shards ?? c.gateway.shards, shard: c.gateway.shard, serverHostname: c.gateway.serverHostname),
                    group: group, limiter: limiter, logger: logger, onOutcomes: onOutcomes)
            case .http2:
                return try HTTP2Transport(
                    configuration: c.http2Configuration(for: app)!, group: group, limiter: http2Limiter, logger: logger,
                    onOutcomes: onOutcomes)
            }
        }
        let router = Router(transports: transports)
        logger.info(
            "pipeline starting",
            metadata: [
                "bootstrap": "\(bootstrap)", "group": "\(c.kafka.group)", "topic": "\(c.kafka.jobsTopic)",
                "apps": "\(c.apps.map { "\($0.bundleID) (\($0.transport.rawValue))" }.joined(separator: ", "))", "redis": "\((try? RedisConfiguration(url: c.redis.url))?.redactedURL ?? "?")",
            ])

        let ingest = Task { try await self.ingest(consumer: consumer, store: store, router: router, deadLetter: deadLetter) }
        // If the settler fails (Redis gone for longer than the client waits), nothing settles any more
        // and the in-flight budget never frees: stop taking jobs, and let the process exit non-zero.
        let settler = Task {
            do {
                try await self.settle(store: settlerStore, consumer: consumer)
            } catch {
                ingest.cancel()
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
            ingest.cancel()
        }
        ingest.cancel()
        _ = try? await ingest.value
        sidecars.cancel()
        // Drain: every shard proves what it sent (probe), outcomes flow to the settler.
        let drained = await router.drainAndClose()
        logger.info("shards drained", metadata: ["results": "\(drained.mapValues { $0.map { "\($0)" } })"])
        inbox.close()
        do {
            try await settler.value
        } catch {
            logger.error("settler stopped: outcomes not recorded stay unsettled and are redelivered", metadata: ["error": "\(error)"])
            failure = failure ?? error
        }
        _ = try? await sidecars.value
        let positions = consumer.commitPositions
        observed.withLock { o in
            for (tp, offset) in positions where tp.topic == c.kafka.jobsTopic { o.finalCommitPositions[tp.partition] = offset }
        }
        await consumer.close()  // commits the settled positions
        await producer.close()
        await redis.close()
        await settlerRedis.close()
        try? await group.shutdownGracefully()
        if let failure { throw failure }
        logger.info("pipeline stopped")
    }

    // MARK: ingest

    /// A batch from Kafka, decoded: valid jobs, and the refused messages with their reason and outcome
    /// (a job that failed to decode has no id, app or token to count it under).
    struct DecodedBatch: Sendable {
        var messages: [KafkaConsumerMessage]
        var jobs: [(job: Job, message: KafkaConsumerMessage)]
        var deadLetters: [(message: KafkaConsumerMessage, reason: String, outcome: Redis.Outcome)]
        /// Jobs gated again because another copy was in flight: not counted as received a second time.
        var isRetry = false
    }

    /// How long a job whose id is in flight elsewhere waits before it is gated again.
    static let inFlightRetryDelay: Duration = .milliseconds(500)

    /// Two stages joined by a hand-off of two batches: Kafka + decoding, then gate + send. Decoding the
    /// next batch (CPU here) overlaps the gate's round trip for this one (CPU in Redis).
    private func ingest(consumer: KafkaConsumer, store: PipelineStore, router: Router, deadLetter: DeadLetter) async throws {
        let handoff = BatchHandoff<DecodedBatch>(capacity: 2)
        // Apple's limits differ by transport and push type: the decoder lets the largest through, and
        // each job is held to its own app's limit when its payload is encoded (gateAndSend).
        let decoder = JobDecoder(payloadLimit: configuration.largestPayloadLimit)
        let decoding = Task {
            defer { handoff.finish() }
            while !Task.isCancelled {
                guard let batch = await consumer.nextBatch(), !batch.isEmpty else {
                    if Task.isCancelled { break }
                    continue
                }
                await budget.acquire(batch.count)
                observed.withLock { $0.received += batch.count }
                let now = UInt32(Date().timeIntervalSince1970)
                var d = DecodedBatch(messages: batch, jobs: [], deadLetters: [])
                d.jobs.reserveCapacity(batch.count)
                for m in batch {
                    do throws(JobError) {
                        d.jobs.append((try decoder.decode(m.value, now: now), m))
                    } catch {
                        d.deadLetters.append((m, error.reason.rawValue, Redis.Outcome(jobID: "", app: "", tokenHex: "", kind: .deadLettered)))
                        logger.debug(
                            "job refused", metadata: ["reason": "\(error.reason.rawValue)", "detail": "\(error.detail)", "offset": "\(m.ref)"])
                    }
                }
                await handoff.put(d)
            }
        }
        // Stopping: the decoding stage ends at cancellation; batches it already took are still sent.
        try await withTaskCancellationHandler {
            while let d = await handoff.next() {
                try await gateAndSend(d, store: store, router: router, deadLetter: deadLetter, handoff: handoff)
            }
        } onCancel: {
            decoding.cancel()
        }
    }

    private func gateAndSend(
        _ d: DecodedBatch, store: PipelineStore, router: Router, deadLetter: DeadLetter, handoff: BatchHandoff<DecodedBatch>
    ) async throws {
        let c = configuration
        let apps = Dictionary(uniqueKeysWithValues: c.apps.map { ($0.bundleID, $0) })
        let batch = d.messages
        let jobs = d.jobs
        var deadLetters = d.deadLetters
        var item = SettlerInbox.Item()
        item.events.received = d.isRetry ? 0 : batch.count

        // Gate: one Redis round trip for the whole batch.
        let decisions = jobs.isEmpty ? [] : try await store.gate(
            jobs.map { GateRequest(jobID: $0.job.id, app: $0.job.app, tokenHex: $0.job.token.hex) })
        var notifications: [PushNotification] = []
        notifications.reserveCapacity(jobs.count)
        var inFlight: [(job: Job, message: KafkaConsumerMessage)] = []
        for (i, (job, message)) in jobs.enumerated() {
            let outcome = { (kind: Redis.OutcomeKind) in
                Redis.Outcome(jobID: job.id, app: job.app, tokenHex: job.token.hex, campaign: job.campaign, kind: kind)
            }
            switch decisions[i] {
            case .deduped:
                item.outcomes.append(outcome(.deduped))
                item.refs.append(message.ref)
            case .inFlight:
                // Another copy is being sent right now (by this process or another one, e.g. across a
                // rebalance). Settling this message now would lose the job if that sender crashed before
                // settling its own; so it waits and is gated again: deduped once the other copy is
                // accepted, admitted if its lease lapsed.
                inFlight.append((job, message))
            case .suppressed:
                item.outcomes.append(outcome(.suppressed))
                item.refs.append(message.ref)
            case .admitted(let language):
                do {
                    let encoder = PayloadEncoder(
                        limit: c.payloadLimit(app: apps[job.app], pushType: job.pushType), truncatesAlertBody: c.gateway.truncateAlert)
                    let payload = try job.encodedPayload(
                        language: language, encoder: encoder, jobIDKey: c.gateway.embedJobID ? "jid" : nil)
                    notifications.append(
                        PushNotification(
                            jobID: job.id, app: job.app, token: job.token, payload: payload, expiry: job.expiry,
                            priority: job.priority, campaign: job.campaign, collapseID: job.collapseID,
                            pushType: job.pushType?.rawValue, position: Self.position(of: message)))
                } catch {
                    // e.g. the localized alert makes the payload too large.
                    deadLetters.append((message, error.reason.rawValue, outcome(.deadLettered)))
                }
            }
        }
        // Dead letters are delivered to the DLQ (delivery checked) before their offsets may settle.
        if !deadLetters.isEmpty {
            try await deadLetter.send(deadLetters.map { ($0.message, $0.reason) })
            for d in deadLetters {
                item.outcomes.append(d.outcome)
                item.refs.append(d.message.ref)
            }
        }
        inbox.put(item)
        if !inFlight.isEmpty {
            let retry = DecodedBatch(messages: inFlight.map(\.message), jobs: inFlight, deadLetters: [], isRetry: true)
            Task {
                try? await Task.sleep(for: Self.inFlightRetryDelay)
                await handoff.put(retry)
            }
        }
        if !notifications.isEmpty {
            let orphans = try await router.send(notifications)
            if !orphans.isEmpty {
                // Validated jobs for an app with no certificate here: dead letters, with the reason.
                var orphanItem = SettlerInbox.Item()
                let byPosition = Dictionary(uniqueKeysWithValues: batch.map { (Self.position(of: $0), $0) })
                try await deadLetter.send(
                    orphans.compactMap { n in n.position.flatMap { byPosition[$0] }.map { ($0, "no-certificate-for-app") } })
                for n in orphans {
                    orphanItem.outcomes.append(
                        Redis.Outcome(jobID: n.jobID, app: n.app, tokenHex: n.token.hex, campaign: n.campaign, kind: .deadLettered))
                    if let position = n.position { orphanItem.refs.append(Self.ref(topic: c.kafka.jobsTopic, position: position)) }
                }
                logger.error("jobs for apps without a certificate were dead-lettered", metadata: ["count": "\(orphans.count)"])
                inbox.put(orphanItem)
            }
        }
    }

    static func settlerItem(_ batch: OutcomeBatch, topic: String) -> SettlerInbox.Item {
        var item = SettlerInbox.Item()
        item.outcomes.reserveCapacity(batch.outcomes.count)
        for o in batch.outcomes {
            // The settler acts on what a rejection means, never on a protocol's status number.
            let kind: Redis.OutcomeKind
            var suppression: TokenSuppression?
            switch o.delivery {
            case .accepted:
                kind = .accepted
            case .rejected(.invalidToken(let since, let reason)):
                kind = .rejected
                suppression = TokenSuppression(since: since, reason: reason)
            case .rejected(.badRequest), .rejected(.transient):
                kind = .deadLettered
            }
            item.outcomes.append(
                Redis.Outcome(
                    jobID: o.jobID, app: o.app, tokenHex: o.token.hex, campaign: o.notification.campaign, kind: kind,
                    code: o.code, suppressToken: suppression, shard: o.connection))
            if let position = o.notification.position { item.refs.append(ref(topic: topic, position: position)) }
        }
        item.events.replayed = batch.events.replayed
        item.events.ambiguous = batch.events.ambiguous
        item.events.retried = batch.events.retried
        item.events.reconnects = batch.events.reconnects
        if batch.events.replayed > 0 {
            item.shardEvents.append(ShardEvents(app: batch.app, shard: batch.connection, replayed: batch.events.replayed))
        }
        return item
    }

    // MARK: settling

    /// One Redis round trip per gathered batch, then the Kafka offsets, then the in-flight budget.
    private func settle(store: PipelineStore, consumer: KafkaConsumer) async throws {
        while let item = await inbox.take() {
            if !item.outcomes.isEmpty || item.events != PipelineEvents() {
                try await store.settle(
                    SettleBatch(outcomes: item.outcomes, events: item.events, shardEvents: item.shardEvents))
            }
            if !item.refs.isEmpty {
                _ = consumer.settle(item.refs)
                budget.release(item.refs.count)
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
