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
        var heldFull: DecodedBatch?
    }

    /// Sends `g`; returns what is left to gate again. `mark`: where the batch's "written" mark stands
    /// (the priority lane sets it while the batch is gated); a due one is set here, before the hand-off.
    func send(_ g: GatedBatch, lane: Lane, mark: WrittenMarkState = .due) async throws -> Leftovers {
        let d = g.decoded
        // The gate's decisions, mapped without I/O: what settles now, what is sent, what is gated again.
        let verdicts = GateVerdicts(
            decisions: g.decisions, jobs: d.jobs, isRetry: d.isRetry, received: d.messages.count, outcomeMessages: makesOutcomeMessages
        ) {
            d.messages[d.jobMessages[$0]].ref
        }
        for wait in verdicts.waits { waitLog.note(jobID: wait.jobID, holder: wait.holder, logger: logger) }
        // Before any of the batch is written, its gate call is marked "written": if this process dies,
        // whoever takes its leases over counts these jobs `ambiguous` (they may reach a device twice), and
        // only these. Due now: the transports took the last batch, so their queues hold no more than
        // they write soon (their back-pressure, design §2.4). Set while the notifications are made.
        let due = mark == .due && !verdicts.admitted.isEmpty
        async let marked = due ? marks.fencedMark(g.call) : mark != .lapsed
        let made = try await notifications(of: verdicts, in: g, lane: lane)
        var settled = verdicts.settled
        try await recordTakeOvers(of: &settled, call: g.call)
        inbox.put(settled)
        for (app, count) in made.liveActivity10 { metrics?.liveActivityPriority10(app: app, count: count) }
        for (app, count) in made.broadcasts { metrics?.broadcastsSent(app: app, count: count) }
        writeDeadLetters(made.refused, messages: made.refusedMessages)
        let leftovers = Leftovers(
            regate: verdicts.regate.isEmpty ? nil : d.retry(verdicts.regate),
            heldFull: verdicts.heldFull.isEmpty ? nil : d.retry(verdicts.heldFull))
        if !made.notifications.isEmpty {
            if try await !marked { try await marks.countLapsed(g.call, notifications: made.notifications) }
            let orphans = try await router.send(made.notifications)
            if !orphans.isEmpty { deadLetterOrphans(orphans, of: d.messages, lane: lane) }
        }
        return leftovers
    }

    /// What the admitted jobs of a batch became: notifications, and the jobs refused on the way (a
    /// payload too large once localized, an app that may not send the push type) as dead letters.
    struct Made {
        var notifications: [PushNotification] = []
        var refused: [DecodedBatch.Refusal] = []
        var refusedMessages: [OutcomeMessage] = []
        /// Priority-10 Live Activity pushes per app, counted for the metrics (they draw on a budget).
        var liveActivity10: [String: Int] = [:]
        /// Broadcasts handed to each app's transport, counted apart from device pushes for the metrics.
        var broadcasts: [String: Int] = [:]
    }

    /// The notifications of `verdicts.admitted`, in order.
    private func notifications(
        of verdicts: GateVerdicts, in g: GatedBatch, lane: Lane
    ) async throws -> Made {
        let d = g.decoded
        // The batch's dead letters from decoding first, then those refused here.
        var made = Made(refused: d.deadLetters, refusedMessages: d.deadLetterMessages)
        made.notifications.reserveCapacity(verdicts.admitted.count)
        var maker = NotificationMaker(dispatch: self, channelPolicies: channelPolicies, logger: logger)
        for admitted in verdicts.admitted {
            let job = d.jobs[admitted.index]
            // An index, not a copy of the message (a copy per job was a retain and release of its bytes).
            let m = d.jobMessages[admitted.index]
            do {
                let position = SourcePosition(partition: d.messages[m].partition, offset: d.messages[m].offset, lane: lane)
                // The gate's hashes of its id and recipient, for its settle (`OutcomeRecords.redisOutcome`).
                let hashes = g.recordHashes.isEmpty ? nil : g.recordHashes[admitted.index]
                let payload = try maker.payload(of: job, language: admitted.language)
                // Only a broadcast may wait (its channel's policy): a device job's way is synchronous.
                var expiry: UInt32?
                if let channel = job.channel {
                    expiry = try await maker.expiration(of: job, channel: channel) { verdicts.admitted.map { d.jobs[$0.index] } }
                }
                made.notifications.append(
                    maker.notification(
                        of: job, payload: payload, broadcastExpiry: expiry, position: position, hashes: hashes,
                        made: &made))
            } catch {
                // e.g. the localized alert makes the payload too large.
                made.refused.append(
                    (
                        d.messages[m], error.reason.rawValue,
                        SettledOutcome(
                            jobID: job.id, app: job.app, tokenHex: job.recipientKey, campaign: job.campaign, kind: .deadLettered,
                            isBroadcast: job.channel != nil)
                    ))
                if makesOutcomeMessages {
                    made.refusedMessages.append(OutcomeMessage(job: job, outcome: .deadLettered, reason: error.reason.rawValue))
                }
            }
        }
        return made
    }

    /// Jobs taken over from a dead process: counted in Redis before any of them can be written again,
    /// and taken out of `settled`'s counts (which would count them twice).
    private func recordTakeOvers(of settled: inout SettlerInbox.Item, call: GateCall) async throws {
        guard settled.events.resentAfterCrash > 0 else { return }
        var events = PipelineEvents()
        events.resentAfterCrash = settled.events.resentAfterCrash
        events.ambiguous = settled.events.ambiguous
        var perCampaign: [String: PipelineEvents] = [:]
        for (campaign, e) in settled.campaignEvents where e.resentAfterCrash != 0 || e.ambiguous != 0 {
            perCampaign[campaign] = PipelineEvents(ambiguous: e.ambiguous, resentAfterCrash: e.resentAfterCrash)
            settled.campaignEvents[campaign]?.resentAfterCrash = 0
            settled.campaignEvents[campaign]?.ambiguous = 0
        }
        try await marks.recordTakeOvers(call: call, events: events, campaignEvents: perCampaign)
        metrics?.takenOver(events.resentAfterCrash)
        settled.events.resentAfterCrash = 0
        settled.events.ambiguous = 0
    }

    /// Dead letters are delivered to the DLQ (delivery checked) before their offsets may settle; a
    /// write that fails is retried in the background while the valid jobs go on.
    private func writeDeadLetters(_ refused: [DecodedBatch.Refusal], messages: [OutcomeMessage]) {
        guard !refused.isEmpty else { return }
        var settled = SettlerInbox.Item()
        for d in refused {
            settled.outcomes.append(d.outcome)
            settled.refs.append(d.message.ref)
        }
        settled.messages = messages
        deadLetters.write(refused.map { ($0.message, $0.reason) }, settle: settled)
    }

    /// Validated jobs for an app with no certificate here: dead letters, with the reason.
    private func deadLetterOrphans(_ orphans: [PushNotification], of batch: [KafkaConsumerMessage], lane: Lane) {
        let c = configuration
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
                orphanItem.messages.append(OutcomeMessage(notification: n, outcome: .deadLettered, reason: "no-certificate-for-app"))
            }
        }
        logger.error("jobs for apps without a certificate are dead-lettered", metadata: ["count": "\(orphans.count)"])
        deadLetters.write(
            orphans.compactMap { n in n.position.flatMap { byPosition[$0] }.map { ($0, "no-certificate-for-app") } }, settle: orphanItem)
    }
}

