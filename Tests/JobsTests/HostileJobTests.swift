import APNsProtocol
import Jobs
import Testing

/// Issue 28: jobs a hostile (or broken) producer writes are refused by the decoder — unknown apps,
/// string fields over their byte limits — the same way through templates (`run`, `send`) as through
/// the plain decoder, and a value far over its limit is refused without being built.
@Suite struct HostileJobTests {
    let now = Fixtures.now
    let apps = KnownApps(["com.example.shop", "com.example.news"])

    /// The error for `bytes` (both decoding paths must agree: `expectSameDecoding`), nil when accepted.
    func error(_ bytes: [UInt8], apps: KnownApps? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> JobError? {
        JobDecoder(apps: apps).refusal(bytes, now: now, sourceLocation: sourceLocation)
    }

    @Test func unknownAppIsRefusedByTheDecoder() throws {
        let other = Fixtures.job(["app": #""com.example.other""#])
        #expect(error(other, apps: apps)?.reason == .noCertificateForApp)
        #expect(error(other, apps: apps)?.detail.contains("com.example.other") == true)
        // The refusal keeps the job's id and campaign (its campaign's progress counts it).
        let inCampaign = error(Fixtures.job(["app": #""com.example.other""#, "campaign": #""spring""#]), apps: apps)
        #expect(inCampaign?.jobID == "spring-sale:000001" && inCampaign?.campaign == "spring")
        #expect(error(Fixtures.job(["token": #""12""#]), apps: apps)?.jobID == nil)
        // Without apps (a tool that only checks jobs) any app goes.
        #expect(error(other) == nil)
        // Configured apps, spelled plainly or with an escape.
        #expect(error(Fixtures.job(["app": #""com.example.news""#]), apps: apps) == nil)
        #expect(error(Fixtures.job(["app": #""com.example.n\u0065ws""#]), apps: apps) == nil)
        #expect(error(Fixtures.job(["app": #""com.example.\u006fther""#]), apps: apps)?.reason == .noCertificateForApp)
        // Case matters: a bundle id is the certificate's topic as written.
        #expect(error(Fixtures.job(["app": #""COM.example.shop""#]), apps: apps)?.reason == .noCertificateForApp)
        // Checked last: a job with another fault reports that one.
        #expect(error(Fixtures.job(["app": #""com.example.other""#, "token": #""12""#]), apps: apps)?.reason == .invalidToken)
        #expect(error(Fixtures.job(["app": #""com.example.other""#, "payload": "null"]), apps: apps)?.reason == .missingPayload)
    }

    @Test func appOver255BytesIsInvalidApp() {
        let max = String(repeating: "a", count: JobDecoder.maxAppBytes)
        #expect(error(Fixtures.job(["app": Fixtures.quoted(max)])) == nil)
        for app in [max + "a", String(repeating: "é", count: 128), String(repeating: "a", count: 400_000)] {
            let e = error(Fixtures.job(["app": Fixtures.quoted(app)]), apps: apps)
            #expect(e?.reason == .invalidApp, "\(app.utf8.count) bytes")
            // The detail never carries the name (it may be megabytes).
            #expect((e?.detail.utf8.count ?? 0) < 200)
        }
        // Escapes: 256 bytes spelled with 1 536, and 255 bytes spelled with escapes, are judged by what
        // they spell.
        #expect(error(Fixtures.job(["app": Fixtures.quoted(String(repeating: #"\u0061"#, count: 256))]))?.reason == .invalidApp)
        #expect(error(Fixtures.job(["app": Fixtures.quoted(String(repeating: #"\u0061"#, count: 255))])) == nil)
        #expect(error(Fixtures.job(["app": Fixtures.quoted(String(repeating: #"\u0061"#, count: 70_000))]))?.reason == .invalidApp)
    }

    /// Every string field has a limit (`docs/design.md §3.2`); one past it is refused with the field's
    /// reason, however long, through either path.
    @Test(arguments: [
        ("id", JobDecoder.maxIDBytes, JobErrorReason.invalidID),
        ("campaign", JobDecoder.maxCampaignBytes, .invalidCampaign),
        ("collapse_id", JobDecoder.maxCollapseIDBytes, .invalidCollapseID),
        ("user", JobDecoder.maxUserBytes, .invalidUser),
    ])
    func stringLimits(key: String, limit: Int, reason: JobErrorReason) {
        #expect(error(Fixtures.job([key: Fixtures.quoted(String(repeating: "x", count: limit))])) == nil)
        for n in [limit + 1, 6 * limit, 6 * limit + 1, 400_000] {
            let e = error(Fixtures.job([key: Fixtures.quoted(String(repeating: "x", count: n))]))
            #expect(e?.reason == reason, "\(key): \(n) bytes")
            #expect(e?.detail.hasSuffix("got \(n)") == true, "\(e?.detail ?? "")")
        }
        #expect(error(Fixtures.job([key: Fixtures.quoted(String(repeating: #"\u0078"#, count: limit + 1))]))?.reason == reason)
        #expect(error(Fixtures.job([key: Fixtures.quoted(String(repeating: #"\u0078"#, count: limit))])) == nil)
        // Escapes of every width, and a pair of surrogates, counted as the bytes they spell.
        let mixed = #"\u00e9\u20ac\ud83d\ude00\n"# + String(repeating: "x", count: limit)
        #expect(error(Fixtures.job([key: Fixtures.quoted(mixed)]))?.detail.hasSuffix("got \(limit + 2 + 3 + 4 + 1)") == true)
    }

    @Test func tokenAndPushTypeOverTheirLimits() {
        for n in [202, 400_000] {
            let e = error(Fixtures.job(["token": Fixtures.quoted(String(repeating: "a", count: n))]))
            #expect(e?.reason == .invalidToken)
            #expect(e?.detail == "token: device token must be 16…200 hex digits (8…100 bytes; usually 64), got \(n)")
        }
        #expect(error(Fixtures.job(["token": Fixtures.quoted(String(repeating: #"\u0061"#, count: 202))]))?.reason == .invalidToken)
        // 200 digits written as escapes: measured as the 200 bytes they spell, and a token.
        #expect(error(Fixtures.job(["token": Fixtures.quoted(String(repeating: #"\u0061"#, count: 200))])) == nil)
        let long = error(Fixtures.job(["push_type": Fixtures.quoted(String(repeating: "a", count: 400_000))]))
        #expect(long?.reason == .invalidPushType)
        #expect((long?.detail.utf8.count ?? .max) < 300)
    }

    /// `time_zone` past 64 bytes: refused as too long, unread (a name that long is no zone anyway).
    @Test func timeZoneOverItsLimit() {
        for n in [JobDecoder.maxTimeZoneBytes + 1, 400_000] {
            let e = error(Fixtures.job(["time_zone": Fixtures.quoted(String(repeating: "a", count: n))]))
            #expect(e?.reason == .invalidTimeZone)
            #expect(e?.detail.hasSuffix("of at most 64 UTF-8 bytes, got \(n)") == true, "\(e?.detail ?? "")")
        }
        let escaped = error(Fixtures.job(["time_zone": Fixtures.quoted(String(repeating: #"\u0061"#, count: 65))]))
        #expect(escaped?.detail.hasSuffix("got 65") == true)
        // 64 bytes that are no zone: refused by name, the value in the detail.
        let sixtyFour = String(repeating: "a", count: 64)
        #expect(error(Fixtures.job(["time_zone": Fixtures.quoted(sixtyFour)]))?.detail.contains(sixtyFour) == true)
    }

    @Test func alertsLanguageKeysHaveALimit() {
        let ok = String(repeating: "a", count: JobDecoder.maxLanguageBytes)
        #expect(error(Fixtures.job(["alerts": #"{"\#(ok)":"x"}"#])) == nil)
        #expect(error(Fixtures.job(["alerts": #"{"\#(ok)a":"x"}"#]))?.reason == .invalidAlerts)
    }

    /// Unknown keys are ignored however large, and never built; a known key given twice is still
    /// refused, whichever form its values take.
    @Test func unknownKeysAndDuplicates() {
        let big = String(repeating: "z", count: 300_000)
        #expect(error(Fixtures.job(["extra": Fixtures.quoted(big), "more": #"{"a":[1,2,{"b":null}]}"#]), apps: apps) == nil)
        let twice = Array(#"{"id":"a","id":"\#(big)","app":"com.example.shop","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}}}"#.utf8)
        #expect(error(twice)?.reason == .invalidJSON)
        let twiceLong = Array(
            #"{"app":"\#(big)","app":"com.example.shop","id":"a","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}}}"#.utf8)
        #expect(error(twiceLong)?.reason == .invalidJSON)
        let twiceCampaign = Array(
            #"{"id":"a","app":"com.example.shop","campaign":"c","campaign":null,"token":"\#(Fixtures.tokenHex)","payload":{"aps":{}}}"#.utf8
        )
        #expect(error(twiceCampaign)?.reason == .invalidJSON)
    }
}
