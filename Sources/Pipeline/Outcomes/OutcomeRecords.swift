import APNsProtocol
import Foundation
import Jobs
import Kafka
import Redis
import Sender

/// What the settler records of the transports' outcomes (pure: no I/O): Redis outcomes, Kafka
/// positions, dead letters of what a gateway refused, and the outcomes stream's messages.
enum OutcomeRecords {
    /// The Kafka position a notification carries through the sender: its partition, offset and lane, which
    /// names its topic (the jobs topic, or the priority topic, design §1.4), so no notification carries
    /// a topic's name.
    static func position(of message: KafkaConsumerMessage, lane: Lane = .bulk) -> SourcePosition {
        SourcePosition(partition: message.partition, offset: message.offset, lane: lane)
    }
    /// The message a position names: in the jobs topic (`topic`), or for the priority lane in `priorityTopic`.
    static func ref(topic: String, priorityTopic: String? = nil, position: SourcePosition) -> MessageRef {
        let topic = position.lane == .priority ? (priorityTopic ?? topic) : topic
        return MessageRef(topic: topic, partition: position.partition, offset: position.offset)
    }

    /// What the settler makes of a transport's outcome batch: `item` settles now; the jobs a gateway
    /// refused for good (bad request, or a transient failure past its attempts) are dead-lettered first,
    /// as the job that was sent, and `deadLetterItem` settles them once their letters are stored.
    struct SettlerShare {
        var item = SettlerInbox.Item()
        var deadLetters: [DeadLetterWriter.Letter] = []
        var deadLetterItem = SettlerInbox.Item()
    }

    /// Dead-letter reasons (the DLQ's `reason` header) of jobs a gateway refused; the gateway's own
    /// reason is in the `gateway-reason` header, as sent but at most `RefusalCode.maxTextBytes`.
    enum GatewayRefusal {
        static let badRequest = "gateway-bad-request"
        static let transient = "gateway-gave-up"
        static let header = "gateway-reason"

        /// The dead-letter reason of a job the gateway refused for good.
        static func reason(_ rejection: Rejection) -> String {
            if case .badRequest = rejection { badRequest } else { transient }
        }
    }

    /// `messages`: also make each outcome's message for the outcomes stream (`kafka.outcomes_topic` is set).
    static func settlerShare(
        _ batch: OutcomeBatch, topic: String, priorityTopic: String? = nil, messages: OutcomeMessageOptions? = nil
    ) -> SettlerShare {
        var share = SettlerShare()
        share.item = settlerItem(batch, topic: topic, priorityTopic: priorityTopic, keepingDeadLetters: false, messages: messages)
        for o in batch.outcomes {
            guard let rejection = o.rejection, o.kind == .deadLettered, let position = o.notification.position else { continue }
            let reason = GatewayRefusal.reason(rejection)
            let message = KafkaConsumerMessage(
                topic: position.lane == .priority ? (priorityTopic ?? topic) : topic, partition: position.partition,
                offset: position.offset, key: Array(o.notification.recipientKey.utf8),
                value: sentJob(o.notification),
                headers: [KafkaHeader(key: GatewayRefusal.header, string: RefusalCode.bounded(rejection.reason))])
            share.deadLetters.append((message, reason))
            share.deadLetterItem.outcomes.append(redisOutcome(o))
            share.deadLetterItem.refs.append(ref(topic: topic, priorityTopic: priorityTopic, position: position))
            if let messages {
                share.deadLetterItem.messages.append(
                    OutcomeMessage(o, kind: .deadLettered, reason: reason, hasRequestID: messages.appsWithRequestIDs.contains(batch.app)))
            }
        }
        return share
    }

