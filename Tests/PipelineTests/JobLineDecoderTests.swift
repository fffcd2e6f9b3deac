import APNsProtocol
import Jobs
import Logging
import Sender
import Synchronization
import Testing
import Tools

@testable import Pipeline

/// `send`'s input path: job lines decoded through templates (`JobLineDecoder`) give exactly what the
/// plain decoder and a per-job encoding give for the same lines — notifications byte for byte, and
/// every refusal with the same reason and detail.
@Suite struct JobLineDecoderTests {
    static let now: UInt32 = 1_767_000_000
    static let app = "com.example.shop"
    static let tokenHex = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
    static let payload = #"{"aps":{"alert":{"title":"Spring sale","body":"Everything is 20% off."},"sound":"default"},"acme":1}"#

    static func line(
        id: String = "sale:1", app: String = #""com.example.shop""#, token: String? = nil, payload: String? = nil, extra: String = ""
    ) -> [UInt8] {
        let t = token ?? "\"\(tokenHex)\""
        return Array(#"{"id":"\#(id)","app":\#(app),"token":\#(t),"payload":\#(payload ?? Self.payload)\#(extra)}"#.utf8)
    }

    /// The reference: the plain decoder, the app check and a fresh encoding of each job's payload (what
    /// `send` did per line before templates).
    static func plain(_ line: [UInt8], payloadLimit: Int, jobIDKey: String?) -> Result<PushNotification, JobLineDecoder.Refusal> {
        do throws(JobError) {
            let job = try JobDecoder(payloadLimit: payloadLimit, apps: KnownApps([app])).decode(line, now: now)
            let payload = try job.encodedPayload(language: nil, encoder: PayloadEncoder(limit: payloadLimit), jobIDKey: jobIDKey)
            return .success(
                PushNotification(
                    jobID: job.id, app: job.app, token: job.token, payload: payload, expiry: job.expiry, priority: job.priority,
                    campaign: job.campaign, collapseID: job.collapseID, pushType: job.pushType, user: job.user, timeZone: job.timeZone,
                    isTransactional: job.isTransactional))
        } catch {
            if error.reason == .noCertificateForApp {
                return .failure(.init(reason: "app-mismatch", detail: "\(error.detail); this pool sends for \(app)"))
            }
            return .failure(.init(reason: error.reason.rawValue, detail: error.detail))
        }
    }

    static func same(_ a: PushNotification, _ b: PushNotification) -> Bool {
        a.jobID == b.jobID && a.app == b.app && a.token == b.token && a.payload == b.payload && a.expiry == b.expiry
            && a.priority == b.priority && a.campaign == b.campaign && a.collapseID == b.collapseID && a.pushType == b.pushType
            && a.position == nil && b.position == nil && a.user == b.user && a.timeZone == b.timeZone
            && a.isTransactional == b.isTransactional
    }

    /// A campaign's lines (one payload, many jobs) mixed with lines that must be refused, each decoded
    /// twice over (so templates are both made and reused), for both payload limits and with `jid`.
    @Test(arguments: [(4096, nil), (2048, nil), (4096, "jid")] as [(Int, String?)])
    func sameAsThePlainDecoder(payloadLimit: Int, jobIDKey: String?) {
        let big = #"{"aps":{"alert":"\#(String(repeating: "a", count: 3000))"}}"#
        var lines: [[UInt8]] = []
        for i in 0..<5 { lines.append(Self.line(id: "sale:\(i)")) }
        lines += [
            Self.line(id: "other", app: #""com.example.other""#),  // app-mismatch, with a known payload
            Self.line(id: "esc", app: #""com.example.\u0073hop""#),  // the same app, spelled with an escape
            Self.line(id: "esc2", app: #""com.example.\u006fther""#),  // another app, spelled with an escape
            Self.line(id: "long", app: "\"\(String(repeating: "a", count: 400_000))\""),  // invalid-app, never built
            Self.line(id: "long2", app: "\"\(String(repeating: "\\u0061", count: 50))\""),  // 300 bytes of escapes, 50 of app
            Self.line(id: "tok", token: #""0a1b""#),  // invalid-token
            Self.line(id: "tok2", token: "12"),
            Self.line(id: "nopay", payload: "null"),  // missing-payload
            Self.line(id: "badpay", payload: #"{"aps":{"badge":"x"}}"#),  // invalid-payload
            Self.line(id: "noaps", payload: #"{"acme":1}"#),
            Self.line(id: "big", payload: big),  // payload-too-large for 2048 only
            Self.line(id: "ca", payload: #"{"aps":{"content-available":1}}"#),  // priority 10 with content-available only
            Self.line(id: "ca5", payload: #"{"aps":{"content-available":1}}"#, extra: #","priority":5,"push_type":"background""#),
            Self.line(id: "exp", extra: #","expiry":5"#),  // expired
            Self.line(id: "exp0", extra: #","expiry":0,"campaign":"spring","collapse_id":"sale""#),
            Self.line(id: "dup", extra: #","payload":{"aps":{}}"#),  // a key twice: invalid-json
            Self.line(id: "who", extra: #","user":"u-1","time_zone":"Europe/Paris","transactional":true"#),  // carried
            Self.line(id: "tz", extra: #","time_zone":"Mars/Olympus""#),  // invalid-time-zone
            Self.line(id: "jid", payload: #"{"aps":{"alert":"x"},"jid":"old"}"#),  // jid replaced when embedded
            Array(#"{"id":"x","#.utf8),  // invalid-json
            Array("[1,2]".utf8),  // not-an-object
            Array(#"{"app":"com.example.shop"}"#.utf8),  // missing-id
        ]
        for i in 5..<8 { lines.append(Self.line(id: "sale:\(i)")) }
        let decoder = JobLineDecoder(app: Self.app, payloadLimit: payloadLimit, jobIDKey: jobIDKey)
        var refused = Set<String>()
        for pass in 0..<2 {
            for line in lines {
                let text = String(decoding: line, as: UTF8.self)
                switch (Self.plain(line, payloadLimit: payloadLimit, jobIDKey: jobIDKey), decoder.notification(line, now: Self.now)) {
                case (.success(let a), .success(let b)):
                    #expect(Self.same(a, b), "pass \(pass): \(text)")
                case (.failure(let a), .failure(let b)):
                    #expect(a == b, "pass \(pass): \(text)")
                    refused.insert(a.reason)
                case (let a, let b):
                    Issue.record("pass \(pass): \(a) vs \(b) for \(text)")
                }
            }
        }
        // The lines above do reach the refusals they are there for.
        for reason in [
            "app-mismatch", "invalid-app", "invalid-token", "missing-payload", "invalid-payload", "expired", "invalid-json",
            "not-an-object", "missing-id", "invalid-time-zone",
        ] {
            #expect(refused.contains(reason), "\(reason) never came up")
        }
        #expect(refused.contains("payload-too-large") == (payloadLimit == 2048))
    }

    /// A line's recipient (`user`, `time_zone`, `transactional`) travels with its notification.
    @Test func theRecipientTravelsWithTheNotification() throws {
        let decoder = JobLineDecoder(app: Self.app, payloadLimit: 4096)
        let n = try decoder.notification(
            Self.line(id: "who", extra: #","user":"u-1","time_zone":"Europe/Paris","transactional":true"#), now: Self.now
        ).get()
        #expect(n.user == "u-1" && n.timeZone == "Europe/Paris" && n.isTransactional)
        let plain = try decoder.notification(Self.line(id: "plain"), now: Self.now).get()
        #expect(plain.user == nil && plain.timeZone == nil && !plain.isTransactional)
    }

    /// A campaign's notifications share one encoded payload (one buffer for all), unless each carries
    /// its own job id.
    @Test func campaignJobsShareOnePayloadBuffer() throws {
        func base(_ n: PushNotification) -> UnsafeRawPointer? { n.payload.withUnsafeBytes { $0.baseAddress } }
        let shared = JobLineDecoder(app: Self.app, payloadLimit: 4096)
        let a = try shared.notification(Self.line(id: "a"), now: Self.now).get()
        let b = try shared.notification(Self.line(id: "b"), now: Self.now).get()
        #expect(a.payload == b.payload && base(a) == base(b))
        let own = JobLineDecoder(app: Self.app, payloadLimit: 4096, jobIDKey: "jid")
        let c = try own.notification(Self.line(id: "c"), now: Self.now).get()
        let d = try own.notification(Self.line(id: "d"), now: Self.now).get()
        #expect(c.payload != d.payload)
        #expect(String(decoding: d.payload, as: UTF8.self).contains(#""jid":"d""#))
    }

    /// `send --protocol binary`: a token that is not 32 bytes is refused per line
    /// (`token-size-needs-http2`, as `run` dead-letters it for a binary app); over HTTP/2 it is sent.
    @Test func aBinaryPoolRefusesTokensThatAreNot32Bytes() throws {
        let long = String(repeating: "5a", count: 40)
        let line = Self.line(token: "\"\(long)\"")
        let binary = JobLineDecoder(app: Self.app, payloadLimit: 2048, binary: true)
        guard case .failure(let refusal) = binary.notification(line, now: Self.now) else {
            Issue.record("a 40-byte token was accepted for a binary pool")
            return
        }
        #expect(
            refusal
                == .init(
                    reason: "token-size-needs-http2",
                    detail:
                        "app com.example.shop uses the binary interface, which takes 32-byte device tokens only; this token is 40 bytes (80 hex digits): send it over HTTP/2 (transport: http2)"
                ))
        #expect(try binary.notification(Self.line(), now: Self.now).get().token.hex == Self.tokenHex)
        let http2 = JobLineDecoder(app: Self.app, payloadLimit: 4096)
        #expect(try http2.notification(line, now: Self.now).get().token.hex == long)
    }

    // MARK: broadcasts (design §5.5)

    static let channel = "dHN0LXNyY2gtMDAwMDAx"
    static func broadcastLine(id: String = "b", extra: String = "", content: String = #"{"home":2}"#) -> [UInt8] {
        Array(
            #"{"id":"\#(id)","app":"com.example.shop","channel":"\#(channel)","payload":{"aps":{"event":"update","timestamp":1767000000,"content-state":\#(content)}}\#(extra)}"#
                .utf8)
    }

    /// A broadcast takes Apple's 5120 bytes where a device push takes 4096; its expiry is its job's own
    /// word (0 without one) until its channel's policy is learned.
    @Test func aBroadcastLineCarriesWhatItsExpirationIsMadeOf() throws {
        let lines = JobLineDecoder(app: Self.app, payloadLimit: 4096, canBroadcast: true)
        let big = Self.broadcastLine(content: #"{"text":""# + String(repeating: "x", count: 4400) + #""}"#)
        let decoded = try lines.line(big, now: Self.now).get()
        #expect(decoded.notification.payload.count > 4096 && decoded.notification.channel?.value == Self.channel)
        #expect(decoded.broadcast == BroadcastExpiryRequest(statedExpiry: nil, storagePolicy: nil))
        #expect(decoded.notification.expiry == 0)
        let own = try lines.line(Self.broadcastLine(extra: #","expiry":\#(Self.now + 60),"storage_policy":"most-recent""#), now: Self.now)
            .get()
        #expect(own.broadcast == BroadcastExpiryRequest(statedExpiry: Self.now + 60, storagePolicy: .mostRecent))
        #expect(own.notification.expiry == Self.now + 60)
        // A device push of that size is still refused.
        let device = lines.line(Self.line(payload: #"{"aps":{"alert":""# + String(repeating: "x", count: 4400) + #""}}"#), now: Self.now)
        #expect(device.failureReason == "payload-too-large")
    }

    /// The rule with a channel's policy learned (a scripted reader stands in for channel management).
    @Test func aBroadcastsExpirationFollowsItsChannelsPolicy() async {
        let reads = ReadCounter()
        let policies = ChannelPolicies(logger: Logger(label: "test")) { _, channel in
            reads.add()
            return channel == Self.channel ? .policy(.noStorage) : .policy(.mostRecent)
        }
        let app = Self.app
        let nms = BroadcastChannelID(Self.channel)!
        let mrm = BroadcastChannelID("bW9zdA==")!
        func expiration(_ r: BroadcastExpiryRequest, _ c: BroadcastChannelID) async -> Result<UInt32, JobError> {
            await r.expiration(app: app, channel: c, policies: policies, now: Self.now)
        }
        #expect(await expiration(.init(statedExpiry: nil, storagePolicy: nil), nms) == .success(0))
        #expect(await expiration(.init(statedExpiry: 0, storagePolicy: nil), nms) == .success(0))
        let refused = await expiration(.init(statedExpiry: Self.now + 60, storagePolicy: nil), nms)
        #expect((try? refused.get()) == nil)
        if case .failure(let e) = refused { #expect(e.reason == .expiryOnNoStorageChannel && e.detail.contains("No Message Stored")) }
        #expect(await expiration(.init(statedExpiry: nil, storagePolicy: nil), mrm) == .success(Self.now + 8 * 3600))
        #expect(await expiration(.init(statedExpiry: Self.now + 60, storagePolicy: nil), mrm) == .success(Self.now + 60))
        // The job's stated policy wins (no read for it); expiry 0 needs no read either.
        #expect(
            await expiration(.init(statedExpiry: nil, storagePolicy: .mostRecent), BroadcastChannelID("b3RoZXI=")!)
                == .success(Self.now + 8 * 3600))
        #expect(await expiration(.init(statedExpiry: 0, storagePolicy: nil), BroadcastChannelID("emVybw==")!) == .success(0))
        #expect(reads.value == 2 && policies.readsMade == 2)
    }
}

private final class ReadCounter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

extension Result where Success == JobLineDecoder.Line, Failure == JobLineDecoder.Refusal {
    var failureReason: String? {
        if case .failure(let r) = self { return r.reason }
        return nil
    }
}
