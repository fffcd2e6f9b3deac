import Kafka
import Redis
import Testing

@testable import Pipeline

/// The gate's decisions mapped to what settles, what is sent and what waits, without a server (issue 29:
/// the mapping out of I/O).
struct GateVerdictsTests {
    struct TestJob: GatedJob {
        var id: String
        var app = "com.example.shop"
        var tokenHex = String(repeating: "ab", count: 32)
        var campaign: String? = "spring"
    }

    func verdicts(_ decisions: [GateDecision], isRetry: Bool = false, campaign: String? = "spring") -> GateVerdicts {
        let jobs = decisions.indices.map { TestJob(id: "job-\($0)", campaign: campaign) }
        return GateVerdicts(decisions: decisions, jobs: jobs, isRetry: isRetry, received: decisions.count + 1) {
            MessageRef(topic: "apns.jobs", partition: 3, offset: Int64(100 + $0))
        }
    }

    @Test func eachDecisionGoesWhereItBelongs() {
        let v = verdicts([
            .admitted(language: "fr"), .deduped, .suppressed, .inFlight, .inFlightElsewhere(owner: "owner-b/call-7"),
            .takenOver(language: nil, written: true), .takenOver(language: "de", written: false),
        ])
        #expect(v.admitted == [.init(index: 0, language: "fr"), .init(index: 5, language: nil), .init(index: 6, language: "de")])
        #expect(v.settled.outcomes.map(\.fingerprint) == ["job-1", "job-2"].map { JobFingerprint(jobID: $0) })
        #expect(v.settled.outcomes.map(\.kind) == [.deduped, .suppressed])
        // Each settled job settles its own message.
        #expect(v.settled.refs.map(\.offset) == [101, 102])
        #expect(v.regate == [3, 4])
        #expect(v.waits == [.init(jobID: "job-4", holder: "owner-b/call-7")])
        // Counted as received once (the batch's messages, dead letters included), waits once per job.
        #expect(v.settled.events.received == 8)
        #expect(v.settled.events.inFlightWaits == 1)
        // Every take-over counts as resent; only the written one may have reached a device.
        #expect(v.settled.events.resentAfterCrash == 2)
        #expect(v.settled.events.ambiguous == 1)
        #expect(v.settled.campaignEvents["spring"]?.resentAfterCrash == 2)
        #expect(v.settled.campaignEvents["spring"]?.ambiguous == 1)
    }

    @Test func aBatchGatedAgainIsNotReceivedOrWaitedTwice() {
        let v = verdicts([.inFlightElsewhere(owner: "owner-b/call-7"), .deduped], isRetry: true)
        #expect(v.settled.events.received == 0)
        #expect(v.settled.events.inFlightWaits == 0)
        #expect(v.waits.isEmpty)
        #expect(v.regate == [0])
        #expect(v.settled.outcomes.map(\.kind) == [.deduped])
    }

    @Test func takeOversWithoutACampaignCountOnlyInTheTotals() {
        let v = verdicts([.takenOver(language: nil, written: true)], campaign: nil)
        #expect(v.settled.events.ambiguous == 1)
        #expect(v.settled.campaignEvents.isEmpty)
        #expect(v.admitted == [.init(index: 0, language: nil)])
    }

    /// A cancelled job was admitted by the gate (its lease is freed when it settles); a held one never went
    /// through the gate (nothing to free). Neither is sent.
    @Test func cancelledJobsFreeTheirLeaseHeldOnesHaveNone() {
        let v = verdicts([.cancelled, .deferred, .admitted(language: nil)])
        #expect(v.admitted == [.init(index: 2, language: nil)])
        #expect(v.settled.outcomes.map(\.kind) == [.cancelled, .deferred])
        #expect(v.settled.outcomes.map(\.tookNoLease) == [false, true])
        #expect(v.settled.refs.map(\.offset) == [100, 101])
    }
}

extension GateVerdictsTests {
    /// A job its held slot had no room for is neither settled nor sent nor gated again as in flight: it
    /// waits for room (its message stays unsettled).
    @Test func aCappedJobWaitsUnsettled() {
        let v = verdicts([.deferred, .heldFull, .admitted(language: nil), .heldFull])
        #expect(v.heldFull == [1, 3])
        #expect(v.regate.isEmpty && v.admitted.map(\.index) == [2])
        #expect(v.settled.outcomes.map(\.kind) == [.deferred] && v.settled.refs.map(\.offset) == [100])
    }

    /// The audience rules' decisions: refused jobs settle with the rule's outcome and free their lease (an
    /// outcome message each); jobs a rule held settle `deferred`, free their lease too, and have no
    /// message until they come back.
    @Test func audienceRuleDecisionsSettleWithTheirOutcomes() {
        let decisions: [GateDecision] = [.ruledOut(.capped), .ruledOut(.quiet), .ruledOut(.heldOut), .heldByRule, .deferred]
        let jobs = decisions.indices.map { TestJob(id: "job-\($0)") }
        let v = GateVerdicts(decisions: decisions, jobs: jobs, isRetry: false, received: 5, outcomeMessages: true) {
            MessageRef(topic: "apns.jobs", partition: 0, offset: Int64($0))
        }
        #expect(v.admitted.isEmpty)
        #expect(v.settled.outcomes.map(\.kind) == [.capped, .quiet, .heldOut, .deferred, .deferred])
        #expect(
            v.settled.outcomes.map(\.tookNoLease) == [false, false, false, false, true], "only a job held before the gate took no lease")
        #expect(v.settled.messages.map(\.outcome) == [.capped, .quiet, .heldOut])
        #expect(v.settled.messages.map(\.id) == ["job-0", "job-1", "job-2"])
        #expect(v.settled.refs.map(\.offset) == [0, 1, 2, 3, 4])
    }
}
