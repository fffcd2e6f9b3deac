import APNsProtocol
import Jobs
import Testing

/// Decoding through `JobTemplates` (the pipeline's path: payload and alerts recognised by their bytes,
/// read once, encoded once per variant) gives exactly what the plain decoder gives, errors included.
@Suite struct JobTemplateTests {
    let now = Fixtures.now

    /// Decodes `bytes` plainly, through fresh templates, and through templates that have seen them,
    /// and expects the same job or the same error from all three.
    static func expectSameDecoding(
        _ bytes: [UInt8], decoder: JobDecoder = JobDecoder(), now: UInt32, templates: JobTemplates? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let plain = Result { () throws(JobError) in try decoder.decode(bytes, now: now) }
        let shared = templates ?? JobTemplates()
        for pass in ["cold", "warm"] {
            let viaTemplates = bytes.withUnsafeBytes { raw in
                Result { () throws(JobError) in try decoder.decode(raw, now: now, templates: shared) }
            }
            switch (plain, viaTemplates) {
            case (.success(let a), .success(let b)):
                #expect(
                    a.id == b.id && a.app == b.app && a.token == b.token && a.payload == b.payload && a.alerts == b.alerts
                        && a.expiry == b.expiry && a.priority == b.priority && a.campaign == b.campaign
                        && a.collapseID == b.collapseID && a.pushType == b.pushType && a.channel == b.channel
                        && a.statedExpiry == b.statedExpiry && a.storagePolicy == b.storagePolicy && a.user == b.user
                        && a.timeZone == b.timeZone && a.isTransactional == b.isTransactional,
                    "\(pass): \(Fixtures.string(bytes))", sourceLocation: sourceLocation)
            case (.failure(let a), .failure(let b)):
                #expect(a == b, "\(pass): \(Fixtures.string(bytes))", sourceLocation: sourceLocation)
            default:
                Issue.record("\(pass): \(plain) vs \(viaTemplates) for \(Fixtures.string(bytes))", sourceLocation: sourceLocation)
            }
        }
    }

    /// Messages where reading from the bytes could differ from building values: escapes in the keys read
    /// raw, nulls, other kinds, duplicates, and errors inside the values that are only checked.
    @Test(arguments: [
        Fixtures.job(),
        Fixtures.job(["alerts": #"{"fr":"Soldes à -20 %","de":{"title":"Angebot","body":"Frühling"}}"#]),
        Fixtures.job(["alerts": "null"]),
        Fixtures.job(["alerts": "{}"]),
        Fixtures.job(["alerts": "[]"]),
        Fixtures.job(["alerts": #"{"fr":1}"#]),
        Fixtures.job(["payload": "null"]),
        Fixtures.job(["payload": #""text""#]),
        Fixtures.job(["payload": "{}"]),
        Fixtures.job(["payload": #"{"aps":{"badge":"x"}}"#]),
        Fixtures.job(["payload": #"{"aps":{"alert":"caf\u00e9 \ud83d\ude00"},"k":[1,{"a":null,"b":true,"c":-1.5e3}]}"#]),
        Fixtures.job(["payload": #"{"aps":{"alert":"x"},"bad":"\ud800"}"#]),
        Fixtures.job(["payload": #"{"aps":{"alert":"x"},"bad":01}"#]),
        Fixtures.job(["payload": #"{"aps":{"alert":"x"},"bad":[1,]}"#]),
        Fixtures.job(["payload": #"{"aps":{"alert":"x"} "k":1}"#]),
        Fixtures.job(["payload": String(repeating: "[", count: 70) + String(repeating: "]", count: 70)]),
        Fixtures.job(["payload": #"{"aps":{"alert":"x","sound":"\q"}}"#]),
        Fixtures.job(["payload": #"{"aps":{"alert":"\#(String(repeating: "a", count: 3000))"}}"#]),
        Fixtures.job(["token": "\"\\u0030" + String(Fixtures.tokenHex.dropFirst()) + "\""]),
        Fixtures.job(["token": #""0a1b""#]),
        Fixtures.job(["token": #""zz1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9""#]),
        Fixtures.job(["token": "12"]),
        Fixtures.job(["token": "null"]),
        Fixtures.job(["app": #""com.example.\u0073hop""#]),
        Fixtures.job(["app": #""""#]),
        Fixtures.job(["app": "null"]),
        Fixtures.job(["app": "7"]),
        Fixtures.job(["app": #""com.exämple.shop""#]),
        Fixtures.json(#"{"id":"a","app":"x","app":"y","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}}}"#),
        Fixtures.json(#"{"id":"a","app":"x","token":"\#(Fixtures.tokenHex)","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}}}"#),
        Fixtures.json(#"{"id":"a","app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}},"payload":null}"#),
        Fixtures.json(#"{"id":"a","app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}},"alerts":{},"alerts":{}}"#),
        Fixtures.json(#"{"payload":{"aps":{}},"payload":{"aps":{}},"id":1}"#),
        Fixtures.json(#"{"id":"a","app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{"alert":"\#u{FF}"}}}"#),
        Fixtures.json(#"  { "id" : "a" , "app" : "x" , "token" : "\#(Fixtures.tokenHex)" , "payload" : { "aps" : { } } }  "#),
        Fixtures.json(#"{"id":"a","app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{"content-available":1}}}"#),
        Fixtures.json("[1,2]"),
        Fixtures.json(#"{"payload":"#),
    ])
    func sameAsThePlainDecoder(bytes: [UInt8]) {
        Self.expectSameDecoding(bytes, now: now)
    }

    /// A payload or alerts the templates have seen is compared, not read again: bytes that only begin
    /// like it, or continue past it, still give what the plain decoder gives, and a known value that is
    /// not an object or an array (a number could be the start of a longer one) is always read.
    @Test func valuesThatBeginLikeAKnownOne() {
        let templates = JobTemplates()
        let payload = Fixtures.basePayload
        let token = Fixtures.tokenHex
        // Seen first: the base job, alerts as an array, as a number, as a string.
        for alerts in [#"{"fr":"Soldes"}"#, "[1,2]", "5", #""x""#] {
            Self.expectSameDecoding(Fixtures.job(["alerts": alerts]), now: now, templates: templates)
        }
        for message in [
            Fixtures.job(["payload": payload + "}"]),
            Fixtures.job(["payload": payload + " ,"]),
            Fixtures.job(["payload": String(payload.dropLast())]),
            Fixtures.job(["payload": String(payload.dropLast()) + #","more":[1,{}]}"#]),
            Fixtures.job(["alerts": #"{"fr":"Soldes"}}"#]),
            Fixtures.job(["alerts": #"{"fr":"Soldes"}"#, "payload": payload + payload]),
            Fixtures.job(["alerts": "[1,2]]"]),
            Fixtures.job(["alerts": "[1,2] "]),
            Fixtures.job(["alerts": "55"]),
            Fixtures.job(["alerts": "5.5e"]),
            Fixtures.job(["alerts": #""x"y"#]),
            Fixtures.json(#"{"id":"a","app":"x","token":"\#(token)","payload":\#(payload)"#),
            Fixtures.json(#"{"id":"a","app":"x","token":"\#(token)","payload":\#(payload),"payload":\#(payload)}"#),
            Fixtures.json(#"{"id":"a","app":"x","token":"\#(token)","alerts":\#(payload),"payload":\#(payload)}"#),
        ] {
            Self.expectSameDecoding(message, now: now, templates: templates)
        }
    }

    /// Invalid UTF-8 inside a value that is only checked is found at the same offset.
    @Test func invalidUTF8InsideThePayload() {
        let head = Array(#"{"id":"a","app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{"alert":""#.utf8)
        for bad: [UInt8] in [[0xFF], [0xC3], [0xED, 0xA0, 0x80], [0xC0, 0xAF], [0xF4, 0x90, 0x80, 0x80]] {
            Self.expectSameDecoding(head + bad + Array(#""}}}"#.utf8), now: now)
        }
    }

    /// One template for a campaign's jobs: each variant is encoded once and every job's notification
    /// shares that one buffer; the payload's own limits still apply per encoder.
    @Test func jobsOfATemplateShareTheirEncodedPayload() throws {
        let templates = JobTemplates()
        let alerts = #"{"fr":"Soldes","de":{"body":"Ausverkauf"}}"#
        func decode(_ id: String) throws -> Job {
            let bytes = Fixtures.job(["id": "\"\(id)\"", "alerts": alerts])
            return try bytes.withUnsafeBytes { raw in try JobDecoder().decode(raw, now: now, templates: templates) }
        }
        let a = try decode("job-1")
        let b = try decode("job-2")
        let plain = try JobDecoder().decode(Fixtures.job(["alerts": alerts]), now: now)
        for language: String? in [nil, "fr", "fr-CA", "de", "es", ""] {
            let encoder = PayloadEncoder()
            let ea = try a.encodedPayload(language: language, encoder: encoder)
            let eb = try b.encodedPayload(language: language, encoder: encoder)
            let fresh = try plain.encodedPayload(language: language, encoder: encoder)
            #expect(ea == fresh)
            #expect(ea.withUnsafeBufferPointer { $0.baseAddress } == eb.withUnsafeBufferPointer { $0.baseAddress }, "one buffer")
        }
        // The job id key makes each payload its own.
        let withA = Fixtures.string(try a.encodedPayload(language: "fr", encoder: PayloadEncoder(), jobIDKey: "jid"))
        let withB = Fixtures.string(try b.encodedPayload(language: "fr", encoder: PayloadEncoder(), jobIDKey: "jid"))
        #expect(withA.contains("job-1") && withB.contains("job-2"))
        // A smaller limit is its own variant, and refuses what does not fit.
        let small = PayloadEncoder(limit: 20)
        #expect(throws: JobError.self) { try a.encodedPayload(language: nil, encoder: small) }
        #expect(throws: JobError.self) { try b.encodedPayload(language: nil, encoder: small) }
        let full = try a.encodedPayload(language: nil, encoder: PayloadEncoder())
        #expect(full.count > 20)
        // Appending to a buffer that holds something keeps it.
        var out: [UInt8] = [1, 2]
        try a.encodedPayload(language: nil, encoder: PayloadEncoder(), into: &out)
        let fresh = try plain.encodedPayload(language: nil, encoder: PayloadEncoder())
        #expect(Array(out.prefix(2)) == [1, 2] && Array(out.dropFirst(2)) == fresh)
    }

    /// A job whose payload or alerts are changed after decoding is encoded from what it now holds.
    @Test func aChangedPayloadIsEncodedAfresh() throws {
        let templates = JobTemplates()
        let bytes = Fixtures.job(["alerts": #"{"fr":"Soldes"}"#])
        var job = try bytes.withUnsafeBytes { raw in try JobDecoder().decode(raw, now: now, templates: templates) }
        _ = try job.encodedPayload(language: "fr", encoder: PayloadEncoder())
        job.payload.aps.badge = 7
        #expect(Fixtures.string(try job.encodedPayload(language: nil, encoder: PayloadEncoder())).contains(#""badge":7"#))
        job.alerts["fr"] = .text("Autre")
        #expect(Fixtures.string(try job.encodedPayload(language: "fr", encoder: PayloadEncoder())).contains("Autre"))
        // The template is unchanged for the next job.
        let next = try bytes.withUnsafeBytes { raw in try JobDecoder().decode(raw, now: now, templates: templates) }
        #expect(Fixtures.string(try next.encodedPayload(language: "fr", encoder: PayloadEncoder())).contains("Soldes"))
    }
}