/// Makes one admitted job's notification, keeping what runs of jobs of one app share: the payload
/// encoder (per app, push type and broadcast or not), whether the app keeps token hex, the broadcast
/// channels' expirations.
private struct NotificationMaker {
    let dispatch: Dispatch
    /// The encoder is made once per run of jobs of one app and push type (a broadcast has its own limit).
    private var encoderFor: (app: String, pushType: APNsPushType?, broadcast: Bool, encoder: PayloadEncoder)?
    /// An HTTP/2 notification carries its job's token hex to its outcome (a suppression and the
    /// outcomes stream write it; answers come within milliseconds). A binary shard holds its
    /// notifications for the settle delay (~25 000 at 100k jobs/s): there the hex would be ~100 bytes
    /// more per notification, more memory than making it again when one of those needs it. Looked up
    /// once per run of jobs of one app.
    private var keepsHexFor: (app: String, keeps: Bool)?
    /// Broadcasts' apns-expiration, from their channels' storage policies (read once per channel).
    private var broadcastExpiries: BroadcastExpiries
    private let jobIDKey: String?

    init(dispatch: Dispatch, channelPolicies: ChannelPolicies?, logger: Logger) {
        self.dispatch = dispatch
        broadcastExpiries = BroadcastExpiries(policies: channelPolicies, logger: logger)
        jobIDKey = dispatch.configuration.gateway.embedJobID ? "jid" : nil
    }

