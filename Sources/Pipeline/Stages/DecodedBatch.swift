import Foundation
import Jobs
import Kafka
import Logging
import Redis
import Sender

/// A batch from Kafka, decoded: valid jobs, and the refused messages with their reason and outcome
/// (a job that failed to decode has no id, app or token to count it under).
struct DecodedBatch: Sendable {
    typealias Refusal = (message: KafkaConsumerMessage, reason: String, outcome: SettledOutcome)

    var messages: [KafkaConsumerMessage]
    /// The valid jobs, in order, and the index of each one's message in `messages` (a job and its
    /// message are not copied from stage to stage as a pair: a `Job` is one reference).
    var jobs: [Job]
    var jobMessages: [Int]
    var deadLetters: [Refusal]
    /// The outcomes stream's messages of `deadLetters` (`kafka.outcomes_topic`; empty without it).
    var deadLetterMessages: [OutcomeMessage] = []
    /// Jobs gated again because another copy was in flight: not counted as received a second time.
    var isRetry = false
    /// Jobs gated again after waiting for room in the held slots (``CapWaits``), which releases their
    /// partitions once they are gated.
    var fromCapWaits = false
    /// Where the lane's intake put this batch in its order (0, 1, 2, …): the send stage sends the intake's
    /// batches in this order, whichever gate worker finished first. Nil for a batch gated again (regates,
    /// cap waits), whose jobs already left their order.
    var intakeOrder: Int?
}

/// A decoded batch and the gate's decision for each of its jobs, in order.
struct GatedBatch: Sendable {
    var decoded: DecodedBatch
    /// The gate call's id: its leases name it, and so does its batch's written mark.
    var call: GateCall
    var decisions: [GateDecision]
    /// The gate call's hashes of each job's id and recipient (`Gate.Result`), carried to the settle.
    var recordHashes: [RecordHashes?] = []

    init(decoded: DecodedBatch, call: GateCall, gated: Gate.Result) {
        self.decoded = decoded
        self.call = call
        decisions = gated.decisions
        recordHashes = gated.recordHashes
    }
}

/// Turns Kafka messages into jobs (pure: no I/O). Jobs for apps the pipeline file does not name are
/// refused here, before the gate: an app name from a message never becomes a Redis key, a cached key
/// table or a metric label.
struct BatchDecoder: Sendable {
    let decoder: JobDecoder
    /// Whether refusals also get their outcomes-stream message (`kafka.outcomes_topic` is set).
    let makesOutcomeMessages: Bool
    let logger: Logger

    init(configuration: PipelineConfiguration, makesOutcomeMessages: Bool, logger: Logger) {
        // Apple's limits differ by transport and push type: the decoder lets the largest through, and
        // each job is held to its own app's limit when its payload is encoded (`Dispatch`).
        decoder = JobDecoder(payloadLimit: configuration.largestPayloadLimit, apps: KnownApps(configuration.apps.map(\.bundleID)))
        self.makesOutcomeMessages = makesOutcomeMessages
        self.logger = logger
    }

    /// A batch's valid jobs, and its refused messages with their reasons. `templates`: a campaign's
    /// jobs share their payload and alerts, read once per run of the intake.
    func decode(_ batch: [KafkaConsumerMessage], templates: JobTemplates) -> DecodedBatch {
        let now = UInt32(Date().timeIntervalSince1970)
        var d = DecodedBatch(messages: batch, jobs: [], jobMessages: [], deadLetters: [])
        d.jobs.reserveCapacity(batch.count)
        d.jobMessages.reserveCapacity(batch.count)
        for index in batch.indices {
            do throws(JobError) {
                let job = try batch[index].value.withUnsafeBytes { raw in
                    Result { () throws(JobError) in try decoder.decode(raw, now: now, templates: templates) }
                }.get()
                d.jobs.append(job)
                d.jobMessages.append(index)
            } catch {
                let m = batch[index]
                // A job valid but for its app keeps its id and campaign: counted in the campaign's
                // progress, as when the router refused it. Its app is no label or key.
                d.deadLetters.append(
                    (
                        m, error.reason.rawValue,
                        SettledOutcome(jobID: error.jobID ?? "", app: "", tokenHex: "", campaign: error.campaign, kind: .deadLettered)
                    ))
                if makesOutcomeMessages {
                    // No valid job: its id and campaign when it was valid but for its app, else nothing.
                    d.deadLetterMessages.append(
                        OutcomeMessage(id: error.jobID, campaign: error.campaign, outcome: .deadLettered, reason: error.reason.rawValue))
                }
                logger.debug(
                    "job refused", metadata: ["reason": "\(error.reason.rawValue)", "detail": "\(error.detail)", "offset": "\(m.ref)"])
            }
        }
        return d
    }

    /// The dead-letter reason of a campaign's job published to the priority topic: campaigns stay in
    /// the bulk lane, so a campaign published to the wrong topic never takes the lane from urgent jobs.
    static let campaignOnPriorityTopic = "campaign-on-priority-topic"

    /// The priority lane's batch: campaign jobs become dead letters (`campaignOnPriorityTopic`).
    func refusingCampaigns(_ d: DecodedBatch) -> DecodedBatch {
        guard d.jobs.contains(where: { $0.campaign != nil }) else { return d }
        var d = d
        var jobs: [Job] = []
        var jobMessages: [Int] = []
        for (job, m) in zip(d.jobs, d.jobMessages) {
            if let campaign = job.campaign {
                d.deadLetters.append(
                    (
                        d.messages[m], Self.campaignOnPriorityTopic,
                        SettledOutcome(
                            jobID: job.id, app: job.app, tokenHex: job.recipientKey, campaign: campaign, kind: .deadLettered,
                            isBroadcast: job.channel != nil)
                    ))
            } else {
                jobs.append(job)
                jobMessages.append(m)
            }
        }
        d.jobs = jobs
        d.jobMessages = jobMessages
        return d
    }
}
