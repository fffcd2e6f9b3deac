import Jobs
import Kafka
import Redis

/// The fields of a job the gate's verdicts speak of (``Job`` has them; tests make their own).
protocol GatedJob {
    var id: String { get }
    var app: String { get }
    var tokenHex: String { get }
    /// What the job's Redis records are keyed by: its token's hex, or a broadcast's channel id.
    var recipientKey: String { get }
    /// A broadcast (a channel job): its outcomes are also counted `broadcast:<outcome>`.
    var isBroadcast: Bool { get }
    var campaign: String? { get }
}

extension GatedJob {
    var recipientKey: String { tokenHex }
    var isBroadcast: Bool { false }
}

extension Job {
    var isBroadcast: Bool { channel != nil }
}

extension Job: GatedJob {}

/// What the gate's decisions make of one decoded batch, before any I/O: which jobs settle now and how,
/// which are sent (in the language the gate chose), which are gated again later, and the crash counters.
/// Pure, so every decision is tested without a server (GateVerdictsTests); `send` does the I/O it asks for.
struct GateVerdicts {
    /// A job to send: its index in the batch's jobs and the alert language the gate chose.
    struct Admitted: Equatable {
        var index: Int
        var language: String?
    }

    /// A job held by another live process, noted once (on its first gate) for the lease-wait log.
    struct Wait: Equatable {
        var jobID: String
        var holder: String
    }

    /// Settles now (deduped, suppressed) with the batch's events: received, take-overs, waits.
    var settled = SettlerInbox.Item()
    var admitted: [Admitted] = []
    /// Indices of jobs whose id is in flight: gated again after ``Regates/delay``.
    var regate: [Int] = []
    /// Indices of jobs their held slot had no room for (``GateDecision/heldFull``): not settled, kept until
    /// there is room (``CapWaits``).
    var heldFull: [Int] = []
    var waits: [Wait] = []

    /// - Parameters:
    ///   - received: messages of the batch counted as received (0 when it is gated again).
    ///   - outcomeMessages: also make the outcomes stream's message of each job settled here
    ///     (`kafka.outcomes_topic` is set).
    ///   - ref: the Kafka message of job `i`, settled with it.
    init<J: GatedJob>(
        decisions: [GateDecision], jobs: [J], isRetry: Bool, received: Int, outcomeMessages: Bool = false, ref: (Int) -> MessageRef
    ) {
        settled.events.received = isRetry ? 0 : received
        admitted.reserveCapacity(jobs.count)
        for i in jobs.indices {
            let job = jobs[i]
            func settle(_ kind: SettledOutcomeKind) {
                var outcome = SettledOutcome(jobID: job.id, app: job.app, tokenHex: job.recipientKey, campaign: job.campaign, kind: kind)
                outcome.isBroadcast = job.isBroadcast
                settled.outcomes.append(outcome)
                settled.refs.append(ref(i))
                if outcomeMessages { settled.messages.append(OutcomeMessage(job: job, outcome: kind)) }
            }
            switch decisions[i] {
            case .deduped:
                settle(.deduped)
            case .suppressed:
                settle(.suppressed)
            case .ruledOut(let kind):
                // An audience rule refused it after the gate admitted it: the settle frees its lease.
                settle(kind)
            case .cancelled, .deferred, .heldByRule:
                // Its campaign is cancelled (admitted by the gate: the settle frees its lease), paused
                // (held in Redis, decided before the gate call: no lease), or an audience rule held it
                // after the gate admitted it (in Redis already; the settle frees its lease).
                var outcome = SettledOutcome(
                    jobID: job.id, app: job.app, tokenHex: job.recipientKey, campaign: job.campaign,
                    kind: decisions[i] == .cancelled ? .cancelled : .deferred)
                outcome.isBroadcast = job.isBroadcast
                outcome.tookNoLease = decisions[i] == .deferred
                settled.outcomes.append(outcome)
                settled.refs.append(ref(i))
                // A held job is not done: its message comes when it settles after the release (a consumer
                // deduping by id would otherwise keep "deferred" and drop its real outcome).
                if outcomeMessages, outcome.kind == .cancelled { settled.messages.append(OutcomeMessage(job: job, outcome: .cancelled)) }
            case .heldFull:
                // Not taken: its message stays unsettled (its partition is held) until it can be held.
                heldFull.append(i)
            case .inFlightElsewhere(let holder):
                // As below, but the copy belongs to another live process: said once per job (a long wait
                // here is a stuck process, or a job published twice across processes).
                regate.append(i)
                if !isRetry {
                    settled.events.inFlightWaits += 1
                    waits.append(Wait(jobID: job.id, holder: holder))
                }
            case .inFlight:
                // Another copy is being sent right now (by this process or another one, e.g. across a
                // rebalance). Settling this message now would lose the job if that sender crashed before
                // settling its own; so it waits and is gated again: deduped once the other copy is
                // accepted, admitted if its lease lapsed.
                regate.append(i)
            case .admitted(let language):
                admitted.append(Admitted(index: i, language: language))
            case .takenOver(let language, let written):
                // Taken over from a process that died. If it had handed the job's batch to its transports
                // it may have written it: the crash duplicate window, counted `ambiguous`.
                let maybeSent = written ? 1 : 0
                settled.events.resentAfterCrash += 1
                settled.events.ambiguous += maybeSent
                if let campaign = job.campaign {
                    settled.campaignEvents[campaign, default: PipelineEvents()].resentAfterCrash += 1
                    settled.campaignEvents[campaign, default: PipelineEvents()].ambiguous += maybeSent
                }
                admitted.append(Admitted(index: i, language: language))
            }
        }
    }
}
