import CRdKafka
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Producer configuration. librdkafka properties pass through unchanged (`properties` wins over the
/// defaults below), so production `security.protocol`, `sasl.*`, `ssl.*`, `acks`, `linger.ms`,
/// `compression.type`… need no code.
public struct KafkaProducerConfiguration: Sendable {
    public var bootstrapServers: String
    /// Any librdkafka producer/global property (see librdkafka's CONFIGURATION.md).
    public var properties: [String: String]
    /// On `close()`, how long to wait for outstanding deliveries before failing them (`_PURGE_QUEUE`).
    public var closeTimeout: Duration
    /// Whether `run()` closes the producer (as `close()` does) when the service group shuts down
    /// gracefully. False by default: the pipeline closes its producers itself, after the last dead letter
    /// or outcome of its stop (`docs/design.md §1.3`).
    public var stopsOnGracefulShutdown = false

    public init(bootstrapServers: String, properties: [String: String] = [:], closeTimeout: Duration = .seconds(30)) {
        self.bootstrapServers = bootstrapServers
        self.properties = properties
        self.closeTimeout = closeTimeout
    }

    var rdkafkaProperties: [String: String] {
        var p: [String: String] = [
            "bootstrap.servers": bootstrapServers,
            "client.id": "apns-pipeline",
            // Every acknowledgement from all in-sync replicas: a delivered job is a durable job.
            "acks": "all",
            // Small batching delay: the campaign publisher's throughput comes from batching.
            "linger.ms": "5",
        ]
        p.merge(properties) { _, override in override }
        return p
    }
}

/// Counts deliveries of a set of messages (one `sendBatch` call, or everything `send` enqueued
/// between two `flush()` calls) and wakes whoever waits for all of them.
///
/// `@unchecked Sendable`: all state is behind `lock`; delivery reports arrive on the producer's poll
/// thread, waiters are async tasks.
final class DeliveryGroup: @unchecked Sendable {
    private struct State {
        var pending = 0
        var failures: [KafkaDeliveryFailure] = []
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    /// Before each enqueue attempt (so a delivery report can never precede its count).
    func willEnqueue() { state.withLock { $0.pending += 1 } }

    /// The enqueue attempt failed (no delivery report will come); `failure` nil = will be retried.
    func enqueueFailed(_ failure: KafkaDeliveryFailure?) {
        finish(failure)
    }

    func delivered(failure: KafkaDeliveryFailure?) { finish(failure) }

    private func finish(_ failure: KafkaDeliveryFailure?) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.pending -= 1
            if let failure { s.failures.append(failure) }
            guard s.pending == 0, !s.waiters.isEmpty else { return [] }
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }

    /// Returns when nothing of this group is pending.
    func drained() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.pending == 0 { return true }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    func takeFailures() -> [KafkaDeliveryFailure] {
        state.withLock { s in
            defer { s.failures = [] }
            return s.failures
        }
    }
}

/// A Kafka producer with checked delivery.
///
/// - `sendBatch(_:)` enqueues a batch and returns when every message of it is delivered; it throws
///   `KafkaDeliveryError` listing the ones that were not. The campaign publisher and the dead-letter
///   path use it.
/// - `send(...)` only enqueues; `flush()` waits for everything `send` enqueued and throws
///   `KafkaDeliveryError` for failures since the previous `flush()`.
///
/// Both wait (asynchronously) when librdkafka's local queue is full (`queue.buffering.max.*`) instead of
/// dropping: that is the back-pressure. Delivery reports are served by a thread of the producer's own,
/// never on Swift's cooperative pool.
///
/// A swift-service-lifecycle `Service`: `init` makes the librdkafka handle and checks the configuration
/// (those errors are thrown there); `run()` serves delivery reports, on a thread it starts and waits for,
/// until `close()` (or the cancellation of `run()`, or the graceful shutdown when
/// ``KafkaProducerConfiguration/stopsOnGracefulShutdown``) has delivered or failed what is queued and
/// destroyed the handle. Messages may be enqueued before `run()`; their deliveries are reported once it
/// runs. ``started(configuration:logger:)`` runs it in a task of its own.
public final class KafkaProducer: Service, Sendable {
    private let core: ProducerCore
    private let stopsOnGracefulShutdown: Bool

    public init(configuration: KafkaProducerConfiguration, logger: Logger) throws {
        let client = try RDKafkaClient.make(
            kind: .producer, properties: configuration.rdkafkaProperties, logger: logger)
        core = ProducerCore(client: client, logger: logger, closeTimeout: configuration.closeTimeout)
        stopsOnGracefulShutdown = configuration.stopsOnGracefulShutdown
    }

    /// A producer whose `run()` runs in a task of its own until `close()`, or until the producer is
    /// released (that task holds the producer's state, not the producer): for tools and tests with no
    /// task group to run it in.
    public static func started(configuration: KafkaProducerConfiguration, logger: Logger) throws -> KafkaProducer {
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        let core = producer.core
        Task { try? await core.run(stopsOnGracefulShutdown: false) }
        return producer
    }

    deinit {
        // Released while `run()` is not running (it holds `self`): never started, or `started(…)`'s.
        core.requestStop()
    }

    /// Serves delivery reports until the producer is closed: by `close()`, by the cancellation of this
    /// task, or by the graceful shutdown if ``KafkaProducerConfiguration/stopsOnGracefulShutdown``. Each
    /// of them delivers what is queued (up to `closeTimeout`, then fails the rest); `run()` returns when
    /// the handle is destroyed (at once if the producer was closed before). Throws if it is already running.
    public func run() async throws {
        try await core.run(stopsOnGracefulShutdown: stopsOnGracefulShutdown)
    }

    /// Enqueues one message (waiting while the local queue is full). Delivery failures surface from the
    /// next `flush()`. Throws at once if the message is refused outright (e.g. too large) or when closed.
    public func send(topic: String, partition: Int32? = nil, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = []) async throws {
        let message = KafkaProducerMessage(topic: topic, partition: partition, key: key, value: value, headers: headers)
        if let failure = try await core.enqueue(message, group: core.sharedGroup) {
            throw KafkaDeliveryError(failures: [failure])
        }
    }

    /// Waits until everything `send` enqueued so far is delivered or failed; throws the failures.
    public func flush() async throws {
        await core.sharedGroup.drained()
        let failures = core.sharedGroup.takeFailures()
        if !failures.isEmpty { throw KafkaDeliveryError(failures: failures) }
    }

    /// Sends `messages` and returns when all are delivered (acknowledged per `acks`). Messages refused or
    /// failed are all reported in the thrown `KafkaDeliveryError`; the others were delivered.
    public func sendBatch(_ messages: [KafkaProducerMessage]) async throws {
        let group = DeliveryGroup()
        for message in messages {
            // A refused message is recorded in the group's failures by `enqueue` itself (returned too,
            // for `send`): collecting the returned one as well would report it twice.
            _ = try await core.enqueue(message, group: group)
        }
        await group.drained()
        let failures = group.takeFailures()
        if !failures.isEmpty { throw KafkaDeliveryError(failures: failures) }
    }

    /// Flushes (up to `closeTimeout`, failing what is left), stops the poll thread, destroys the handle,
    /// and so ends `run()`. Before `run()`, that happens on a thread of the close's own.
    public func close() async {
        await core.close()
    }
}

/// The producer's state and poll thread.
///
/// `@unchecked Sendable`: mutable state is behind `state`; `client` is thread-safe (see RDKafkaClient).
final class ProducerCore: @unchecked Sendable {
    let client: RDKafkaClient
    let sharedGroup = DeliveryGroup()
    private let logger: Logger
    private let closeTimeout: Duration

    private struct State {
        var phase = Phase.initializing
        /// Set by a stop (`close()`, the cancellation of `run()`, a release): new enqueues are refused.
        var stopping = false
        var destroyed = false
        /// Tasks inside `produce` right now: the handle may not be destroyed under them.
        var activeEnqueuers = 0
        /// Sends waiting for room in librdkafka's queue: each finished to wake it (it then tries again).
        var spaceWaiters: [AsyncStream<Void>.Continuation] = []
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    init(client: RDKafkaClient, logger: Logger, closeTimeout: Duration) {
        self.client = client
        self.logger = logger
        self.closeTimeout = closeTimeout
    }

    /// The producer's lifecycle: `init` → `run()` (the poll thread) → a stop → the handle destroyed.
    /// (Simpler than the consumer's, ``ConsumerStateMachine``: no hold, no rebalance.)
    enum Phase {
        /// `run()` not called yet: delivery reports wait in librdkafka's queue.
        case initializing
        /// The poll thread serves delivery reports; a stop makes it drain and destroy.
        case running
        /// Stopped before `run()`: a thread of the stop's own drains and destroys; `run()` returns once it did.
        case closedWithoutRun
    }

    /// `KafkaProducer.run()`: starts the poll thread and returns when it ended (the handle destroyed).
    func run(stopsOnGracefulShutdown: Bool) async throws {
        let start = try state.withLock { s -> Bool in
            switch s.phase {
            case .initializing:
                s.phase = .running
                return true
            case .running:
                throw KafkaError(kind: .configuration, message: "KafkaProducer.run() called while it runs")
            case .closedWithoutRun:
                return false
            }
        }
        guard start else { return await close() }
        await runPollThread(
            named: "kafka-producer-poll", stopsOnGracefulShutdown: stopsOnGracefulShutdown, requestStop: { self.requestStop() },
            loop: { self.pollLoop() })
    }

    /// Enqueues, waiting while the queue is full. Returns a failure if librdkafka refuses the message, or
    /// if the task is cancelled while waiting for room (a message larger than the whole local queue,
    /// `queue.buffering.max.kbytes`, never finds room: without this a stop would wait for it forever).
    func enqueue(_ message: KafkaProducerMessage, group: DeliveryGroup) async throws -> KafkaDeliveryFailure? {
        var waitedForRoom = false
        while true {
            // Only a wait for room ends on cancellation: a message that fits is enqueued as before.
            if waitedForRoom && Task.isCancelled {
                let failure = KafkaDeliveryFailure(
                    topic: message.topic, partition: message.partition ?? -1, key: message.key,
                    value: message.value, error: KafkaError(RD_KAFKA_RESP_ERR__QUEUE_FULL, "produce (cancelled waiting for room)"))
                group.willEnqueue()
                group.enqueueFailed(failure)
                return failure
            }
            let admitted = state.withLock { s -> Bool in
                if s.stopping { return false }
                s.activeEnqueuers += 1
                return true
            }
            guard admitted else { throw KafkaError.closed }
            group.willEnqueue()
            let opaque = Unmanaged.passRetained(group).toOpaque()
            let err = client.produce(message, opaque: opaque)
            state.withLock { $0.activeEnqueuers -= 1 }
            if err == RD_KAFKA_RESP_ERR_NO_ERROR { return nil }
            // Not enqueued: no delivery report will release the retain taken for it.
            Unmanaged<DeliveryGroup>.fromOpaque(opaque).release()
            if err == RD_KAFKA_RESP_ERR__QUEUE_FULL {
                group.enqueueFailed(nil)
                // Back-pressure: wait until the poll thread has served delivery reports, then retry.
                await waitForSpace()
                waitedForRoom = true
                continue
            }
            let failure = KafkaDeliveryFailure(
                topic: message.topic, partition: message.partition ?? -1, key: message.key,
                value: message.value, error: KafkaError(err, "produce"))
            group.enqueueFailed(failure)
            return failure
        }
    }

    private func waitForSpace() async {
        // Ends when the poll thread has served delivery reports (or a stop began), or when the caller is
        // cancelled (it then retries, and sees the stop or its cancellation).
        let (room, waiter) = AsyncStream.makeStream(of: Void.self)
        let now = state.withLock { s -> Bool in
            if s.stopping || Task.isCancelled { return true }
            s.spaceWaiters.append(waiter)
            return false
        }
        if now { return }
        for await _ in room {}
    }

    private func resumeSpaceWaiters() {
        let waiters = state.withLock { s -> [AsyncStream<Void>.Continuation] in
            defer { s.spaceWaiters = [] }
            return s.spaceWaiters
        }
        for w in waiters { w.finish() }
    }

    /// A stop: the poll thread drains and destroys at its next step (within 100 ms); with no poll
    /// thread, a thread of its own does.
    func requestStop() {
        let closeHere = state.withLock { s -> Bool in
            s.stopping = true
            guard s.phase == .initializing else { return false }
            s.phase = .closedWithoutRun
            return true
        }
        if closeHere {
            // `rd_kafka_flush` blocks (up to `closeTimeout`): never on the caller's thread.
            let thread = Thread { [self] in self.drainAndDestroy() }
            thread.name = "kafka-producer-close"
            thread.start()
        }
    }

    func close() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done = state.withLock { s -> Bool in
                if s.destroyed { return true }
                s.closeWaiters.append(c)
                return false
            }
            requestStop()
            if done { c.resume() }
        }
    }

    /// The poll thread: serves delivery reports until asked to stop, then drains and destroys.
    private func pollLoop() {
        while !state.withLock({ $0.stopping }) {
            // Returns as soon as it served something, so senders blocked on a full queue wake promptly;
            // the 100 ms cap bounds how long a stop request waits.
            client.poll(timeoutMs: 100)
            resumeSpaceWaiters()
        }
        drainAndDestroy()
    }

    /// Delivers what is queued (up to `closeTimeout`, then fails the rest) and destroys the handle: at
    /// the end of the poll loop, or on a thread of its own when stopped before `run()`.
    private func drainAndDestroy() {
        // Stopping: let in-progress enqueues finish (new ones are refused), then deliver what is queued.
        while state.withLock({ $0.activeEnqueuers }) > 0 {
            client.poll(timeoutMs: 1)
            resumeSpaceWaiters()
        }
        resumeSpaceWaiters()
        let ms = Int32(clamping: closeTimeout.components.seconds * 1000 + closeTimeout.components.attoseconds / 1_000_000_000_000_000)
        if client.flush(timeoutMs: ms) != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.error(
                "Kafka producer closing with undelivered messages: failing them",
                metadata: ["kafka.outstanding": "\(client.outQueueLength)"])
            // Purged messages get delivery reports with _PURGE_* errors, so every waiter learns of them.
            client.purgeAll()
            _ = client.flush(timeoutMs: 5000)
        }
        client.destroy()
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.destroyed = true
            defer { s.closeWaiters = [] }
            return s.closeWaiters
        }
        for w in waiters { w.resume() }
    }
}
