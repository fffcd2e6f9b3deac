import APNsProtocol
import Jobs
import Kafka
import Logging
import Redis
import Sender

/// The send stage: a gated batch's decisions become settled outcomes, notifications handed to the
/// transports (its gate call marked "written" first), dead letters, and the jobs to gate again.
struct Dispatch: Sendable {
    let configuration: PipelineConfiguration
    let apps: [String: PipelineConfiguration.App]
    let router: Router
    let marks: WrittenMarks
    let deadLetters: DeadLetterWriter
    let inbox: SettlerInbox
    /// Set when `kafka.outcomes_topic` is: each settled job's outcome message is made.
    let makesOutcomeMessages: Bool
    let metrics: PipelineMetrics?
    let waitLog: LeaseWaitLog
    /// Broadcast channels' storage policies, learned from APNs for the broadcasts' `apns-expiration`
    /// (nil: never read; a broadcast then goes with its job's own word, design §5.5).
    let channelPolicies: ChannelPolicies?
    let logger: Logger

    init(
        configuration: PipelineConfiguration, router: Router, marks: WrittenMarks, deadLetters: DeadLetterWriter, inbox: SettlerInbox,
        makesOutcomeMessages: Bool, metrics: PipelineMetrics?, waitLog: LeaseWaitLog, channelPolicies: ChannelPolicies? = nil,
        logger: Logger
    ) {
        self.configuration = configuration
        apps = Dictionary(uniqueKeysWithValues: configuration.apps.map { ($0.bundleID, $0) })
        self.router = router
        self.marks = marks
        self.deadLetters = deadLetters
        self.inbox = inbox
        self.makesOutcomeMessages = makesOutcomeMessages
        self.metrics = metrics
        self.waitLog = waitLog
        self.channelPolicies = channelPolicies
        self.logger = logger
    }

    /// What a sent batch leaves to its lane: jobs to gate again because another copy was in flight
    /// (``Regates``), and jobs the held slots had no room for (``CapWaits``).
    struct Leftovers: Sendable {
        var regate: DecodedBatch?
        var capped: DecodedBatch?
    }

