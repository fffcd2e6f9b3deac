import APNsProtocol
import Jobs
import Kafka
import Redis
import Sender
import Testing
import Tools

@testable import Pipeline

/// Issue 31 item 2, the settle of a broadcast without I/O: it writes to its channel's bucket (where the
/// gate leased it), never suppresses (an answer that would suppress a device becomes a dead letter with
/// the gateway's reason), counts as a broadcast, and its dead letter is the job as sent, naming its channel.
@Suite struct BroadcastSettlerTests {
    static let channel = BroadcastChannelID("dHN0LXNyY2gtMDAwMDAx")!

    static func outcome(_ id: String, _ delivery: Delivery, code: String? = nil, offset: Int64) -> Sender.Outcome {
        Sender.Outcome(
            notification: PushNotification(
                jobID: id, app: "com.example.shop", recipient: .channel(channel), payload: Array(#"{"aps":{}}"#.utf8), expiry: 7,
                priority: .conservePower, pushType: .liveactivity, position: SourcePosition(partition: 1, offset: offset)),
            delivery: delivery, code: code, attempts: 1, connection: 0)
    }

    @Test func aBroadcastSettlesInItsChannelsBucketAndNeverSuppresses() {
        let batch = OutcomeBatch(
            app: "com.example.shop", connection: 0,
            outcomes: [
                Self.outcome("ok", .accepted, offset: 1),
                Self.outcome(
                    "gone", .rejected(.invalidToken(since: 1_700_000_000, reason: "unregistered")), code: "Unregistered", offset: 2),
            ],
            events: SenderEvents())
        // The transport's outcome already turned the token answer into a dead letter with the gateway's reason.
        #expect(batch.outcomes[1].rejection == .badRequest(reason: "Unregistered") && batch.outcomes[1].kind == .deadLettered)
        let item = OutcomeRecords.settlerItem(batch, topic: "jobs")
        #expect(item.outcomes.map(\.kind) == [.accepted, .deadLettered])
        #expect(item.outcomes.allSatisfy { $0.suppressToken == nil && $0.tokenHex == nil && $0.isBroadcast })
        #expect(item.outcomes.allSatisfy { $0.tokenHash == RedisKeys.tokenHash(hex: Self.channel.value) })
        // The gate's request for the same job lands in the same bucket.
        #expect(
            RedisKeys().tokenBucket(GateRequest(jobID: "ok", app: "com.example.shop", channelID: Self.channel.value).tokenHex)
                == RedisKeys().tokenBucket(hash: item.outcomes[0].tokenHash))

        let share = OutcomeRecords.settlerShare(batch, topic: "jobs")
        #expect(share.deadLetters.count == 1)
        let letter = share.deadLetters[0]
        #expect(letter.reason == OutcomeRecords.GatewayRefusal.badRequest)
        #expect(letter.message.key == Array(Self.channel.value.utf8))
        let sent = String(decoding: letter.message.value, as: UTF8.self)
        #expect(sent.contains(#""channel":"dHN0LXNyY2gtMDAwMDAx""#) && !sent.contains(#""token""#), "\(sent)")
        // The letter decodes as the broadcast it was.
        let job = try? JobDecoder(payloadLimit: 4096).decode(
            Array(sent.replacingOccurrences(of: #""aps":{}"#, with: #""aps":{"event":"end","timestamp":1,"content-state":{}}"#).utf8),
            now: 1)
        #expect(job?.channel == Self.channel && job?.priority == .conservePower)
    }
}

/// `send`'s line decoder: a broadcast only when the pool can send one (HTTP/2 with token auth).
@Suite struct BroadcastSendLineTests {
    static let line = Array(
        #"{"id":"b","app":"com.example.shop","channel":"dHN0LXNyY2gtMDAwMDAx","payload":{"aps":{"event":"update","timestamp":1,"content-state":{}}}}"#
            .utf8)

    @Test func aBroadcastLineNeedsAPoolThatCanBroadcast() throws {
        let refused = JobLineDecoder(app: "com.example.shop", payloadLimit: 4096).notification(Self.line, now: 1_767_000_000)
        guard case .failure(let refusal) = refused else {
            Issue.record("a broadcast was accepted by a pool that cannot send one")
            return
        }
        #expect(refusal.reason == "push-type-needs-token-auth" && refusal.detail.contains("--token-key"), "\(refusal)")
        let n = try JobLineDecoder(app: "com.example.shop", payloadLimit: 4096, canBroadcast: true)
            .notification(Self.line, now: 1_767_000_000).get()
        #expect(
            n.recipient == .channel(BroadcastSettlerTests.channel) && n.pushType == .liveactivity
                && n.recipientKey == BroadcastSettlerTests.channel.value)
    }
}
