import Feedback
import Foundation
import Kafka
import Logging
import NIOCore
import Redis
import Sender

/// What runs beside the lanes for the process's whole life: its heartbeat, the shards' status in Redis,
/// the metrics' gauges, the registrations topic and the feedback service. `run` until cancelled.
struct Housekeeping: Sendable {
    let configuration: PipelineConfiguration
    /// The heartbeat's and shard status's store (the settler's connection).
    let store: PipelineStore
    let heartbeat: OwnerHeartbeat
    /// The registrations' and the feedback's store (the gate's first connection).
    let gateStore: PipelineStore
    let transports: [any NotificationTransport]
    let consumer: KafkaConsumer
    let budget: InFlightBudget
    let deadLetter: DeadLetter
    /// The topics whose failing writes the gauges show.
    let sinks: [SinkHealth]
    let group: any EventLoopGroup
    let metrics: PipelineMetrics?
    /// The lanes' jobs waiting at the held-bytes cap, and their consumers' held partitions.
    let capWaits: @Sendable () -> [CapWaits]
    let logger: Logger

    static let metricsSampleInterval: Duration = .seconds(1)
    /// Held jobs are read from Redis this often for their gauges (a read of every held slot).
    static let heldSampleInterval: Duration = .seconds(5)
    /// `host pid` on the heartbeat key, so an operator can tell which process holds a lease.
    static let ownerDescription = "\(ProcessInfo.processInfo.hostName) pid \(ProcessInfo.processInfo.processIdentifier)"

    /// The heartbeat, from the first beat (before the first lease is taken), and the others; a sidecar that
    /// fails is logged and the others go on (none of them holds a job).
    func run() async {
        let c = configuration
        await withDiscardingTaskGroup { tasks in
            tasks.addTask { await beatHeartbeat() }
            if let topic = c.kafka.registrationsTopic {
                tasks.addTask {
                    await logFailure("registrations") {
                        try await RegistrationsStage(
                            bootstrap: try c.kafka.resolvedBootstrapServers(), configuration: c, topic: topic, store: gateStore,
                            deadLetter: deadLetter, logger: logger
                        ).run()
                    }
                }
            }
            if c.feedbackIntervalMinutes > 0, c.apps.contains(where: { $0.transport.capabilities.hasFeedbackService }) {
                tasks.addTask { await logFailure("feedback") { await feedbackSchedule() } }
            }
            tasks.addTask { await logFailure("shard status") { try await publishShardStatus() } }
            if let metrics {
                tasks.addTask { await logFailure("gauges") { try await sampleGauges(metrics) } }
            }
        }
    }

    private func logFailure(_ name: String, _ body: () async throws -> Void) async {
        do {
            try await body()
        } catch is CancellationError {
        } catch {
            logger.error("\(name) stopped", metadata: ["error": "\(error)"])
        }
    }

    /// Refreshes the heartbeat four times per lifetime until cancelled. A refresh that fails is logged and
    /// retried at the next tick; if Redis stays away longer than the heartbeat lives, other processes may
    /// take this one's leases over (and count what they resend), which is why it beats this often.
    private func beatHeartbeat() async {
        let interval = store.configuration.ownerHeartbeat / 4
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            if Task.isCancelled { break }
            do {
                if try await heartbeat.refresh(store: store) {
                    logger.warning(
                        """
                        the heartbeat had lapsed (Redis unreachable longer than redis.owner_heartbeat_s): other \
                        processes may have taken this process's jobs over; what it had gated and not yet written \
                        is written and counted ambiguous (possible duplicates). If Redis is often that slow, \
                        raise redis.owner_heartbeat_s
                        """,
                        metadata: ["owner": "\(store.configuration.leaseOwner)", "heartbeat": "\(heartbeat.value)"])
                }
            } catch {
                logger.warning(
                    "heartbeat not refreshed: if it lapses, other processes take over this one's leases",
                    metadata: ["owner": "\(store.configuration.leaseOwner)", "error": "\(error)"])
            }
        }
    }

    /// Writes each shard's state to `apns:shard:<app>:<n>` every few seconds, for dashboards.
    private func publishShardStatus() async throws {
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

    /// The gauges: in-flight jobs, every connection's state and buffers, the consumer's assignment and lag,
    /// how long each sink's writes have been failing.
    private func sampleGauges(_ metrics: PipelineMetrics) async throws {
        var nextHeldSample = ContinuousClock.now
        // Each transport's kind, which names its connections' gauges: its app's (one transport per app).
        let kinds = Dictionary(configuration.apps.map { ($0.bundleID, $0.transport.capabilities) }, uniquingKeysWith: { a, _ in a })
        while !Task.isCancelled {
            metrics.inFlight(budget.inFlight)
            let waits = capWaits()
            metrics.heldCap(
                waiting: waits.reduce(0) { $0 + $1.waitingJobs },
                partitions: waits.reduce(0) { $0 + $1.partitionsHeld })
            if ContinuousClock.now >= nextHeldSample {
                nextHeldSample = ContinuousClock.now + Self.heldSampleInterval
                // Cluster-wide, from Redis; a failed read keeps the last values (logged by nobody: the
                // gate's own calls report a Redis that is away).
                if let usage = try? await store.heldUsage(campaigns: try await store.deferredCampaigns()) {
                    metrics.held(jobs: usage.values.reduce(0) { $0 + $1.jobs }, bytes: usage.values.reduce(0) { $0 + $1.bytes })
                }
            }
            var all: [(transport: any TransportConfiguration.Type, statistics: [ConnectionStatistics])] = []
            for t in transports {
                if let kind = kinds[t.app] { all.append((kind, await t.statistics())) }
            }
            metrics.connections(all)
            metrics.consumer(assigned: consumer.statistics.assignedPartitions.count, lag: consumer.consumerLag)
            let now = ContinuousClock.now
            metrics.sinks(sinks.map { (sink: $0.sink.rawValue, topic: $0.topic, failingFor: $0.failingFor(now: now)) })
            try await Task.sleep(for: Self.metricsSampleInterval)
        }
    }

    /// Polls every app's feedback service at start and then every `feedback.interval_minutes`.
    private func feedbackSchedule() async {
        let c = configuration
        // Binary apps only: Apple's feedback service belongs to the binary interface (HTTP/2's 410
        // answers replace it).
        let apps = c.apps.compactMap { a -> FeedbackApp? in
            guard a.transport.capabilities.hasFeedbackService, let credentials = c.credentials(for: a) else { return nil }
            let address = a.feedbackAddress ?? c.gateway.feedbackAddress
            return FeedbackApp(
                credentials: credentials,
                endpoint: FeedbackEndpoint(host: address.host, port: address.port, serverHostname: c.gateway.serverHostname))
        }
        let poller = FeedbackPoller(store: gateStore, eventLoopGroup: group, logger: logger)
        await FeedbackSchedule(
            apps: apps, poller: poller, interval: .seconds(Int64(c.feedbackIntervalMinutes * 60)), logger: logger
        ).run()
    }
}