    /// `job`'s payload, encoded for its app and push type; throws its dead-letter reason (an app that
    /// may not send it, a payload too large once localized).
    mutating func payload(of job: Job, language: String?) throws(JobError) -> [UInt8] {
        let app = job.app
        let pushType = job.pushType
        let channel = job.channel
        if channel != nil, let config = dispatch.apps[app] {
            try config.checkCanBroadcast()
        } else if let pushType, pushType.requiresTokenAuthentication, let config = dispatch.apps[app] {
            try config.checkCanSend(pushType)
        }
        // One branch for a 32-byte token (every token seen so far): only another size looks up the app.
        if !job.token.fitsBinaryInterface, let config = dispatch.apps[app] { try config.checkCanSend(tokenOf: job.token) }
        return try job.encodedPayload(
            language: language, encoder: encoder(app: app, pushType: pushType, broadcast: channel != nil), jobIDKey: jobIDKey)
    }

    /// A broadcast's `apns-expiration`, from its channel's storage policy. `batchJobs`: the batch's
    /// admitted jobs, for reading the channels of its broadcasts in one go.
    mutating func expiration(of job: Job, channel: BroadcastChannelID, batchJobs: () -> [Job]) async throws(JobError) -> UInt32 {
        try await broadcastExpiries.expiration(of: job, channel: channel, batch: batchJobs)
    }

    /// `job`'s notification (`broadcastExpiry`: set for a broadcast), counted in `made`.
    mutating func notification(
        of job: Job, payload: [UInt8], broadcastExpiry: UInt32?, position: SourcePosition, hashes: RecordHashes?,
        made: inout Dispatch.Made
    ) -> PushNotification {
        let app = job.app
        let notification: PushNotification
        if let channel = job.channel, let expiry = broadcastExpiry {
            made.broadcasts[app, default: 0] += 1
            notification = PushNotification(
                jobID: job.id, app: app, recipient: .channel(channel), payload: payload, expiry: expiry,
                priority: job.priority, campaign: job.campaign, collapseID: job.collapseID, pushType: job.pushType,
                position: position, recordHashes: hashes, user: job.user, timeZone: job.timeZone, isTransactional: job.isTransactional)
        } else {
            let keeps = keepsTokenHex(app)
            notification = PushNotification(
                jobID: job.id, app: app, token: job.token, tokenHex: keeps ? job.tokenHex : nil,
                payload: payload, expiry: job.expiry, priority: job.priority, campaign: job.campaign,
                collapseID: job.collapseID, pushType: job.pushType, position: position, recordHashes: hashes, user: job.user,
                timeZone: job.timeZone, isTransactional: job.isTransactional)
        }
        if job.pushType == .liveactivity && job.priority == .immediate { made.liveActivity10[app, default: 0] += 1 }
        return notification
    }

    private mutating func encoder(app: String, pushType: APNsPushType?, broadcast: Bool) -> PayloadEncoder {
        if let e = encoderFor, e.app == app, e.pushType == pushType, e.broadcast == broadcast { return e.encoder }
        let encoder = PayloadEncoder(
            limit: dispatch.configuration.payloadLimit(app: dispatch.apps[app], pushType: pushType, broadcast: broadcast),
            truncatesAlertBody: dispatch.configuration.gateway.truncateAlert)
        encoderFor = (app, pushType, broadcast, encoder)
        return encoder
    }

    private mutating func keepsTokenHex(_ app: String) -> Bool {
        if let known = keepsHexFor, known.app == app { return known.keeps }
        let keeps = dispatch.apps[app]?.transport.capabilities.addressesTokensByHex ?? true
        keepsHexFor = (app, keeps)
        return keeps
    }
}

extension DecodedBatch {
    /// The jobs at `indices` (positions in `jobs`) as a batch of their own, to gate again.
    func retry(_ indices: [Int]) -> DecodedBatch {
        DecodedBatch(
            messages: indices.map { messages[jobMessages[$0]] }, jobs: indices.map { jobs[$0] }, jobMessages: Array(indices.indices),
            deadLetters: [], isRetry: true)
    }
}
