import Foundation
import Jobs
import Kafka
import Redis
import Sender

/// The gate: the whole batch's decisions in one Redis round trip (dedup, suppressions, leases), after
/// campaign control and pacing have held back what may not be sent yet (design §2.10–§2.13), and before
/// the audience rules decide on what it admitted (design §2.14).
struct Gate: Sendable {
    /// Campaign control (cancel, pause, …) as this process last read it from Redis.
    let controls: CampaignControls
    /// `apps[].max_rate`, by bundle id (empty: no app is paced, and the gate never looks).
    let appRates: [String: Int]
    /// What a job released at its pacing slot carries (design §2.13): only such a job skips the pace.
    let releases: ReleaseSignature
    /// The audience rules (holdouts, quiet hours, local time, frequency caps) of this lane.
    let rules: AudienceRules
    /// An app of the pipeline file configures a rule (caps, quiet hours): the rules look at every batch.
    /// Without one they look only while a campaign's control state asks for one.
    let appRules: Bool
    let lane: Lane

    init(controls: CampaignControls, configuration: PipelineConfiguration, releases: ReleaseSignature, lane: Lane = .bulk) {
        self.controls = controls
        self.releases = releases
        self.lane = lane
        rules = AudienceRules.configured(configuration, lane: lane)
        appRules = configuration.apps.contains { $0.frequencyCaps != nil || ($0.quietHours != nil && lane == .bulk) }
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
        let snapshot = controls.snapshot
        var held = Held()
        if snapshot != nil || !appRates.isEmpty { held = try await hold(d, control: snapshot ?? [:], store: store) }
        let ruling = appRules || (snapshot?.values.contains { $0.hasAudienceRules } ?? false)
        var requests: [GateRequest] = []
        requests.reserveCapacity(d.jobs.count - held.decided.count)
        var hashes = [RecordHashes?](repeating: nil, count: d.jobs.count)
        var readsProfiles = false
        for (index, job) in d.jobs.enumerated() where held.decided.isEmpty || held.decided[index] == nil {
            var request =
                if let channel = job.channel {
                    GateRequest(jobID: job.id, app: job.app, channelID: channel.value)
                } else {
                    GateRequest(jobID: job.id, app: job.app, tokenHex: job.tokenHex)
                }
            request.needsLanguage = job.hasAlerts
            if ruling, job.channel == nil, rules.needsProfile(job, control: job.campaign.flatMap { snapshot?[$0] }) {
                request.needsProfile = true
                readsProfiles = true
            }
            hashes[index] = RecordHashes(request)
            requests.append(request)
        }
        var decisions: [GateDecision]
        var profiles: [Int: RecipientProfile] = [:]
        if readsProfiles {
            (decisions, profiles) = try await store.gateReadingProfiles(requests, call: call)
        } else {
            decisions = try await store.gate(requests, call: call)
        }
        if !held.decided.isEmpty {
            // Jobs decided here take no lease and are not in the gate call; the others keep their order.
            var gated = decisions.makeIterator()
            decisions = d.jobs.indices.map { held.decided[$0] ?? gated.next()! }
            if !profiles.isEmpty {
                let gatedJobs = d.jobs.indices.filter { held.decided[$0] == nil }
                profiles = Dictionary(uniqueKeysWithValues: profiles.map { (gatedJobs[$0.key], $0.value) })
            }
        }
        for index in held.cancelled {
            switch decisions[index] {
            case .admitted, .takenOver: decisions[index] = .cancelled
            default: break  // deduped (accepted before the cancel), suppressed, or in flight (gated again)
            }
        }
        if ruling {
            try await applyRules(&decisions, d, hashes: hashes, profiles: profiles, control: snapshot ?? [:], store: store)
        }
        return Result(decisions: decisions, recordHashes: hashes)
    }

    /// The audience rules on the jobs the gate admitted (design §2.14): those they refuse settle with
    /// the rule's outcome, those they hold go to the held slots (one deferral for the batch) and settle
    /// `deferred`; the leases the gate took are freed by those settles. A job the held slots have no room
    /// for is `heldFull`, its lease freed now, and waits like any such job.
    private func applyRules(
        _ decisions: inout [GateDecision], _ d: DecodedBatch, hashes: [RecordHashes?], profiles: [Int: RecipientProfile],
        control: [String: CampaignControlState], store: PipelineStore
    ) async throws {
        var subjects: [RuleSubject] = []
        for (index, job) in d.jobs.enumerated() where job.channel == nil {
            switch decisions[index] {
            case .admitted, .takenOver: break
            default: continue
            }
            subjects.append(
                RuleSubject(
                    index: index, job: job, fingerprint: hashes[index]?.fingerprint ?? JobFingerprint(jobID: job.id),
                    recipient: RecipientIdentity(job: job, profile: profiles[index]),
                    control: job.campaign.flatMap { control[$0] }, isPriority: lane == .priority))
        }
        if subjects.isEmpty { return }
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let outcome = try await rules.decide(subjects, nowMs: nowMs, store: store)
        for (index, kind) in outcome.settled { decisions[index] = .ruledOut(kind) }
        if outcome.held.isEmpty { return }
        var batch = DeferralBatch()
        for hold in outcome.held {
            batch.add(d.messages[d.jobMessages[hold.index]], job: hold.index, place: hold.place, mode: .hold(dueMs: hold.dueMs))
        }
        let answers = try await store.deferJobs(batch.deferrals, nowMs: nowMs)
        var full: [GateRequest] = []
        for (k, jobs) in batch.jobs.enumerated() {
            for (position, index) in jobs.enumerated() {
                switch answers[k][position] {
                case .admitted: break  // due already: sent
                case .held: decisions[index] = .heldByRule
                case .full:
                    decisions[index] = .heldFull
                    let job = d.jobs[index]
                    full.append(GateRequest(jobID: job.id, app: job.app, tokenHex: job.tokenHex))
                }
            }
        }
        if !full.isEmpty { try await store.releaseLeases(full) }
    }

