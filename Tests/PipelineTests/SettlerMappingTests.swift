import APNsProtocol
import Jobs
import Kafka
import Redis
import Sender
import Testing

@testable import Pipeline

/// The settler acts on what a transport's rejection means, whichever protocol produced it.
@Suite struct SettlerMappingTests {
    static let token = try! DeviceToken(hex: String(repeating: "ab", count: 32))

    static func outcome(_ id: String, _ delivery: Delivery, code: String? = nil, offset: Int64) -> Sender.Outcome {
        Sender.Outcome(
            notification: PushNotification(
                jobID: id, app: "com.example.shop", token: token, payload: [], expiry: 0, priority: .immediate, campaign: "c",
                position: SourcePosition(partition: 3, offset: offset)),
            delivery: delivery, code: code, attempts: 1, connection: 2)
    }

    @Test func rejectionsBecomeOutcomesByMeaning() {
        var events = SenderEvents()
        events.replayed = 4
        events.ambiguous = 1
        let batch = OutcomeBatch(
            app: "com.example.shop", connection: 2,
            outcomes: [
                Self.outcome("ok", .accepted, offset: 10),
                Self.outcome("bin8", .rejected(.invalidToken(since: nil, reason: "invalid-token")), code: "8", offset: 11),
                Self.outcome(
                    "h410", .rejected(.invalidToken(since: 1_700_000_000, reason: "unregistered")), code: "Unregistered", offset: 12),
                Self.outcome("bad", .rejected(.badRequest(reason: "BadTopic")), code: "BadTopic", offset: 13),
                Self.outcome("busy", .rejected(.transient(reason: "ServiceUnavailable")), code: "ServiceUnavailable", offset: 14),
            ],
            events: events)
        let item = OutcomeRecords.settlerItem(batch, topic: "jobs")
        #expect(item.outcomes.map(\.kind) == [.accepted, .rejected, .rejected, .deadLettered, .deadLettered])
        #expect(
            item.outcomes.map(\.suppressToken) == [
                nil, TokenSuppression(since: nil, reason: "invalid-token"), TokenSuppression(since: 1_700_000_000, reason: "unregistered"),
                nil, nil,
            ])
        #expect(item.outcomes.map(\.code) == [nil, "8", "Unregistered", "BadTopic", "ServiceUnavailable"])
        #expect(
            item.outcomes.allSatisfy { $0.shard == 2 && $0.campaign == "c" && $0.tokenHash == RedisKeys.tokenHash(hex: Self.token.hex) })
        // The hex only where a suppression writes it.
        #expect(item.outcomes.map(\.tokenHex) == [nil, Self.token.hex, Self.token.hex, nil, nil])
        #expect(item.refs.map(\.offset) == [10, 11, 12, 13, 14])
        #expect(item.refs.allSatisfy { $0.topic == "jobs" && $0.partition == 3 })
        #expect(item.events.replayed == 4 && item.events.ambiguous == 1)
        #expect(item.shardEvents == [ShardEvents(app: "com.example.shop", shard: 2, replayed: 4)])
    }

    /// A campaign job's id (`<campaign>:<token hex>`) is kept as its campaign and token and made in a
    /// buffer when needed: its outcome's fingerprint is that of the id's text, as for a kept id.
    @Test func aCampaignJobsOutcomeIsFingerprintedAsItsIDsText() {
        let made = "c:" + Self.token.hex
        let batch = OutcomeBatch(
            app: "com.example.shop", connection: 2,
            outcomes: [Self.outcome(made, .accepted, offset: 1), Self.outcome("c:kept", .accepted, offset: 2)], events: SenderEvents())
        #expect(batch.outcomes[0].notification.jobID == made)
        let item = OutcomeRecords.settlerItem(batch, topic: "jobs")
        #expect(item.outcomes.map(\.fingerprint) == [made, "c:kept"].map(JobFingerprint.init(jobID:)))
        #expect(item.outcomes[0].fingerprint != JobFingerprint(jobID: "c:" + Self.token.hex.uppercased()))
    }

    /// The gate's hashes of a job's id and recipient, carried on its notification (`RecordHashes`), settle
    /// it under the keys the settle would compute itself: for a kept id, a campaign job's made id and a
    /// broadcast's channel.
    @Test func theGatesRecordHashesSettleUnderTheSameKeys() throws {
        let channel = try #require(BroadcastChannelID("dHN0LXNyY2gtMDAwMDAx"))
        let device = Self.outcome("kept", .accepted, offset: 1).notification
        let campaignJob = Self.outcome("c:" + Self.token.hex, .accepted, offset: 2).notification
        let broadcast = PushNotification(
            jobID: "b1", app: "com.example.shop", recipient: .channel(channel), payload: [], expiry: 0, priority: .immediate)
        let requests = [
            GateRequest(jobID: "kept", app: "com.example.shop", tokenHex: Self.token.hex),
            GateRequest(jobID: "c:" + Self.token.hex, app: "com.example.shop", tokenHex: Self.token.hex),
            GateRequest(jobID: "b1", app: "com.example.shop", channelID: channel.value),
        ]
        for (notification, request) in zip([device, campaignJob, broadcast], requests) {
            var carried = notification
            carried.recordHashes = RecordHashes(request)
            let computed = OutcomeRecords.redisOutcome(
                Sender.Outcome(notification: notification, delivery: .accepted, attempts: 1, connection: 0))
            let fromGate = OutcomeRecords.redisOutcome(
                Sender.Outcome(notification: carried, delivery: .accepted, attempts: 1, connection: 0))
            #expect(fromGate == computed, "\(request.jobID)")
        }
    }

    /// The carried hashes are what the settle uses, and a change of the id or the recipient drops them
    /// (the settle computes them again from what the notification is now).
    @Test func recordHashesAreUsedAndDroppedWithTheirJob() throws {
        var n = Self.outcome("kept", .accepted, offset: 1).notification
        let marker = RecordHashes(idMember: 42, idSpread: 7, recipient: 9)
        n.recordHashes = marker
        let used = OutcomeRecords.redisOutcome(Sender.Outcome(notification: n, delivery: .accepted, attempts: 1, connection: 0))
        #expect(used.fingerprint == JobFingerprint(member: 42, spread: 7) && used.tokenHash == 9)
        var copy = n
        copy.payload = [1]  // not the id or the recipient: kept
        copy.campaign = "other-campaign"  // the id is kept as it was, the token too: kept
        #expect(copy.recordHashes == marker && n.recordHashes == marker)
        copy.jobID = "other"
        #expect(copy.recordHashes == nil && n.recordHashes == marker)
        var retokened = n
        retokened.token = try DeviceToken(hex: String(repeating: "cd", count: 32))
        #expect(retokened.recordHashes == nil)
        let recomputed = OutcomeRecords.redisOutcome(
            Sender.Outcome(notification: retokened, delivery: .accepted, attempts: 1, connection: 0))
        #expect(recomputed.fingerprint == JobFingerprint(jobID: "kept"))
        #expect(recomputed.tokenHash == RedisKeys.tokenHash(hex: String(repeating: "cd", count: 32)))
    }

    /// The transports' ambiguous resends ride on the outcomes and count for their campaign when they
    /// settle (dead-lettered ones too, settled through their letters); the totals keep the batch's events.
    @Test func ambiguousResendsCountForTheirCampaign() {
        var resent = Self.outcome("ok", .accepted, offset: 10)
        resent.ambiguousResends = 2
        var lettered = Self.outcome("busy", .rejected(.transient(reason: "ServiceUnavailable")), offset: 11)
        lettered.ambiguousResends = 1
        var noCampaign = Self.outcome("solo", .accepted, offset: 12)
        noCampaign.notification.campaign = nil
        noCampaign.ambiguousResends = 1
        var events = SenderEvents()
        events.ambiguous = 4
        let batch = OutcomeBatch(
            app: "com.example.shop", connection: 2,
            outcomes: [resent, lettered, noCampaign, Self.outcome("once", .accepted, offset: 13)], events: events)
        let item = OutcomeRecords.settlerItem(batch, topic: "jobs", keepingDeadLetters: false)
        #expect(item.campaignEvents.keys.sorted() == ["c"])
        #expect(item.campaignEvents["c"]?.ambiguous == 3)
        #expect(item.events.ambiguous == 4, "the totals are not counted twice")
    }

    /// Jobs a gateway refused for good are dead-lettered before they settle: the letter is the job as
    /// it was sent (a valid job message), with the gateway's reason.
    @Test func refusedJobsSettleThroughTheirDeadLetters() throws {
        var bad = Self.outcome("bad", .rejected(.badRequest(reason: "BadTopic")), code: "BadTopic", offset: 13)
        bad.notification.payload = Array(#"{"aps":{"alert":"Bonjour"},"jid":"bad"}"#.utf8)
        bad.notification.collapseID = "score-42"
        bad.notification.pushType = .alert
        bad.notification.user = "u-\"81\""
        bad.notification.timeZone = "Europe/Paris"
        bad.notification.isTransactional = true
        var busy = Self.outcome("busy", .rejected(.transient(reason: "ServiceUnavailable")), code: "ServiceUnavailable", offset: 14)
        busy.notification.payload = Array(#"{"aps":{"alert":"Hello"}}"#.utf8)
        let batch = OutcomeBatch(
            app: "com.example.shop", connection: 2,
            outcomes: [
                Self.outcome("ok", .accepted, offset: 10), bad, busy,
            ],
            events: SenderEvents())
        let share = OutcomeRecords.settlerShare(batch, topic: "jobs")
        // An outcome carries its id's fingerprint, made from the notification's id bytes.
        #expect(share.item.outcomes.map(\.fingerprint) == ["ok"].map(JobFingerprint.init(jobID:)))
        #expect(share.item.refs.map(\.offset) == [10])
        #expect(share.deadLetterItem.outcomes.map(\.fingerprint) == ["bad", "busy"].map(JobFingerprint.init(jobID:)))
        #expect(share.deadLetterItem.outcomes.allSatisfy { $0.kind == .deadLettered })
        #expect(share.deadLetterItem.refs.map(\.offset) == [13, 14])
        #expect(share.deadLetters.map(\.reason) == ["gateway-bad-request", "gateway-gave-up"])
        let letter = share.deadLetters[0].message
        #expect(letter.topic == "jobs" && letter.partition == 3 && letter.offset == 13)
        #expect(letter.key == Array(Self.token.hex.utf8))
        #expect(letter.headers.first(named: "gateway-reason")?.stringValue == "BadTopic")
        // The letter is a job message the pipeline would take again.
        let job = try JobDecoder(payloadLimit: 4096).decode(letter.value, now: 0)
        #expect(job.id == "bad" && job.app == "com.example.shop" && job.token == Self.token && job.campaign == "c")
        #expect(job.collapseID == "score-42" && job.pushType == .alert && job.priority == .immediate)
        #expect(job.payload.aps.alert == .text("Bonjour"))
        // Its recipient too, so the audience rules judge it as they did the job.
        #expect(job.user == "u-\"81\"" && job.timeZone == "Europe/Paris" && job.isTransactional)
        let plain = try JobDecoder(payloadLimit: 4096).decode(share.deadLetters[1].message.value, now: 0)
        #expect(plain.user == nil && plain.timeZone == nil && !plain.isTransactional)
    }

    /// A job its transport held back (its campaign paused) is kept in Redis as the job it was, recipient
    /// and all: released, it meets the audience rules as it did before.
    @Test func aHeldJobKeepsItsRecipient() throws {
        var held = Self.outcome("held", .held, offset: 20)
        held.notification.payload = Array(#"{"aps":{"alert":"Later"}}"#.utf8)
        held.notification.user = "u-7"
        held.notification.timeZone = "Asia/Tokyo"
        let item = OutcomeRecords.settlerItem(
            OutcomeBatch(app: "com.example.shop", connection: 2, outcomes: [held], events: SenderEvents()), topic: "jobs")
        let member = try #require(item.deferred.first?.messages.first)
        let value = Array(member.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)[1])
        let job = try JobDecoder(payloadLimit: 4096).decode(value, now: 0)
        #expect(job.id == "held" && job.user == "u-7" && job.timeZone == "Asia/Tokyo" && !job.isTransactional)
    }
}
