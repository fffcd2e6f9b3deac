import CRdKafka
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import TimeUnits

/// Consumer configuration. librdkafka properties pass through unchanged (`properties` wins over what
/// this struct derives), so production security settings need no code.
public struct KafkaConsumerConfiguration: Sendable {
    public var bootstrapServers: String
    public var groupID: String
    public var topics: [String]
    /// Any librdkafka consumer/global property (CONFIGURATION.md).
    public var properties: [String: String]
    /// `session.timeout.ms`. Keep it low (e.g. 6 s) against the mock cluster: after the last member of a
    /// group leaves, a new member waits about this long for its assignment.
    public var sessionTimeout: Duration
    /// Most messages per batch handed out by `nextBatch()`.
    public var maxBatchSize: Int
    /// Bound of the buffer of fetched, not yet handed out messages. When reached, the poll thread holds
    /// (stops polling; librdkafka's own queue then fills and stops fetching) until the buffer is half
    /// drained. The partitions are not paused: see `ConsumerCore.pollLoop`.
    public var maxBufferedMessages: Int
    /// The same bound in bytes (message values): a buffer of ~1 MB messages must not reach
    /// `maxBufferedMessages` of them. Whichever bound is reached first holds the poll thread.
    public var maxBufferedBytes: Int = 32 << 20
    /// How long one poll of librdkafka waits to fill a batch (`rd_kafka_consume_batch_queue` returns when
    /// it has `maxBatchSize` messages or this passed): what a message may wait in librdkafka's queue for
    /// others to join it. The priority lane polls every few milliseconds (`docs/design.md §1.4`).
    public var pollTimeout: Duration = .milliseconds(100)
    /// How often settled positions are committed (also on revoke and on close).
    public var commitInterval: Duration
    /// `auto.offset.reset`: where a group with no committed offset starts, and where librdkafka goes when
    /// the committed offset no longer exists (counted as an offset reset and logged as an error).
    public var autoOffsetReset: String
    /// Whether `run()` closes the consumer when the service group shuts down gracefully (as
    /// `close()` does). False by default: the pipeline closes its consumers itself once what it took is
    /// settled (`docs/design.md §1.3`); a consumer run as a service of a `ServiceGroup` of its own sets it.
    public var stopsOnGracefulShutdown = false

    public init(
        bootstrapServers: String, groupID: String, topics: [String], properties: [String: String] = [:],
        sessionTimeout: Duration = .seconds(10), maxBatchSize: Int = 1000, maxBufferedMessages: Int = 10_000,
        commitInterval: Duration = .seconds(1), autoOffsetReset: String = "earliest"
    ) {
        self.bootstrapServers = bootstrapServers
        self.groupID = groupID
        self.topics = topics
        self.properties = properties
        self.sessionTimeout = sessionTimeout
        self.maxBatchSize = maxBatchSize
        self.maxBufferedMessages = maxBufferedMessages
        self.commitInterval = commitInterval
        self.autoOffsetReset = autoOffsetReset
    }

    var rdkafkaProperties: [String: String] {
        let sessionMs = sessionTimeout.milliseconds
        var p: [String: String] = [
            "bootstrap.servers": bootstrapServers,
            "group.id": groupID,
            "client.id": "apns-pipeline",
            // Offsets are committed by us, from settled positions only (`docs/design.md §2.1`): never by librdkafka.
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": autoOffsetReset,
            "enable.partition.eof": "false",
            "session.timeout.ms": "\(sessionMs)",
            // Short fetch waits and error back-offs. Chosen when the consumer still paused and resumed its
            // partitions (each resume restarted a fetcher, which with librdkafka's defaults of 500 ms left
            // the consumer idle for most of a second); kept because the benchmark figures were measured with them.
            "fetch.wait.max.ms": "50",
            "fetch.error.backoff.ms": "20",
            // Frequent heartbeats: a member learns of a rebalance sooner, so fewer settlements pile up
            // behind commits the group refuses while it rebalances.
            "heartbeat.interval.ms": "\(max(100, min(3000, sessionMs / 3)))",
                // partition.assignment.strategy stays librdkafka's default (range,roundrobin: eager). Both
                // protocols are handled; against librdkafka 2.0.2's mock cluster, cooperative-sticky ends in
                // cascades of ILLEGAL_GENERATION commit errors and "lost" assignments (every partition's
                // uncommitted settlements redelivered), eager does not. With a real cluster, cooperative-sticky
                // can be chosen through `properties`.
        ]
        if RDKafkaClient.hasFetchQueueBackoff {
            // After the prefetch queue was full, decide again this soon whether to fetch (librdkafka's
            // default is a second; before 2.1 the poll thread nudges the fetcher instead, ``FetchNudge``).
            p["fetch.queue.backoff.ms"] = "20"
        }
        p.merge(properties) { _, override in override }
        return p
    }
}