    /// What campaign control decided before the gate call: jobs held in Redis (`deferred`) or at a held
    /// cap (`heldFull`), by index, and the jobs of cancelled campaigns.
    private struct Held {
        var decided: [Int: GateDecision] = [:]
        /// Jobs of a cancelled campaign: gated like the others, so that one accepted before the cancel
        /// settles `deduped` (a redelivery after a rebalance), not `cancelled` as well; the others are
        /// not sent (design §2.10).
        var cancelled = Set<Int>()
    }

    /// Jobs of a paused, scheduled or paced campaign are held in Redis (one deferral for the batch) and
    /// settle `deferred`: no lease, no place in the in-flight budget, no partition held up (design
    /// §2.11–§2.13). A paced campaign's jobs whose slot is due now are admitted; those the held slots have
    /// no room for are `heldFull`: kept, unsettled, until there is room.
    private func hold(_ d: DecodedBatch, control: [String: CampaignControlState], store: PipelineStore) async throws -> Held {
        var held = Held()
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        var batch = DeferralBatch()
        for (index, job) in d.jobs.enumerated() {
            let state = job.campaign.flatMap { control[$0] }
            if state?.cancelled == true {
                held.cancelled.insert(index)
                continue
            }
            let appRate = appRates.isEmpty ? nil : appRates[job.app]
            guard state != nil || appRate != nil else { continue }
            let message = d.messages[d.jobMessages[index]]
            guard let place = deferral(of: job, message: message, state: state, appRate: appRate, nowMs: nowMs) else { continue }
            batch.add(message, job: index, place: place.name, mode: place.mode)
        }
        if batch.deferrals.isEmpty { return held }
        let answers = try await store.deferJobs(batch.deferrals, nowMs: nowMs)
        for (k, jobs) in batch.jobs.enumerated() {
            for (position, index) in jobs.enumerated() {
                switch answers[k][position] {
                case .admitted: break
                case .held: held.decided[index] = .deferred
                case .full: held.decided[index] = .heldFull
                }
            }
        }
        return held
    }

    /// Where a job is held (a campaign, or `@app:<bundle id>` for an app's max_rate) and how; nil: sent now.
    private func deferral(
        of job: Job, message: KafkaConsumerMessage, state: CampaignControlState?, appRate: Int?, nowMs: Int64
    ) -> (name: String, mode: Deferral.Mode)? {
        if let state, let campaign = job.campaign, state.paused { return (campaign, .hold(dueMs: nowMs)) }
        // Released by `run` at its pacing slot: admitted without taking another.
        if releases.verifies(message) { return nil }
        if let state, let campaign = job.campaign, let rate = state.rate {
            return (campaign, .pace(rate: rate, notBeforeMs: state.startAtMs ?? 0))
        }
        if let state, let campaign = job.campaign, let at = state.startAtMs, at > nowMs { return (campaign, .hold(dueMs: at)) }
        // The app's max_rate, for jobs whose campaign sets no pace of its own.
        if let appRate { return (DeferredRelease.appDeferral(job.app), .pace(rate: appRate, notBeforeMs: 0)) }
        return nil
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

/// Jobs to hold, one deferral per place and mode (a campaign's pause, its pace, a rule's due time), in the
/// order first met, and which batch job each held message is: what `Gate.hold` and `Gate.applyRules`
/// hand the held slots in one call.
struct DeferralBatch {
    private struct Place: Hashable {
        var name: String
        var mode: Deferral.Mode
    }

    private(set) var deferrals: [Deferral] = []
    /// Per deferral, the batch index of each of its messages.
    private(set) var jobs: [[Int]] = []
    private var indexOf: [Place: Int] = [:]

    mutating func add(_ message: KafkaConsumerMessage, job: Int, place name: String, mode: Deferral.Mode) {
        let place = Place(name: name, mode: mode)
        let k: Int
        if let known = indexOf[place] {
            k = known
        } else {
            k = deferrals.count
            indexOf[place] = k
            deferrals.append(Deferral(campaign: name, mode: mode, messages: []))
            jobs.append([])
        }
        deferrals[k].messages.append(DeferredMessage.member(key: message.key, value: message.value))
        jobs[k].append(job)
    }
}
