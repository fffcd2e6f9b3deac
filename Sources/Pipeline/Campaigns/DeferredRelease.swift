import Foundation
import Kafka
import Logging
import Redis

/// Moves deferred jobs (a paused campaign's, design §2.11) back to the jobs topic once their campaign may
/// send again: every ``interval``, for each campaign in `{<p>}:deferred` that this process's control copy
/// says is neither paused nor held for later, the process holding the campaign's release lock publishes
/// its due jobs again in chunks — produce, await delivery, then remove them from Redis. At least once: a
/// crash between the delivery and the removal publishes those jobs twice, and dedup (§2.2) absorbs it.
struct DeferredRelease: Sendable {
    static let interval: Duration = .milliseconds(250)
    /// Jobs per produce-and-remove round.
    static let chunk = 1000
    /// How long a release lock lives without renewal (renewed before every chunk).
    static let lockLease: Duration = .seconds(60)

    let store: PipelineStore
    let producer: KafkaProducer
    let topic: String
    let controls: CampaignControls
    /// Signs a released job that already holds its pacing slot (design §2.13): the gate admits it without
    /// taking another slot, and admits no other message so.
    let releases: ReleaseSignature
    let logger: Logger

    /// The deferral (held jobs, `{<p>}:pace:<name>`) of an app's `max_rate`: `@app:<bundle id>`.
    static func appDeferral(_ app: String) -> String { "@app:" + app }

    func run() async {
        var lastWarning: ContinuousClock.Instant?
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: Self.interval)
                try await releaseDue()
            } catch is CancellationError {
                return
            } catch {
                let now = ContinuousClock.now
                if lastWarning.map({ now - $0 > .seconds(10) }) ?? true {
                    lastWarning = now
                    logger.warning("deferred jobs not released this round; trying again", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    /// One round over every campaign with deferred jobs.
    func releaseDue() async throws {
        let campaigns = try await store.deferredCampaigns()
        if campaigns.isEmpty { return }
        let control = controls.snapshot ?? [:]
        for campaign in campaigns {
            // A cancelled campaign's held jobs are released too: the gate settles them `cancelled`.
            if let state = control[campaign], state.paused && !state.cancelled { continue }
            guard try await store.lockRelease(campaign: campaign, lease: Self.lockLease) else { continue }
            var released = 0
            do {
                while !Task.isCancelled {
                    let due = try await store.dueDeferred(
                        campaign: campaign, nowMs: Int64(Date().timeIntervalSince1970 * 1000), limit: Self.chunk)
                    if due.isEmpty {
                        // Drop the campaign from the index once it holds nothing (the same script checks).
                        try await store.removeDeferred(campaign: campaign, messages: [])
                        break
                    }
                    // Paused again meanwhile: stop; the rest waits for the next resume.
                    if let state = controls.snapshot?[campaign], state.paused && !state.cancelled { break }
                    try await producer.sendBatch(
                        due.map { held in
                            let m = DeferredMessage.parse(held.stored)
                            return KafkaProducerMessage(
                                topic: topic, key: m.key, value: m.value,
                                headers: m.slotted ? [releases.header(for: DeferredMessage.message(of: held.stored))] : [])
                        })
                    try await store.removeDeferred(campaign: campaign, messages: due)
                    released += due.count
                    _ = try await store.lockRelease(campaign: campaign, lease: Self.lockLease)
                }
            } catch {
                try? await store.unlockRelease(campaign: campaign)
                throw error
            }
            try await store.unlockRelease(campaign: campaign)
            if released > 0 {
                logger.info("deferred jobs published again", metadata: ["campaign": "\(campaign)", "jobs": "\(released)"])
            }
        }
    }
}