/// Counters a consumer keeps. Offset gaps and resets mean data was skipped: they are also logged at
/// error level, with the partition and offsets as metadata.
public struct KafkaConsumerStatistics: Sendable {
    public var messagesReceived = 0
    public var messagesSettled = 0
    public var batchesDelivered = 0
    /// Times a fetched offset jumped past the expected next offset (including past the committed
    /// offset at assignment).
    public var offsetGaps = 0
    /// Offsets skipped by those gaps.
    public var offsetsSkipped: Int64 = 0
    /// Offset resets: librdkafka's (e.g. committed offset out of range) and offsets going backwards.
    public var offsetResets = 0
    /// Buffered messages dropped because their partition was revoked before they were handed out.
    public var droppedOnRevoke = 0
    /// Commits that failed after retries (periodic ones are retried at the next interval).
    public var commitFailures = 0
    /// Revocations whose final commit failed: their settled but uncommitted messages will be redelivered.
    public var revokeCommitFailures = 0
    /// Settled offsets whose commit failed at revocation (or whose partition was lost): the next owner
    /// gets them again. The mock cluster refuses commits while a group is joining, which is when the
    /// eager protocol revokes, so with it this is the messages settled since the last periodic commit.
    public var settledButUncommittedAtRevoke: Int64 = 0
    /// Times the buffer filled and the poll thread held (the name is older than the holding).
    public var pauses = 0
    /// Metadata requests sent to wake librdkafka's fetcher while a backlog was consumed (``FetchNudge``;
    /// librdkafka before 2.1 only).
    public var fetchNudges = 0
    public var assignedPartitions: [TopicPartition] = []
    /// Partitions held now (``KafkaConsumer/hold(_:)``): not fetched until released.
    public var heldPartitions: [TopicPartition] = []
}

/// A Kafka group consumer that hands out batches and commits settled positions.
///
/// A swift-service-lifecycle `Service`: `init` makes the librdkafka handle, checks the configuration and
/// subscribes (those errors are thrown there); `run()` polls, on a thread it starts and waits for, until
/// `close()` (or the cancellation of `run()`, or the graceful shutdown when
/// ``KafkaConsumerConfiguration/stopsOnGracefulShutdown``) has committed, left the group and destroyed
/// the handle. Until `run()` runs nothing is fetched: `nextBatch()` waits. ``started(configuration:logger:)``
/// runs it in a task of its own, for code with no task group at hand. The lifecycle is
/// ``ConsumerStateMachine``.
///
/// The poll thread polls librdkafka (`rd_kafka_consume_batch_queue` on the consumer
/// queue, which also serves rebalances and logs), copies messages into a bounded buffer and stops
/// polling while it is full (back-pressure, `docs/design.md §1.2`). `nextBatch()` awaits without
/// blocking a thread.
///
/// The pipeline settles every message it is done with (`settle`), in any order; per partition the
/// consumer commits the first unsettled offset, periodically, on revoke and on close (`docs/design.md §2.1`).
/// On revoke, buffered messages of the partition are dropped and later settlements of it are ignored
/// (`settle` returns false): the next owner gets those messages again.
public final class KafkaConsumer: Service, Sendable {
    private let core: ConsumerCore

    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws {
        precondition(configuration.maxBatchSize > 0 && configuration.maxBufferedMessages > 0)
        var logger = logger
        logger[metadataKey: "kafka.group"] = "\(configuration.groupID)"
        let client = try RDKafkaClient.make(kind: .consumer, properties: configuration.rdkafkaProperties, logger: logger)
        let core = ConsumerCore(client: client, configuration: configuration, logger: logger)
        client.context.rebalanceHandler = { [weak core] event, partitions in
            core?.handleRebalance(event, partitions)
        }
        do {
            try client.subscribe(topics: configuration.topics)
        } catch {
            core.destroyUnstarted()
            throw error
        }
        self.core = core
    }

    /// A consumer whose `run()` runs in a task of its own until `close()`, or until the consumer is
    /// released (that task holds the consumer's state, not the consumer): for tools and tests with no
    /// task group to run it in.
    public static func started(configuration: KafkaConsumerConfiguration, logger: Logger) throws -> KafkaConsumer {
        let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
        let core = consumer.core
        Task { try? await core.run(stopsOnGracefulShutdown: false) }
        return consumer
    }

    deinit {
        // Released while `run()` is not running (it holds `self`): never started, or `started(…)`'s.
        core.requestStop()
    }

    /// Polls until the consumer is closed: by `close()`, by the cancellation of this task, or by the
    /// graceful shutdown if ``KafkaConsumerConfiguration/stopsOnGracefulShutdown``. Each of them commits
    /// the settled positions once and leaves the group; `run()` returns when the handle is destroyed
    /// (at once if the consumer was closed before). Throws if it is already running.
    public func run() async throws {
        try await core.run(stopsOnGracefulShutdown: core.configuration.stopsOnGracefulShutdown)
    }

    /// The next batch of messages (at most `maxBatchSize`, possibly from several partitions, in offset
    /// order per partition), or nil once the consumer is closed (or the task is cancelled).
    public func nextBatch() async -> [KafkaConsumerMessage]? {
        await core.nextBatch()
    }

    /// Settles messages (any order). Returns how many were accepted: a message of a partition revoked
    /// since it was handed out, or already settled, is not.
    @discardableResult
    public func settle(_ refs: [MessageRef]) -> Int { core.settle(refs).accepted }

    /// Settles `refs` as ``settle(_:)`` does, and returns the commit position of each partition they are
    /// of (what a settlement-latency metric looks at, without reading every owned partition's position).
    public func settleReportingPositions(_ refs: [MessageRef]) -> [TopicPartition: Int64] { core.settle(refs, reporting: true).positions }

    @discardableResult
    public func settle(topic: String, partition: Int32, offset: Int64) -> Bool {
        core.settle([MessageRef(topic: topic, partition: partition, offset: offset)]).accepted == 1
    }

    /// Commits the settled positions now (retrying "rebalance in progress" a few times).
    public func commit() async throws { try await core.requestCommit() }

