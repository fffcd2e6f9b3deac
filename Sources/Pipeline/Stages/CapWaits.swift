import Foundation
import Kafka
import Logging
import Redis
import Synchronization

/// Jobs the held slots had no room for (``GateDecision/heldFull``, design §2.11): a stage of a lane that
/// keeps them, unsettled, holds their Kafka partitions (the consumer fetches nothing more of them), and
/// gates them again once there is room for them in Redis, or once their campaign's control state changed
/// (resumed, cancelled, its pace lifted). A partition is released when none of its jobs waits here any
/// more. What waits here holds its place in the in-flight budget; a stop leaves it unsettled (Kafka
/// redelivers it).
final class CapWaits: Sendable {
    /// How often the waiting jobs are checked against the held slots.
    static let interval: Duration = .milliseconds(500)
    /// At most one warning per this while jobs wait.
    static let warningInterval: Duration = .seconds(10)

    private struct State {
        var batches: [(batch: DecodedBatch, controlVersion: Int64)] = []
        /// Per partition, how many of its messages wait here (or are being gated again).
        var waiting: [TopicPartition: Int] = [:]
        var jobs = 0
        var lastWarning: ContinuousClock.Instant?
    }

    private let consumer: KafkaConsumer
    private let store: PipelineStore
    private let controls: CampaignControls
    private let logger: Logger
    private let state = Mutex(State())

    init(consumer: KafkaConsumer, store: PipelineStore, controls: CampaignControls, logger: Logger) {
        self.consumer = consumer
        self.store = store
        self.controls = controls
        self.logger = logger
    }

    /// Jobs waiting here now (a gauge).
    var waitingJobs: Int { state.withLock { $0.jobs } }
    /// Partitions held for them now.
    var partitionsHeld: Int { state.withLock { $0.waiting.count } }

    /// Keeps `batch` (jobs just found `capped`) and holds its partitions (again, if a rebalance took them
    /// away and gave them back meanwhile: holding a held partition changes nothing).
    func add(_ batch: DecodedBatch) {
        let version = controls.appliedVersion
        let partitions = Set(batch.messages.map(\.topicPartition))
        let warn = state.withLock { s -> Bool in
            s.batches.append((batch, version))
            s.jobs += batch.jobs.count
            for m in batch.messages { s.waiting[m.topicPartition, default: 0] += 1 }
            let now = ContinuousClock.now
            let warn = s.lastWarning.map { now - $0 >= Self.warningInterval } ?? true
            if warn { s.lastWarning = now }
            return warn
        }
        consumer.hold(partitions)
        if warn {
            let names = Set(batch.jobs.map { name(of: $0) }).sorted()
            logger.warning(
                "held jobs at their byte cap: these campaigns' jobs wait in Kafka, their partitions are held (see operations §7)",
                metadata: [
                    "campaigns": "\(names.joined(separator: " "))", "jobs_waiting": "\(waitingJobs)",
                    "partitions_held": "\(partitionsHeld)",
                ])
        }
    }

    /// `batch` came from here and has been gated again: its jobs wait no more (those capped again were
    /// added again before this); partitions none of whose jobs wait any more are released.
    func retried(_ batch: DecodedBatch) {
        let released = state.withLock { s -> Set<TopicPartition> in
            var released = Set<TopicPartition>()
            for m in batch.messages {
                let tp = m.topicPartition
                let left = s.waiting[tp, default: 1] - 1
                if left <= 0 {
                    s.waiting[tp] = nil
                    released.insert(tp)
                } else {
                    s.waiting[tp] = left
                }
            }
            return released
        }
        if !released.isEmpty { consumer.release(released) }
    }

    /// The name a job is held under: its campaign when that has control state, else its app's `max_rate`.
    private func name(of job: some GatedJob) -> String {
        if let campaign = job.campaign, controls.snapshot?[campaign] != nil { return campaign }
        return DeferredRelease.appDeferral(job.app)
    }

    /// Every ``interval``, puts the batches that may go on back (`put`: into the lane's hand-off), in the
    /// order they came. Ends when cancelled (what waits is left unsettled).
    func run(into put: (DecodedBatch) async -> Void) async {
        var lastError: ContinuousClock.Instant?
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: Self.interval)
            } catch {
                return
            }
            let waiting = state.withLock { $0.batches }
            if waiting.isEmpty { continue }
            do {
                let ready = try await readyBatches(waiting)
                if ready.isEmpty { continue }
                let taken = state.withLock { s -> [DecodedBatch] in
                    var taken: [DecodedBatch] = []
                    var kept: [(batch: DecodedBatch, controlVersion: Int64)] = []
                    for (i, entry) in s.batches.enumerated() {
                        if i < waiting.count && ready.contains(i) {
                            taken.append(entry.batch)
                            s.jobs -= entry.batch.jobs.count
                        } else {
                            kept.append(entry)
                        }
                    }
                    s.batches = kept
                    return taken
                }
                for var batch in taken {
                    batch.fromCapWaits = true
                    await put(batch)
                }
            } catch {
                let now = ContinuousClock.now
                if lastError.map({ now - $0 > Self.warningInterval }) ?? true {
                    lastError = now
                    logger.warning("held slots not read for jobs waiting at the cap; trying again", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    /// The indices of the batches to gate again: those parked before the last control change, and those
    /// with a job that would find room now.
    private func readyBatches(_ batches: [(batch: DecodedBatch, controlVersion: Int64)]) async throws -> Set<Int> {
        let version = controls.appliedVersion
        var ready = Set<Int>()
        var asked: [HeldRoomRequest] = []
        var owner: [Int] = []
        for (i, entry) in batches.enumerated() {
            if entry.controlVersion != version {
                ready.insert(i)
                continue
            }
            for (job, m) in zip(entry.batch.jobs, entry.batch.jobMessages) {
                let message = entry.batch.messages[m]
                asked.append(HeldRoomRequest(campaign: name(of: job), key: message.key, value: message.value))
                owner.append(i)
            }
        }
        if !asked.isEmpty {
            for (room, i) in zip(try await store.heldRoom(asked), owner) where room { ready.insert(i) }
        }
        return ready
    }
}