    /// The job as it was sent, in the jobs topic's format: its payload is the one the gateway refused
    /// (localized, and with `jid` in dev setups), so an operator can read it or publish it again; its
    /// recipient (`user`, `time_zone`, `transactional`) as the job named it, so the audience rules see
    /// the same job again.
    static func sentJob(_ n: PushNotification) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(n.payload.count + 256)
        func key(_ name: String) {
            out.append(out.isEmpty ? UInt8(ascii: "{") : UInt8(ascii: ","))
            JSONWriter.writeString(name, into: &out)
            out.append(UInt8(ascii: ":"))
        }
        key("id")
        JSONWriter.writeString(n.jobID, into: &out)
        key("app")
        JSONWriter.writeString(n.app, into: &out)
        if let channel = n.channel {
            key("channel")
            JSONWriter.writeString(channel.value, into: &out)
        } else {
            key("token")
            JSONWriter.writeString(n.tokenHex, into: &out)
        }
        key("payload")
        out.append(contentsOf: n.payload)
        key("expiry")
        out.append(contentsOf: Array(String(n.expiry).utf8))
        key("priority")
        out.append(contentsOf: Array(String(n.priority.rawValue).utf8))
        if let campaign = n.campaign {
            key("campaign")
            JSONWriter.writeString(campaign, into: &out)
        }
        if let collapseID = n.collapseID {
            key("collapse_id")
            JSONWriter.writeString(collapseID, into: &out)
        }
        if let pushType = n.pushType {
            key("push_type")
            JSONWriter.writeString(pushType.rawValue, into: &out)
        }
        if let user = n.user {
            key("user")
            JSONWriter.writeString(user, into: &out)
        }
        if let timeZone = n.timeZone {
            key("time_zone")
            JSONWriter.writeString(timeZone, into: &out)
        }
        if n.isTransactional {
            key("transactional")
            out.append(contentsOf: "true".utf8)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func redisOutcome(_ o: Sender.Outcome) -> SettledOutcome {
        // The settler acts on what a rejection means, never on a protocol's status number.
        let n = o.notification
        // Read once: the settle of every outcome runs on a transport's event loop.
        let channel = n.channel
        var suppression: TokenSuppression?
        // A broadcast never suppresses anything (a channel is no token; `Outcome` already turns such an
        // answer into a dead letter): checked here too, so no path can write a channel id as a token.
        if channel == nil, case .rejected(.invalidToken(let since, let reason)) = o.delivery {
            suppression = TokenSuppression(since: since, reason: reason)
        }
        let kind: SettledOutcomeKind =
            switch o.kind {
            case .accepted: .accepted
            case .rejected: .rejected
            case .deadLettered: .deadLettered
            case .cancelled: .cancelled
            case .deferred: .deferred
            }
        // As its gate computed them, when the send stage carried them here. Else the id's fingerprint
        // from its bytes (a campaign job's id is never made as a String) and the token's hash from its
        // hex written into a buffer: its hex as a String (which a binary notification does not keep)
        // only when a suppression writes it.
        let fingerprint: JobFingerprint
        let tokenHash: UInt32
        if let hashes = n.recordHashes {
            fingerprint = hashes.fingerprint
            tokenHash = hashes.recipient
        } else if let channel {
            fingerprint = n.withJobIDBytes { JobFingerprint(jobIDBytes: $0) }
            // The bucket the gate leased it in (`GateRequest(jobID:app:channelID:)`).
            tokenHash = RedisKeys.tokenHash(hex: channel.value)
        } else {
            fingerprint = n.withJobIDBytes { JobFingerprint(jobIDBytes: $0) }
            tokenHash = withUnsafeTemporaryAllocation(byteCount: n.token.hexCount, alignment: 1) { hex in
                n.token.writeHex(into: hex)
                return RedisKeys.tokenHash(hexBytes: UnsafeRawBufferPointer(hex))
            }
        }
        // Counted by name only when Apple documents it (or the pipeline gave it): a gateway's own text
        // would be a Redis field and a metric series of its own.
        var outcome = SettledOutcome(
            fingerprint: fingerprint, app: o.app, tokenHash: tokenHash, tokenHex: suppression == nil ? nil : n.tokenHex,
            campaign: n.campaign, kind: kind, code: o.code.map(RefusalCode.label), suppressToken: suppression, shard: o.connection)
        outcome.isBroadcast = channel != nil
        return outcome
    }

    /// The outcomes of `batch` as the settler records them, with the batch's events. Without
    /// `keepingDeadLetters`, dead-lettered outcomes that carry a Kafka position are left out (they settle
    /// through `settlerShare`'s dead letters).
    /// With `messages`, each outcome's message for the outcomes stream too.
    static func settlerItem(
        _ batch: OutcomeBatch, topic: String, priorityTopic: String? = nil, keepingDeadLetters: Bool = true,
        messages: OutcomeMessageOptions? = nil
    ) -> SettlerInbox.Item {
        var item = SettlerInbox.Item()
        item.outcomes.reserveCapacity(batch.outcomes.count)
        for o in batch.outcomes {
            // The transport's ambiguous resends of this notification, now that it has settled, counted
            // for its campaign (the totals already have them, from `batch.events.ambiguous`). Before the
            // dead-letter skip: those resends happened whichever way the outcome settles.
            if o.ambiguousResends > 0, let campaign = o.notification.campaign {
                item.campaignEvents[campaign, default: PipelineEvents()].ambiguous += Int(o.ambiguousResends)
            }
            if !keepingDeadLetters, o.kind == .deadLettered, o.notification.position != nil { continue }
            if o.kind == .deferred, let campaign = o.notification.campaign {
                // Held back by its transport (its campaign paused): kept in Redis as the job that would have
                // been sent, published again on resume (design §2.11).
                let n = o.notification
                item.deferred.append(
                    Deferral(
                        campaign: campaign, mode: .hold(dueMs: Int64(Date().timeIntervalSince1970 * 1000)),
                        messages: [DeferredMessage.member(key: Array(n.recipientKey.utf8), value: sentJob(n))]))
            }
            let outcome = redisOutcome(o)
            let kind = outcome.kind
            item.outcomes.append(consume outcome)
            if let position = o.notification.position {
                item.refs.append(ref(topic: topic, priorityTopic: priorityTopic, position: position))
            }
            // A job held back (its campaign paused) is not done: its message comes when it settles after
            // the release.
            if let messages, kind != .deferred {
                let reason = o.kind == .deadLettered ? o.rejection.map(GatewayRefusal.reason) : nil
                item.messages.append(
                    OutcomeMessage(o, kind: kind, reason: reason, hasRequestID: messages.appsWithRequestIDs.contains(batch.app)))
            }
        }
        item.events.replayed = batch.events.replayed
        item.events.ambiguous = batch.events.ambiguous
        item.events.retried = batch.events.retried
        item.events.reconnects = batch.events.reconnects
        item.events.lostAfterSettle = batch.events.lostAfterSettle
        item.events.refusedAfterSettle = batch.events.refusedAfterSettle
        item.events.gaveUp = batch.events.gaveUp
        if !batch.events.retriedBy.isEmpty {
            for reason in RetryReason.allCases where batch.events.retriedBy[reason] > 0 {
                item.events.retriedBy[reason.label] = batch.events.retriedBy[reason]
            }
        }
        if batch.events.replayed > 0 {
            item.shardEvents.append(ShardEvents(app: batch.app, shard: batch.connection, replayed: batch.events.replayed))
        }
        return item
    }
}