    /// Stops fetching `partitions` until ``release(_:)``, for a pipeline that cannot take their next
    /// messages yet (`docs/design.md §2.11`: a campaign at its held-bytes cap). What was handed out or
    /// buffered before still comes; librdkafka drops what it had prefetched of them and, on release,
    /// fetches again from the first message not handed out (`rd_kafka_pause_partitions`). A partition
    /// revoked meanwhile is no longer held: its next owner reads it, and if it comes back here it is read
    /// from its committed offset like any assignment.
    public func hold(_ partitions: Set<TopicPartition>) { core.hold(partitions) }

    /// Fetches `partitions` again (those this consumer still owns).
    public func release(_ partitions: Set<TopicPartition>) { core.release(partitions) }

    /// What would be committed now: per owned partition, the first unsettled offset.
    public var commitPositions: [TopicPartition: Int64] { core.commitPositions }

    public var statistics: KafkaConsumerStatistics { core.statistics }

    /// Per assigned partition, the messages not settled yet: the high watermark from librdkafka's
    /// statistics minus the first unsettled offset (what would be committed now; before anything was
    /// received or committed, the low watermark, as `auto.offset.reset=earliest` starts there).
    /// Empty unless `statistics.interval.ms` is set in `properties`; as fresh as that period.
    public var consumerLag: [TopicPartition: Int64] {
        let offsets = core.client.context.partitionOffsets.withLock { $0 }
        let positions = core.commitPositions
        var lag: [TopicPartition: Int64] = [:]
        for tp in core.statistics.assignedPartitions {
            guard let o = offsets[tp], o.high >= 0 else { continue }
            if let position = positions[tp] {
                lag[tp] = max(0, o.high - position)
            } else if o.librdkafkaLag >= 0 {
                lag[tp] = o.librdkafkaLag
            } else if o.low >= 0 {
                lag[tp] = max(0, o.high - o.low)
            }
        }
        return lag
    }

    /// Commits settled positions, leaves the group (`rd_kafka_consumer_close`), destroys the handle, and
    /// so ends `run()`. Pending and later `nextBatch()` calls return nil. Before `run()`, the consumer is
    /// closed on a thread of the close's own (and a later `run()` returns at once).
    public func close() async { await core.close() }

    /// After `close()`: the error of the last commit attempted if it failed (the final one, or the
    /// revoke's retry of it inside close), also when nothing was left to attempt because the partitions
    /// were lost (Kafka unreachable for longer than the session) after a failed attempt. Either way
    /// settled positions were not stored: the next owner of those partitions gets their messages again.
    /// A commit refused because the group was rebalancing is not reported (the group's hand-over).
    public var finalCommitError: KafkaError? { core.finalCommitError }
}

/// The consumer's state and poll thread.
///
/// `@unchecked Sendable`: mutable state is behind `state`; `client` is thread-safe (RDKafkaClient);
/// `queue` and `topicNames` are used by the poll thread only (the rebalance callback runs on it too).
final class ConsumerCore: @unchecked Sendable {
    let client: RDKafkaClient
    let configuration: KafkaConsumerConfiguration
    private let logger: Logger
    private var queue: OpaquePointer?
    private var topicNames: [OpaquePointer: String] = [:]

    private struct State {
        /// The lifecycle (initializing → consuming → closing → finished) and the hold.
        var machine = ConsumerStateMachine()
        var tracker = OffsetTracker()
        var lastCommitted: [TopicPartition: Int64] = [:]
        var buffer: [[KafkaConsumerMessage]] = []
        var buffered = 0
        var bufferedBytes = 0
        /// `nextBatch` calls waiting for a batch: each stream is finished to wake its caller, which then
        /// takes from `buffer` under the lock (a wait cancelled as it is woken leaves the batch there).
        var waiters: [AsyncStream<Void>.Continuation] = []
        /// Served by the poll thread (accepted until the close begins, `ConsumerStateMachine.acceptsCommitRequests`).
        var commitRequests: [CommitReply] = []
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
        var stats = KafkaConsumerStatistics()
        /// The error of the last commit attempted, nil once one succeeds.
        var lastCommitError: KafkaError?
        var finalCommitError: KafkaError?
        /// Partitions the pipeline holds (``KafkaConsumer/hold(_:)``), and those paused in librdkafka now;
        /// the poll thread makes the second follow the first when `holdsChanged`.
        var held: Set<TopicPartition> = []
        var paused: Set<TopicPartition> = []
        var holdsChanged = false
    }
    private let state = Mutex(State())
    /// Wakes the poll thread while it holds (its buffer full: it is not in librdkafka's poll, so
    /// `rd_kafka_queue_yield` does not reach it): a drained buffer, a commit request, a stop. A signal that
    /// finds it polling only makes its next hold return at once.
    private let holdWakeUp = DispatchSemaphore(value: 0)

    var finalCommitError: KafkaError? { state.withLock { $0.finalCommitError } }

    /// Wakes the poll thread, whether it is in librdkafka's poll or holding.
    private func wakePollThread() {
        if let queue { client.wake(queue: queue) }
        holdWakeUp.signal()
    }

    init(client: RDKafkaClient, configuration: KafkaConsumerConfiguration, logger: Logger) {
        self.client = client
        self.configuration = configuration
        self.logger = logger
        self.queue = client.consumerQueue()
    }

    /// `KafkaConsumer.run()`: starts the poll thread and returns when it ended (the handle destroyed).
    func run(stopsOnGracefulShutdown: Bool) async throws {
        switch state.withLock({ $0.machine.run() }) {
        case .alreadyRunning:
            throw KafkaError(kind: .configuration, message: "KafkaConsumer.run() called while it runs")
        case .awaitClosed:
            await close()
        case .startPollThread:
            await runPollThread(
                named: "kafka-consumer-poll", stopsOnGracefulShutdown: stopsOnGracefulShutdown, requestStop: { self.requestStop() },
                loop: { self.pollLoop() })
        }
    }