    /// Sends `g`; returns what is left to gate again. `marked`: the batch's "written" mark is set already
    /// (the priority lane sets it while the batch is gated); else it is set as `WrittenMarks` decides.
    func send(_ g: GatedBatch, lane: Lane, marked: Bool = false) async throws -> Leftovers {
        let c = configuration
        let d = g.decoded
        let decisions = g.decisions
        let recordHashes = g.recordHashes
        let batch = d.messages
        let jobs = d.jobs
        var refused = d.deadLetters
        var refusedMessages = d.deadLetterMessages
        // Leave to write this batch: its gate call's "written" mark (below).
        let clearance = marks.clearance(call: g.call)
        // The gate's decisions, mapped without I/O: what settles now, what is sent, what is gated again.
        let verdicts = GateVerdicts(
            decisions: decisions, jobs: jobs, isRetry: d.isRetry, received: batch.count, outcomeMessages: makesOutcomeMessages
        ) {
            batch[d.jobMessages[$0]].ref
        }
        for wait in verdicts.waits { waitLog.note(jobID: wait.jobID, holder: wait.holder, logger: logger) }
        var notifications: [PushNotification] = []
        notifications.reserveCapacity(verdicts.admitted.count)
        // The encoder is made once per run of jobs of one app and push type (a broadcast has its own limit).
        var encoderFor: (app: String, pushType: APNsPushType?, broadcast: Bool, encoder: PayloadEncoder)?
        // Broadcasts' apns-expiration, from their channels' storage policies (read once per channel).
        var broadcastExpiries = BroadcastExpiries(policies: channelPolicies, logger: logger)
        // Priority-10 Live Activity pushes per app, counted for the metrics (they draw on a budget).
        var liveActivity10: [String: Int] = [:]
        // Broadcasts handed to each app's transport, counted apart from device pushes for the metrics.
        var broadcasts: [String: Int] = [:]
        let jobIDKey = c.gateway.embedJobID ? "jid" : nil
        // An HTTP/2 notification carries its job's token hex to its outcome (a suppression and the
        // outcomes stream write it; answers come within milliseconds). A binary shard holds its
        // notifications for the settle delay (~25 000 at 100k jobs/s): there the hex would be ~100 bytes
        // more per notification, more memory than making it again when one of those needs it. Looked up
        // once per run of jobs of one app.
        var keepsHexFor: (app: String, keeps: Bool)?
        // Whether a notification goes to a binary app: its batch is then marked written before the hand-off.
        var hasBinaryApp = false
        func keepsTokenHex(_ app: String) -> Bool {
            if let known = keepsHexFor, known.app == app { return known.keeps }
            let keeps = apps[app]?.transport != .binary
            keepsHexFor = (app, keeps)
            if !keeps { hasBinaryApp = true }
            return keeps
        }
        for admitted in verdicts.admitted {
            let job = jobs[admitted.index]
            // An index, not a copy of the message (a copy per job was a retain and release of its bytes).
            let m = d.jobMessages[admitted.index]
            do {
                let app = job.app
                let pushType = job.pushType
                let channel = job.channel
                if channel != nil, let config = apps[app] {
                    try config.checkCanBroadcast()
                } else if let pushType, pushType.requiresTokenAuthentication, let config = apps[app] {
                    try config.checkCanSend(pushType)
                }
                // One branch for a 32-byte token (every token seen so far): only another size looks up the app.
                if !job.token.fitsBinaryInterface, let config = apps[app] { try config.checkCanSend(tokenOf: job.token) }
                let encoder: PayloadEncoder
                if let e = encoderFor, e.app == app, e.pushType == pushType, e.broadcast == (channel != nil) {
                    encoder = e.encoder
                } else {
                    encoder = PayloadEncoder(
                        limit: c.payloadLimit(app: apps[app], pushType: pushType, broadcast: channel != nil),
                        truncatesAlertBody: c.gateway.truncateAlert)
                    encoderFor = (app, pushType, channel != nil, encoder)
                }
                let payload = try job.encodedPayload(language: admitted.language, encoder: encoder, jobIDKey: jobIDKey)
                let position = SourcePosition(partition: batch[m].partition, offset: batch[m].offset, lane: lane)
                // The gate's hashes of its id and recipient, for its settle (`OutcomeRecords.redisOutcome`).
                let hashes = recordHashes.isEmpty ? nil : recordHashes[admitted.index]
                let notification: PushNotification
                if let channel {
                    let expiry = try await broadcastExpiries.expiration(of: job, channel: channel) {
                        verdicts.admitted.map { jobs[$0.index] }
                    }
                    notification = PushNotification(
                        jobID: job.id, app: app, recipient: .channel(channel), payload: payload, expiry: expiry,
                        priority: job.priority, campaign: job.campaign, collapseID: job.collapseID, pushType: pushType,
                        position: position, clearance: clearance, recordHashes: hashes)
                    broadcasts[app, default: 0] += 1
                } else {
                    notification = PushNotification(
                        jobID: job.id, app: app, token: job.token, tokenHex: keepsTokenHex(app) ? job.tokenHex : nil,
                        payload: payload, expiry: job.expiry, priority: job.priority, campaign: job.campaign,
                        collapseID: job.collapseID, pushType: pushType, position: position, clearance: clearance,
                        recordHashes: hashes)
                }
                notifications.append(notification)
                if pushType == .liveactivity && job.priority == .immediate { liveActivity10[app, default: 0] += 1 }
            } catch {
                // e.g. the localized alert makes the payload too large.
                refused.append(
                    (
                        batch[m], error.reason.rawValue,
                        SettledOutcome(
                            jobID: job.id, app: job.app, tokenHex: job.recipientKey, campaign: job.campaign, kind: .deadLettered,
                            isBroadcast: job.channel != nil)
                    ))
                if makesOutcomeMessages {
                    refusedMessages.append(OutcomeMessage(job: job, outcome: .deadLettered, reason: error.reason.rawValue))
                }
            }
        }
        var settled = verdicts.settled
        if settled.events.resentAfterCrash > 0 {
            // Jobs taken over from a dead process: counted in Redis before any of them can be written again.
            var events = PipelineEvents()
            events.resentAfterCrash = settled.events.resentAfterCrash
            events.ambiguous = settled.events.ambiguous
            var perCampaign: [String: PipelineEvents] = [:]
            for (campaign, e) in settled.campaignEvents where e.resentAfterCrash != 0 || e.ambiguous != 0 {
                perCampaign[campaign] = PipelineEvents(ambiguous: e.ambiguous, resentAfterCrash: e.resentAfterCrash)
                settled.campaignEvents[campaign]?.resentAfterCrash = 0
                settled.campaignEvents[campaign]?.ambiguous = 0
            }
            try await marks.recordTakeOvers(call: g.call, events: events, campaignEvents: perCampaign)
            metrics?.takenOver(events.resentAfterCrash)
            settled.events.resentAfterCrash = 0
            settled.events.ambiguous = 0
        }
        inbox.put(settled)
        for (app, count) in liveActivity10 { metrics?.liveActivityPriority10(app: app, count: count) }
        for (app, count) in broadcasts { metrics?.broadcastsSent(app: app, count: count) }
        // Dead letters are delivered to the DLQ (delivery checked) before their offsets may settle; a
        // write that fails is retried in the background while the valid jobs go on.
        if !refused.isEmpty {
            var settled = SettlerInbox.Item()
            for d in refused {
                settled.outcomes.append(d.outcome)
                settled.refs.append(d.message.ref)
            }
            settled.messages = refusedMessages
            deadLetters.write(refused.map { ($0.message, $0.reason) }, settle: settled)
        }
        var leftovers = Leftovers()
        if !verdicts.regate.isEmpty {
            let inFlight = verdicts.regate
            leftovers.regate = DecodedBatch(
                messages: inFlight.map { batch[d.jobMessages[$0]] }, jobs: inFlight.map { jobs[$0] }, jobMessages: Array(inFlight.indices),
                deadLetters: [], isRetry: true)
        }
        if !verdicts.capped.isEmpty {
            let capped = verdicts.capped
            leftovers.capped = DecodedBatch(
                messages: capped.map { batch[d.jobMessages[$0]] }, jobs: capped.map { jobs[$0] }, jobMessages: Array(capped.indices),
                deadLetters: [], isRetry: true)
        }
        if !notifications.isEmpty {
            // Before any of it is written, its gate call is marked "written": if this process dies, whoever
            // takes its leases over counts these jobs `ambiguous` (they may reach a device twice), and only
            // these. HTTP/2 connections ask for the mark when the batch nears the front of their
            // queue (up to `connections × queue_capacity` wait there); a binary shard writes what it is
            // given at once, so a batch with binary apps is marked before the hand-off.
            if marked {
                // The priority lane's mark: a priority request at the head of a connection's queue would
                // otherwise wait for it behind the bulk batches' marks (one connection asks them in turn).
                clearance.grant()
            } else if hasBinaryApp {
                try await marks.markNow(call: g.call, clearance: clearance)
            }
            let orphans = try await router.send(notifications)
            if !orphans.isEmpty {
                // Validated jobs for an app with no certificate here: dead letters, with the reason.
                var orphanItem = SettlerInbox.Item()
                let byPosition = Dictionary(uniqueKeysWithValues: batch.map { (OutcomeRecords.position(of: $0, lane: lane), $0) })
                for n in orphans {
                    orphanItem.outcomes.append(
                        SettledOutcome(
                            jobID: n.jobID, app: n.app, tokenHex: n.recipientKey, campaign: n.campaign, kind: .deadLettered,
                            isBroadcast: n.channel != nil))
                    if let position = n.position {
                        orphanItem.refs.append(
                            OutcomeRecords.ref(topic: c.kafka.jobsTopic, priorityTopic: c.kafka.priorityTopic, position: position))
                    }
                    if makesOutcomeMessages {
                        orphanItem.messages.append(
                            OutcomeMessage(notification: n, outcome: .deadLettered, reason: "no-certificate-for-app"))
                    }
                }
                logger.error("jobs for apps without a certificate are dead-lettered", metadata: ["count": "\(orphans.count)"])
                deadLetters.write(
                    orphans.compactMap { n in n.position.flatMap { byPosition[$0] }.map { ($0, "no-certificate-for-app") } },
                    settle: orphanItem)
            }
        }
        return leftovers
    }
}
