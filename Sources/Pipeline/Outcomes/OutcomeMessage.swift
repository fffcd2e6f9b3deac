import APNsProtocol
import Jobs
import Redis
import Sender

/// One message of the outcomes stream (`kafka.outcomes_topic`, `docs/design.md §3.5`): what became of
/// one settled job, for the producers' own databases. Built only when the topic is configured (the
/// stages ask ``OutcomeStream/isOn`` first), so without it no job id or token string is made for it.
///
/// The value is a JSON object with a fixed set of keys (a key whose value is unknown is `null`, never
/// left out): `id`, `app`, `token` (a broadcast: `channel` in its place), `campaign`, `outcome`,
/// `reason`, `code`, `apns_id`, `since`, `at`. The Kafka key is the token's hex (a broadcast: its
/// channel id), so one device's outcomes stay in order within a partition.
struct OutcomeMessage: Sendable, Equatable {
    /// The job id; nil only for a message that was no valid job (no id could be read from it).
    var id: String?
    /// The job's app (bundle id); nil for a message that was no valid job.
    var app: String?
    /// The device token's lower-case hex; nil for a broadcast (``channel``) or a message that was no valid job.
    var token: String?
    /// A broadcast's channel id (then there is no ``token``).
    var channel: String?
    var campaign: String?
    var outcome: SettledOutcomeKind
    /// Why: for `dead_lettered` the dead-letter topic's `reason` header (`payload-too-large`,
    /// `gateway-bad-request`, …); for `rejected` what the rejection means (`unregistered`, `invalid-token`).
    var reason: String?
    /// The gateway's own code for a refusal: the HTTP/2 reason (`Unregistered`, `BadDeviceToken`) or the
    /// binary error-response status (`8`), as sent (at most `RefusalCode.maxTextBytes`), even when the
    /// counters name it `other`.
    var code: String?
    /// HTTP/2: the request's `apns-id` (a broadcast's `apns-request-id`), which APNs echoes in its answer
    /// and Apple's logs name. Nil when the job was never written to an HTTP/2 connection.
    var apnsID: String?
    /// A 410 Unregistered answer's `timestamp`, in epoch seconds: the last time APNs knew the token valid.
    var since: Int64?

    /// The Kafka key: the token's hex, a broadcast's channel id, or none.
    var key: [UInt8]? {
        if let channel { return Array(channel.utf8) }
        if let token { return Array(token.utf8) }
        return nil
    }

    /// The JSON value; `at` is the settle time in epoch seconds.
    func value(at: Int64) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        func key(_ name: StaticString) {
            out.append(out.isEmpty ? UInt8(ascii: "{") : UInt8(ascii: ","))
            out.append(UInt8(ascii: "\""))
            name.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        }
        func string(_ s: String?) {
            if let s { JSONWriter.writeString(s, into: &out) } else { out.append(contentsOf: "null".utf8) }
        }
        func number(_ n: Int64?) {
            out.append(contentsOf: n.map { String($0) }.map { Array($0.utf8) } ?? Array("null".utf8))
        }
        key("id")
        string(id)
        key("app")
        string(app)
        if let channel {
            key("channel")
            string(channel)
        } else {
            key("token")
            string(token)
        }
        key("campaign")
        string(campaign)
        key("outcome")
        string(outcome.rawValue)
        key("reason")
        string(reason)
        key("code")
        string(code)
        key("apns_id")
        string(apnsID)
        key("since")
        number(since)
        key("at")
        number(at)
        out.append(UInt8(ascii: "}"))
        return out
    }
}

extension OutcomeMessage {
    /// A job settled by the pipeline before it was sent (deduped, suppressed, or refused: `reason`).
    init(job: some GatedJob, outcome: SettledOutcomeKind, reason: String? = nil) {
        self.init(
            id: job.id, app: job.app, token: job.isBroadcast ? nil : job.tokenHex, channel: job.isBroadcast ? job.recipientKey : nil,
            campaign: job.campaign, outcome: outcome, reason: reason)
    }

    /// A notification settled without an answer from a gateway (e.g. no certificate for its app).
    init(notification n: PushNotification, outcome: SettledOutcomeKind, reason: String?) {
        self.init(
            id: n.jobID, app: n.app, token: n.channel == nil ? n.tokenHex : nil, channel: n.channel?.value, campaign: n.campaign,
            outcome: outcome, reason: reason)
    }

    /// A transport's outcome. `reason` overrides the rejection's meaning (a dead letter's DLQ reason);
    /// `hasRequestID`: the app's transport's requests carry an id (HTTP/2's `apns-id`).
    init(_ o: Sender.Outcome, kind: SettledOutcomeKind, reason: String?, hasRequestID: Bool) {
        let n = o.notification
        var since: Int64?
        if case .rejected(.invalidToken(let s, _)) = o.delivery { since = s }
        self.init(
            id: n.jobID, app: n.app, token: n.channel == nil ? n.tokenHex : nil, channel: n.channel?.value, campaign: n.campaign,
            outcome: kind, reason: reason ?? o.rejection?.reason, code: o.code.map(RefusalCode.bounded),
            // Written at least once (a request HTTP/2 refused before writing it has `attempts` 0).
            apnsID: hasRequestID && o.attempts > 0 ? n.apnsID : nil, since: since)
    }
}