    /// Subscribe failed: nothing was started.
    func destroyUnstarted() {
        if let queue { client.destroyQueue(queue) }
        queue = nil
        client.destroy()
    }

    /// A stop: the poll thread closes at its next step; with no poll thread, a thread of its own closes.
    func requestStop() {
        perform(state.withLock { $0.machine.stop() })
    }

    private func perform(_ action: ConsumerStateMachine.StopAction) {
        switch action {
        case .wakePollThread:
            wakePollThread()
        case .closeWithoutPollThread:
            // `rd_kafka_consumer_close` blocks (it leaves the group): never on the caller's thread.
            let thread = Thread { [self] in self.shutdown() }
            thread.name = "kafka-consumer-close"
            thread.start()
        case .none:
            break
        }
    }

    // MARK: API side

    func nextBatch() async -> [KafkaConsumerMessage]? {
        while true {
            let (ready, batch, wake) = state.withLock { s -> (Bool, [KafkaConsumerMessage]?, Bool) in
                if Task.isCancelled || (s.machine.isFinished && s.buffer.isEmpty) { return (true, nil, false) }
                guard !s.buffer.isEmpty else { return (false, nil, false) }
                let batch = takeBatch(&s)
                return (true, batch, requestResumeIfDrained(&s))
            }
            if wake { wakePollThread() }
            if ready { return batch }
            // Woken by the poll thread's next batch or the close, or ended by the caller's cancellation;
            // then look again.
            let (woken, waiter) = AsyncStream.makeStream(of: Void.self)
            let wait = state.withLock { s -> Bool in
                guard s.buffer.isEmpty, !s.machine.isFinished else { return false }
                s.waiters.append(waiter)
                return true
            }
            if wait {
                for await _ in woken {}
            }
        }
    }

    /// The bytes a batch's values hold (what the byte bound counts).
    static func bytes(of batch: [KafkaConsumerMessage]) -> Int {
        var n = 0
        for m in batch { n &+= m.value.count }
        return n
    }

    /// Merges buffered batches up to `maxBatchSize` messages.
    private func takeBatch(_ s: inout State) -> [KafkaConsumerMessage] {
        var batch = s.buffer.removeFirst()
        while let next = s.buffer.first, batch.count + next.count <= configuration.maxBatchSize {
            batch.append(contentsOf: next)
            s.buffer.removeFirst()
        }
        s.buffered -= batch.count
        s.bufferedBytes -= Self.bytes(of: batch)
        s.stats.batchesDelivered += 1
        return batch
    }

    /// When holding and the buffer is half drained, asks the poll thread to resume. Returns true if the
    /// poll thread must be woken.
    private func requestResumeIfDrained(_ s: inout State) -> Bool {
        guard s.machine.isHolding, s.buffered <= configuration.maxBufferedMessages / 2,
            s.bufferedBytes <= configuration.maxBufferedBytes / 2
        else { return false }
        return s.machine.bufferDrained()
    }

    func settle(_ refs: [MessageRef], reporting: Bool = false) -> (accepted: Int, positions: [TopicPartition: Int64]) {
        state.withLock { s in
            var accepted = 0
            var positions: [TopicPartition: Int64] = [:]
            for (i, ref) in refs.enumerated() {
                if s.tracker.settle(ref) { accepted += 1 }
                // Refs come in runs of one partition: its position is read at the end of each run.
                guard reporting, i == refs.count - 1 || refs[i + 1].partition != ref.partition || refs[i + 1].topic != ref.topic else {
                    continue
                }
                if let position = s.tracker.commitPosition(ref.topicPartition) { positions[ref.topicPartition] = position }
            }
            s.stats.messagesSettled += accepted
            return (accepted, positions)
        }
    }

    func requestCommit() async throws {
        let (answer, reply) = AsyncStream.makeStream(of: Result<Void, any Error>.self, bufferingPolicy: .bufferingOldest(1))
        let accepted = state.withLock { s -> Bool in
            guard s.machine.acceptsCommitRequests else { return false }
            s.commitRequests.append(reply)
            return true
        }
        guard accepted else { throw KafkaError.closed }
        wakePollThread()
        // The poll thread answers after its commit; a cancelled caller stops waiting (the commit goes on).
        for await result in answer { return try result.get() }
        throw CancellationError()
    }

    func hold(_ partitions: Set<TopicPartition>) {
        let wake = state.withLock { s -> Bool in
            let tracked = partitions.filter { s.tracker.isTracking($0) }
            guard !tracked.isSubset(of: s.held) else { return false }
            s.held.formUnion(tracked)
            s.holdsChanged = true
            return true
        }
        if wake { wakePollThread() }
    }

    func release(_ partitions: Set<TopicPartition>) {
        let wake = state.withLock { s -> Bool in
            guard !s.held.isDisjoint(with: partitions) else { return false }
            s.held.subtract(partitions)
            s.holdsChanged = true
            return true
        }
        if wake { wakePollThread() }
    }

