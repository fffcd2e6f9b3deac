import APNsProtocol
import Jobs
import Testing

@Suite struct EncodedPayloadTests {
    let now = Fixtures.now

    func job(payload: String = Fixtures.basePayload, alerts: String? = nil) throws -> Job {
        var changes: [String: String?] = ["payload": payload]
        if let alerts { changes["alerts"] = alerts }
        return try JobDecoder().decode(Fixtures.job(changes), now: now)
    }

    func encoded(_ job: Job, _ language: String?, jobIDKey: String? = nil, limit: Int = 2048) throws -> String {
        Fixtures.string(try job.encodedPayload(language: language, encoder: PayloadEncoder(limit: limit), jobIDKey: jobIDKey))
    }

    @Test func ownAlertWithoutLanguage() throws {
        let job = try job(payload: #"{ "aps" : { "alert" : "Sale", "badge" : 1 }, "acme" : 1 }"#, alerts: #"{"fr":"Soldes"}"#)
        #expect(try encoded(job, nil) == #"{"aps":{"alert":"Sale","badge":1},"acme":1}"#)
    }

    @Test func languageChoiceAndFallback() throws {
        let job = try job(
            payload: #"{"aps":{"alert":"Sale","badge":1},"acme":1}"#,
            alerts: #"{"fr":"Soldes","pt":{"title":"Promoção","body":"Tudo"},"de":{"body":"Ausverkauf"}}"#)
        #expect(try encoded(job, "fr") == #"{"aps":{"alert":"Soldes","badge":1},"acme":1}"#)
        // An alert dictionary replaces the string; a body-only dictionary is sent as a string (Apple's "The Notification Payload").
        #expect(try encoded(job, "pt") == #"{"aps":{"alert":{"title":"Promoção","body":"Tudo"},"badge":1},"acme":1}"#)
        #expect(try encoded(job, "de") == #"{"aps":{"alert":"Ausverkauf","badge":1},"acme":1}"#)
        // Region or script subtags fall back to the primary language.
        #expect(try encoded(job, "fr-CA") == #"{"aps":{"alert":"Soldes","badge":1},"acme":1}"#)
        #expect(try encoded(job, "pt_BR") == #"{"aps":{"alert":{"title":"Promoção","body":"Tudo"},"badge":1},"acme":1}"#)
        // No alert for the language: the payload's own.
        #expect(try encoded(job, "es") == #"{"aps":{"alert":"Sale","badge":1},"acme":1}"#)
        #expect(try encoded(job, "") == #"{"aps":{"alert":"Sale","badge":1},"acme":1}"#)
        #expect(try encoded(job, "es-fr") == #"{"aps":{"alert":"Sale","badge":1},"acme":1}"#)
        #expect(job.alert(for: "FR") == nil, "language keys are exact (case-sensitive)")
    }

    @Test func languageAddsAnAlertToAPayloadWithout() throws {
        let job = try job(payload: #"{"aps":{"badge":3}}"#, alerts: #"{"fr":"Nouveau"}"#)
        #expect(try encoded(job, "fr") == #"{"aps":{"alert":"Nouveau","badge":3}}"#)
        #expect(try encoded(job, "en") == #"{"aps":{"badge":3}}"#)
    }

    @Test func jobIDKeyEmbedding() throws {
        let job = try job(payload: #"{"aps":{"alert":"Sale"},"acme":1}"#, alerts: #"{"fr":"Soldes"}"#)
        #expect(try encoded(job, nil, jobIDKey: "_job") == #"{"aps":{"alert":"Sale"},"acme":1,"_job":"spring-sale:000001"}"#)
        #expect(try encoded(job, "fr", jobIDKey: "_job") == #"{"aps":{"alert":"Soldes"},"acme":1,"_job":"spring-sale:000001"}"#)
        // An existing key of that name is replaced, never duplicated.
        let clash = try self.job(payload: #"{"aps":{"alert":"Sale"},"_job":"producer's","acme":1}"#)
        #expect(try encoded(clash, nil, jobIDKey: "_job") == #"{"aps":{"alert":"Sale"},"_job":"spring-sale:000001","acme":1}"#)
        // The id is escaped like any string.
        var quoted = job
        quoted.id = #"a"b\c"#
        #expect(try encoded(quoted, nil, jobIDKey: "_job") == #"{"aps":{"alert":"Sale"},"acme":1,"_job":"a\"b\\c"}"#)
    }

    @Test func encoderLimitIsEnforced() throws {
        let job = try job(payload: #"{"aps":{"alert":"Sale"}}"#, alerts: #"{"fr":"Soldes du printemps"}"#)
        #expect(try encoded(job, nil, limit: 24) == #"{"aps":{"alert":"Sale"}}"#)
        // The French variant is longer than the limit.
        #expect(throws: JobError.self) { try encoded(job, "fr", limit: 24) }
        do {
            _ = try job.encodedPayload(language: "fr", encoder: PayloadEncoder(limit: 24))
            Issue.record("accepted")
        } catch {
            #expect(error.reason == .payloadTooLarge)
        }
        // The job id key counts too.
        do {
            _ = try job.encodedPayload(language: nil, encoder: PayloadEncoder(limit: 24), jobIDKey: "j")
            Issue.record("accepted")
        } catch {
            #expect(error.reason == .payloadTooLarge)
        }
        // An encoder that truncates the alert body makes it fit instead.
        let truncated = try job.encodedPayload(language: "fr", encoder: PayloadEncoder(limit: 30, truncatesAlertBody: true))
        #expect(truncated.count <= 30)
        #expect(Fixtures.string(truncated).hasSuffix("…\"}}"))
    }

    @Test func appendsIntoAReusedBuffer() throws {
        let job = try job(payload: #"{"aps":{"alert":"Sale"}}"#, alerts: #"{"fr":"Soldes"}"#)
        var out: [UInt8] = Array("prefix|".utf8)
        try job.encodedPayload(language: "fr", encoder: PayloadEncoder(), into: &out)
        #expect(Fixtures.string(out) == #"prefix|{"aps":{"alert":"Soldes"}}"#)
        // Nothing is appended when it throws.
        #expect(throws: JobError.self) { try job.encodedPayload(language: "fr", encoder: PayloadEncoder(limit: 5), into: &out) }
        #expect(Fixtures.string(out) == #"prefix|{"aps":{"alert":"Soldes"}}"#)
    }
}
