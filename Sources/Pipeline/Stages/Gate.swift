import Foundation
import Jobs
import Kafka
import Redis
import Sender

/// The gate: the whole batch's decisions in one Redis round trip (dedup, suppressions, leases), after
/// campaign control and pacing have held back what may not be sent yet (design §2.10–§2.13).
struct Gate: Sendable {
    /// Campaign control (cancel, pause, …) as this process last read it from Redis.
    let controls: CampaignControls
    /// `apps[].max_rate`, by bundle id (empty: no app is paced, and the gate never looks).
    let appRates: [String: Int]
    /// What a job released at its pacing slot carries (design §2.13): only such a job skips the pace.
    let releases: ReleaseSignature

    init(controls: CampaignControls, configuration: PipelineConfiguration, releases: ReleaseSignature) {
        self.controls = controls
        self.releases = releases
        appRates = Dictionary(uniqueKeysWithValues: configuration.apps.compactMap { app in app.maxRate.map { (app.bundleID, $0) } })
    }

    /// The gate's answer for a batch: the decision for each job, in order, and the hashes its call made
    /// of each job it asked Redis about (nil for the jobs decided before the call), which the send
    /// stage puts on their notifications for the settle.
    struct Result: Sendable {
        var decisions: [GateDecision]
        var recordHashes: [RecordHashes?]
    }

    /// The decisions for the jobs of `d`; `call` names the leases it takes.
    func decide(_ d: DecodedBatch, call: String, store: PipelineStore) async throws -> Result {
        if d.jobs.isEmpty { return Result(decisions: [], recordHashes: []) }
        // Campaign control (design §2.10): one atomic load per batch while no campaign has any.
        var decided: [Int: GateDecision] = [:]
        // Jobs of a cancelled campaign: gated like the others, so that one accepted before the cancel
        // settles `deduped` (a redelivery after a rebalance), not `cancelled` as well; the others are not
        // sent (design §2.10).
        var cancelled = Set<Int>()
        let snapshot = controls.snapshot
        if snapshot != nil || !appRates.isEmpty {
            let control = snapshot ?? [:]
            // Jobs of a paused, scheduled or paced campaign are held in Redis (one deferral for the batch)
            // and settle `deferred`: no lease, no place in the in-flight budget, no partition held up (design
            // §2.11–§2.13). A paced campaign's jobs whose slot is due now are admitted; those the held
            // slots have no room for are `capped`: kept, unsettled, until there is room.
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
                } else if releases.verifies(message) {
                    continue  // released by `run` at its pacing slot: admitted without taking another
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
                let answers = try await store.deferJobs(deferrals, nowMs: nowMs)
                for (k, jobs) in indices.enumerated() {
                    for (position, index) in jobs.enumerated() {
                        switch answers[k][position] {
                        case .admitted: break
                        case .held: decided[index] = .deferred
                        case .capped: decided[index] = .capped
                        }
                    }
                }
            }
        }
        var requests: [GateRequest] = []
        requests.reserveCapacity(d.jobs.count - decided.count)
        var hashes = [RecordHashes?](repeating: nil, count: d.jobs.count)
        for (index, job) in d.jobs.enumerated() where decided.isEmpty || decided[index] == nil {
            let request =
                if let channel = job.channel {
                    GateRequest(jobID: job.id, app: job.app, channelID: channel.value)
                } else {
                    GateRequest(jobID: job.id, app: job.app, tokenHex: job.tokenHex)
                }
            hashes[index] = RecordHashes(request)
            requests.append(request)
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
        return Result(decisions: decisions, recordHashes: hashes)
    }
}

// The carrier of the gate's hashes (`RecordHashes`, in Sender, which knows no Redis type) and the Redis
// values it carries: filled from a gate request here, read back by the settle (`OutcomeRecords`).
extension RecordHashes {
    init(_ request: GateRequest) {
        self.init(idMember: request.fingerprint.member, idSpread: request.fingerprint.spread, recipient: request.tokenHash)
    }

    var fingerprint: JobFingerprint { JobFingerprint(member: idMember, spread: idSpread) }
}