    /// Poll thread: pauses and resumes partitions in librdkafka as the holds say.
    private func applyHolds() {
        let (pause, resume) = state.withLock { s -> ([TopicPartition], [TopicPartition]) in
            s.holdsChanged = false
            let pause = s.held.subtracting(s.paused).filter { s.tracker.isTracking($0) }
            let resume = s.paused.subtracting(s.held)
            s.paused.formUnion(pause)
            s.paused.subtract(resume)
            return (Array(pause), Array(resume))
        }
        if !pause.isEmpty {
            if let error = client.pause(pause) { logger.error("Kafka pause failed", metadata: ["error": "\(error)"]) }
            logger.info(
                "Kafka partitions held", metadata: ["kafka.partitions": "\(pause.map(\.description).sorted().joined(separator: ","))"])
        }
        if !resume.isEmpty {
            if let error = client.resume(resume) { logger.error("Kafka resume failed", metadata: ["error": "\(error)"]) }
            logger.info(
                "Kafka partitions released", metadata: ["kafka.partitions": "\(resume.map(\.description).sorted().joined(separator: ","))"])
        }
    }

    var commitPositions: [TopicPartition: Int64] { state.withLock { $0.tracker.commitPositions } }

    var statistics: KafkaConsumerStatistics {
        let librdkafkaResets = client.context.offsetResets.withLock { $0 }
        var stats = state.withLock { s in
            var stats = s.stats
            stats.assignedPartitions = s.tracker.trackedPartitions.sorted {
                ($0.topic, $0.partition) < ($1.topic, $1.partition)
            }
            stats.heldPartitions = s.held.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
            return stats
        }
        stats.offsetResets += librdkafkaResets
        return stats
    }

    func close() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let (done, action) = state.withLock { s -> (Bool, ConsumerStateMachine.StopAction) in
                let action = s.machine.stop()
                if s.machine.isFinished { return (true, action) }
                s.closeWaiters.append(c)
                return (false, action)
            }
            perform(action)
            if done { c.resume() }
        }
    }

    // MARK: Poll thread

    /// At most one fetcher nudge per this while a backlog is consumed (``FetchNudge``): at 100k messages
    /// per second, ~5 000 messages, far less than the prefetch queue holds.
    static let nudgeInterval: Duration = .milliseconds(50)
    /// A nudge's metadata request waits at most this for the broker (it blocks the poll thread).
    static let nudgeTimeoutMs: Int32 = 100

    /// The poll thread's loop: its steps are ``ConsumerStateMachine/nextPollAction()``'s; it ends closing
    /// the consumer.
    private func pollLoop() {
        let capacity = configuration.maxBatchSize
        let buffer = UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>.allocate(capacity: capacity)
        defer { buffer.deallocate() }
        let interval = configuration.commitInterval.milliseconds
        var lastCommit = ContinuousClock.now
        var nudge = FetchNudge(interval: Self.nudgeInterval)
        let nudgesFetcher = !RDKafkaClient.hasFetchQueueBackoff
        let pollTimeoutMs = Int32(clamping: max(1, configuration.pollTimeout.milliseconds))
        // Commit requests refused while the group rebalances, tried again after the next polls (which
        // serve the rebalance) instead of sleeping on this thread, which would hold the rebalance up.
        var retry: (requests: [CommitReply], attempt: Int, due: ContinuousClock.Instant)?
        while true {
            let (action, requests, holdsChanged) = state.withLock { s in
                defer { s.commitRequests = [] }
                return (s.machine.nextPollAction(), s.commitRequests, s.holdsChanged)
            }
            if holdsChanged && action != .close { applyHolds() }
            if action == .close {
                for r in requests + (retry?.requests ?? []) { r.fail(KafkaError.closed) }
                break
            }
            if action == .resume {
                logger.debug("Kafka consumer buffer drained: consuming again")
            }
            let now = ContinuousClock.now
            if !requests.isEmpty || retry.map({ now >= $0.due }) == true || (now - lastCommit).milliseconds >= interval {
                var waiting = requests
                var attempt = 1
                if let r = retry {
                    waiting += r.requests
                    attempt = r.attempt + 1
                    retry = nil
                }
                let reason = waiting.isEmpty ? "periodic" : "requested"
                switch attemptCommit(reason: reason) {
                case .success:
                    for r in waiting { r.succeed() }
                case .failure(let error) where error.isRebalanceInProgress && !waiting.isEmpty && attempt < Self.commitAttempts:
                    retry = (waiting, attempt, now + Self.commitRetryDelay)
                case .failure(let error):
                    noteCommitFailure(error, reason: reason, attempts: attempt)
                    for r in waiting { r.fail(error) }
                }
                lastCommit = now
            }
            // Buffer full: hold, leaving fetched messages in librdkafka's own queue, which stops fetching
            // at `queued.max.messages.kbytes` (librdkafka's default is 64 MiB, which cost ~100 MiB of
            // `run`'s RSS; the pipeline sets a smaller one unless `kafka.properties` does, see
            // `PipelineRunner.prefetchKilobytes`). (Pausing the partitions instead purges that queue, and
            // each resume then left the consumer idle for the better part of a second while it refetched.)
            // While holding, rebalance events wait too: at most the time the pipeline takes to drain
            // half the buffer. The hold ends when woken (the buffer half drained, a commit request, a
            // stop) or when the periodic commit or a commit retry is due.
            if action == .hold {
                let nextCommit = min(lastCommit + configuration.commitInterval, retry?.due ?? .now + .seconds(3600))
                let waitMs = max(1, min(1000, (nextCommit - .now).milliseconds))
                _ = holdWakeUp.wait(timeout: .now() + .milliseconds(Int(waitMs)))
                continue
            }
            let n = client.consumeBatch(queue: queue!, timeoutMs: pollTimeoutMs, into: buffer, capacity: capacity)
            if n > 0 { ingest(buffer, count: n) }
            if nudgesFetcher, nudge.isDue(afterReceiving: n, capacity: capacity, now: .now) {
                // The request wakes the broker thread that answers it; the metadata is not used (a
                // failure or a timeout only means no nudge this time).
                client.requestMetadata(timeoutMs: Self.nudgeTimeoutMs)
                state.withLock { $0.stats.fetchNudges += 1 }
            }
        }
        shutdown()
    }

    /// Copies fetched messages, tracks them, buffers them, and wakes a waiting `nextBatch`.
    private func ingest(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>, count: Int) {
        let messages = copyOut(buffer, count: count)
        guard !messages.isEmpty else { return }

        var anomalies: [(MessageRef, PartitionOffsetTracker.Reception)] = []
        let (waiters, pauseNow, assigned) = state.withLock {
            s -> ([AsyncStream<Void>.Continuation], Bool, [TopicPartition]) in
            var kept: [KafkaConsumerMessage] = []
            kept.reserveCapacity(messages.count)
            // Messages come in runs of one partition: its committed offset is looked at once per run.
            var run: (topic: String, partition: Int32)?
            for message in messages {
                let reception = s.tracker.received(message.ref)
                if reception != nil, run.map({ $0.partition != message.partition || $0.topic != message.topic }) ?? true {
                    run = (message.topic, message.partition)
                    if s.lastCommitted[message.topicPartition] == nil {
                        // No committed offset: the group would restart this partition where fetching began.
                        s.lastCommitted[message.topicPartition] = message.offset
                    }
                }
                switch reception {
                case nil:
                    // Partition revoked in the meantime: its new owner gets the message.
                    s.stats.droppedOnRevoke += 1
                    continue
                case .inOrder?:
                    break
                case .gap(let expected)?:
                    s.stats.offsetGaps += 1
                    s.stats.offsetsSkipped += message.offset - expected
                    anomalies.append((message.ref, .gap(expected: expected)))
                case .backwards(let expected)?:
                    s.stats.offsetResets += 1
                    anomalies.append((message.ref, .backwards(expected: expected)))
                }
                kept.append(message)
            }
            s.stats.messagesReceived += kept.count
            guard !kept.isEmpty else { return ([], false, []) }
            let waiters = s.waiters
            s.waiters = []
            s.buffer.append(kept)
            s.buffered += kept.count
            s.bufferedBytes += Self.bytes(of: kept)
            if s.buffered >= configuration.maxBufferedMessages || s.bufferedBytes >= configuration.maxBufferedBytes,
                s.machine.bufferFull()
            {
                s.stats.pauses += 1
                return (waiters, true, s.tracker.trackedPartitions)
            }
            return (waiters, false, [])
        }
        for w in waiters { w.finish() }
        logAnomalies(anomalies)
        if pauseNow {
            logger.debug("Kafka consumer buffer full: holding", metadata: ["kafka.partitions": "\(assigned.count)"])
        }
    }

    /// The fetched messages copied out of librdkafka's (destroyed here), errors reported instead.
    private func copyOut(
        _ buffer: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>, count: Int
    ) -> [KafkaConsumerMessage] {
        var messages: [KafkaConsumerMessage] = []
        messages.reserveCapacity(count)
        for i in 0..<count {
            guard let m = buffer[i] else { continue }
            defer { RDKafkaClient.destroyMessage(m) }
            let err = m.pointee.err
            if err != RD_KAFKA_RESP_ERR_NO_ERROR {
                consumerError(m, err)
                continue
            }
            guard let rkt = m.pointee.rkt else { continue }
            let name: String
            if let cached = topicNames[rkt] {
                name = cached
            } else {
                name = RDKafkaClient.topicName(of: m)
                topicNames[rkt] = name
            }
            messages.append(RDKafkaClient.copyMessage(m, topicName: name))
        }
        return messages
    }

    /// Offsets that jumped ahead or went back, logged as errors (never passed over silently).
    private func logAnomalies(_ anomalies: [(MessageRef, PartitionOffsetTracker.Reception)]) {
        for (ref, reception) in anomalies {
            switch reception {
            case .gap(let expected):
                logger.error(
                    "Kafka offset gap: messages skipped (lost upstream or compacted)",
                    metadata: [
                        "kafka.topic": "\(ref.topic)", "kafka.partition": "\(ref.partition)",
                        "kafka.expected_offset": "\(expected)", "kafka.received_offset": "\(ref.offset)",
                        "kafka.skipped": "\(ref.offset - expected)",
                    ])
            case .backwards(let expected):
                logger.error(
                    "Kafka offset went backwards: offset reset or seek; messages may be redelivered",
                    metadata: [
                        "kafka.topic": "\(ref.topic)", "kafka.partition": "\(ref.partition)",
                        "kafka.expected_offset": "\(expected)", "kafka.received_offset": "\(ref.offset)",
                    ])
            case .inOrder:
                break
            }
        }
    }

    private func consumerError(_ m: UnsafeMutablePointer<rd_kafka_message_t>, _ err: rd_kafka_resp_err_t) {
        let text =
            m.pointee.payload.map {
                String(decoding: UnsafeRawBufferPointer(start: $0, count: m.pointee.len), as: UTF8.self)
            } ?? ""
        let topic = m.pointee.rkt.map { _ in RDKafkaClient.topicName(of: m) } ?? ""
        if err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET {
            // auto.offset.reset=error (or no valid offset): data at the committed position is gone.
            state.withLock { $0.stats.offsetResets += 1 }
            logger.error(
                "Kafka offset reset: committed position not available, messages skipped",
                metadata: ["kafka.topic": "\(topic)", "kafka.partition": "\(m.pointee.partition)", "reason": "\(text)"])
        } else {
            logger.warning(
                "Kafka consumer error",
                metadata: [
                    "error": "\(KafkaError(err, "consume").name)", "kafka.topic": "\(topic)",
                    "kafka.partition": "\(m.pointee.partition)", "reason": "\(text)",
                ])
        }
    }

    /// How often a requested commit is tried while the group refuses it as rebalancing, and how far apart
    /// (the poll thread polls in between: that is what lets the rebalance finish).
    static let commitAttempts = 5
    static let commitRetryDelay: Duration = .milliseconds(100)

    /// The positions that moved since the last successful commit (`only`: of these partitions).
    private func positionsToCommit(only: Set<TopicPartition>? = nil) -> [TopicPartition: Int64] {
        state.withLock { s in
            s.tracker.commitPositions.filter { tp, pos in
                (only == nil || only!.contains(tp)) && s.lastCommitted[tp].map { $0 < pos } ?? true
            }
        }
    }

    /// One attempt to commit what moved since the last successful commit. Poll thread only; never
    /// sleeps. Nothing to commit is a success.
    private func attemptCommit(reason: String) -> Result<Void, KafkaError> {
        attemptCommit(positionsToCommit(), reason: reason)
    }

    private func attemptCommit(_ positions: [TopicPartition: Int64], reason: String) -> Result<Void, KafkaError> {
        guard !positions.isEmpty else { return .success(()) }
        switch client.commit(positions) {
        case .success:
            state.withLock { s in
                for (tp, pos) in positions { s.lastCommitted[tp] = max(pos, s.lastCommitted[tp] ?? pos) }
                s.lastCommitError = nil
            }
            logger.trace("Kafka offsets committed", metadata: ["reason": "\(reason)", "kafka.partitions": "\(positions.count)"])
            return .success(())
        case .failure(let error):
            return .failure(error)
        }
    }

    /// A commit that failed for good: counted, kept as the last error, and logged (a periodic one the
    /// group refused while rebalancing at debug: the next one carries its positions).
    private func noteCommitFailure(_ error: KafkaError, reason: String, attempts: Int) {
        state.withLock {
            $0.stats.commitFailures += 1
            $0.lastCommitError = error
        }
        logger.log(
            level: reason == "periodic" && error.isRebalanceInProgress ? .debug : .warning, "Kafka commit failed",
            metadata: ["reason": "\(reason)", "error": "\(error.message)", "attempts": "\(attempts)"])
    }

    /// One attempt, its failure noted: for the revoke and the close, which cannot wait for a retry (the
    /// group's rebalance waits for the revoke callback to return, so a retry from inside it could only
    /// be refused again; a close must end).
    @discardableResult
    private func commitOnce(_ positions: [TopicPartition: Int64], reason: String) -> Result<Void, KafkaError> {
        let result = attemptCommit(positions, reason: reason)
        if case .failure(let error) = result { noteCommitFailure(error, reason: reason, attempts: 1) }
        return result
    }

    /// Rebalance callback (poll thread, inside consume or close).
    func handleRebalance(_ event: rd_kafka_resp_err_t, _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) {
        let partitions = RDKafkaClient.read(list).map { $0.0 }
        if event == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS {
            assign(partitions, event, list)
        } else {
            revoke(partitions, event, list)
        }
    }

    /// Partitions assigned: tracked from their committed offsets, then applied.
    private func assign(
        _ partitions: [TopicPartition], _ event: rd_kafka_resp_err_t, _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    ) {
        // The committed offsets are where fetching starts: knowing them lets the tracker report a first
        // message above them as a gap (data dropped while nobody consumed).
        var committed: [TopicPartition: Int64?] = [:]
        // Closing: assigned only to be revoked again at once; no blocking lookup in between.
        if !state.withLock({ $0.machine.isClosing }) {
            do {
                committed = try client.committed(partitions, timeoutMs: 10_000)
            } catch {
                logger.warning("Kafka committed offsets unknown at assignment: no gap check at start", metadata: ["error": "\(error)"])
            }
        }
        state.withLock { s in
            for tp in partitions {
                let c = committed[tp] ?? nil
                s.tracker.startTracking(tp, committed: c)
                if let c { s.lastCommitted[tp] = c } else { s.lastCommitted[tp] = nil }
            }
        }
        do { try client.applyRebalance(event, list) } catch {
            logger.error("Kafka assign failed", metadata: ["error": "\(error)"])
        }
        logger.info(
            "Kafka partitions assigned",
            metadata: ["kafka.partitions": "\(partitions.map(\.description).joined(separator: ","))"])
    }

    /// Partitions revoked or lost: what was settled is committed (unless lost), the rest dropped for the
    /// next owner, and the partitions leave unpaused and unheld.
    private func revoke(
        _ partitions: [TopicPartition], _ event: rd_kafka_resp_err_t, _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    ) {
        let lost = client.assignmentLost || event != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
        // Stop tracking first: from here on, settling these partitions is refused, so what we commit is
        // exactly what the pipeline had settled, and the next owner starts from there.
        let (positions, uncommitted) = stopTrackingRevoked(partitions)
        if lost {
            state.withLock { $0.stats.settledButUncommittedAtRevoke += uncommitted }
            logger.warning(
                "Kafka partitions lost (not committing): their unsettled messages go to the next owner",
                metadata: ["kafka.partitions": "\(partitions.map(\.description).joined(separator: ","))"])
        } else if case .failure(let error) = commitOnce(positions, reason: "revoke") {
            state.withLock {
                $0.stats.revokeCommitFailures += 1
                $0.stats.settledButUncommittedAtRevoke += uncommitted
            }
            logger.warning(
                "Kafka commit on revoke failed: settled messages will be redelivered to the next owner",
                metadata: [
                    "error": "\(error)", "kafka.partitions": "\(positions.count)",
                    "kafka.settled_uncommitted": "\(uncommitted)",
                ])
        }
        unpauseRevoked(partitions)
        do { try client.applyRebalance(RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS, list) } catch {
            logger.error("Kafka unassign failed", metadata: ["error": "\(error)"])
        }
        logger.info(
            "Kafka partitions revoked",
            metadata: ["kafka.partitions": "\(partitions.map(\.description).joined(separator: ","))", "lost": "\(lost)"])
    }

    /// Stops tracking revoked partitions and drops their buffered messages. Returns the positions to
    /// commit (settled beyond the last commit) and how many settled messages that commit covers.
    private func stopTrackingRevoked(_ partitions: [TopicPartition]) -> (positions: [TopicPartition: Int64], uncommitted: Int64) {
        state.withLock { s -> ([TopicPartition: Int64], Int64) in
            var positions: [TopicPartition: Int64] = [:]
            var uncommitted: Int64 = 0
            let revoked = Set(partitions)
            for tp in partitions {
                if let pos = s.tracker.stopTracking(tp), s.lastCommitted[tp].map({ $0 < pos }) ?? true {
                    positions[tp] = pos
                    uncommitted += pos - (s.lastCommitted[tp] ?? pos)
                }
                s.lastCommitted[tp] = nil
            }
            var dropped = 0
            var droppedBytes = 0
            s.buffer = s.buffer.compactMap { batch in
                let kept = batch.filter { !revoked.contains($0.topicPartition) }
                dropped += batch.count - kept.count
                droppedBytes += Self.bytes(of: batch) - Self.bytes(of: kept)
                return kept.isEmpty ? nil : kept
            }
            s.buffered -= dropped
            s.bufferedBytes -= droppedBytes
            s.stats.droppedOnRevoke += dropped
            return (positions, uncommitted)
        }
    }

    /// A held partition leaves unpaused and unheld: if it comes back, it is read from its committed
    /// offset like any assignment (and held again if its jobs still cannot be taken).
    private func unpauseRevoked(_ partitions: [TopicPartition]) {
        let unpause = state.withLock { s -> [TopicPartition] in
            let revoked = Set(partitions)
            let unpause = s.paused.intersection(revoked)
            s.paused.subtract(revoked)
            s.held.subtract(revoked)
            return Array(unpause)
        }
        if !unpause.isEmpty, let error = client.resume(unpause) {
            logger.warning("Kafka resume of revoked partitions failed", metadata: ["error": "\(error)"])
        }
    }

    /// The close (`ConsumerStateMachine.State.closing`), on the poll thread or, when `run()` never ran, on
    /// a thread of its own. From its start nothing in it (its own commit, the rebalance callback
    /// librdkafka runs inside `consumer_close`) blocks or sleeps. librdkafka asserts
    /// (`rd_kafka_cgrp_terminated: !rd_kafka_assignment_in_progress`, seen with two members of one group
    /// stopping together) when the group terminates while an assignment it handed to the callback is
    /// still being applied; a callback that waited on a network call or slept through commit retries
    /// there left that window open.
    private func shutdown() {
        // One attempt: a group rebalancing now refuses it, and the revoke inside `consumer_close` commits
        // the same positions anyway (once, without sleeping: see above).
        commitOnce(positionsToCommit(), reason: "close")
        // Leaves the group; the final revoke goes through handleRebalance (commits anything settled since).
        let err = client.consumerClose()
        if err != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("Kafka consumer close", metadata: ["error": "\(KafkaError(err, "close").message)"])
        }
        // See `KafkaConsumer.finalCommitError`. A commit refused because the group is rebalancing (another
        // member joining or leaving as this one stops) is the group's normal hand-over, not a failure:
        // the other members get those messages and dedup keeps them from devices.
        let handOver: Set<Int32> = [
            RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS.rawValue, RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION.rawValue,
            RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID.rawValue,
        ]
        state.withLock { s in
            s.finalCommitError = s.lastCommitError.flatMap { handOver.contains($0.code) ? nil : $0 }
        }
        if let queue { client.destroyQueue(queue) }
        queue = nil
        client.destroy()
        client.context.rebalanceHandler = nil
        let (waiters, closers, requests) = state.withLock { s in
            s.machine.closed()
            defer {
                s.waiters = []
                s.closeWaiters = []
                s.commitRequests = []
            }
            return (s.waiters, s.closeWaiters, s.commitRequests)
        }
        for w in waiters { w.finish() }
        for r in requests { r.fail(KafkaError.closed) }
        for c in closers { c.resume() }
    }
}

/// A `commit()` call's answer: the poll thread's result of the commit it asked for.
typealias CommitReply = AsyncStream<Result<Void, any Error>>.Continuation

extension AsyncStream<Result<Void, any Error>>.Continuation {
    fileprivate func succeed() {
        yield(.success(()))
        finish()
    }

    fileprivate func fail(_ error: any Error) {
        yield(.failure(error))
        finish()
    }
}
