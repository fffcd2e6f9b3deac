import APNsProtocol
import Foundation
import Jobs
import Testing

@Suite struct JobDecoderTests {
    let decoder = JobDecoder()
    let now = Fixtures.now

    /// The reason a message is refused with (fails the test when it is accepted).
    func reason(_ bytes: [UInt8], decoder: JobDecoder = JobDecoder(), sourceLocation: SourceLocation = #_sourceLocation) -> JobErrorReason?
    {
        JobTemplateTests.expectSameDecoding(bytes, decoder: decoder, now: now, sourceLocation: sourceLocation)
        do {
            let job = try decoder.decode(bytes, now: now)
            Issue.record("accepted: \(job.id) from \(Fixtures.string(bytes))", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error.reason
        }
    }

    func error(_ bytes: [UInt8], decoder: JobDecoder = JobDecoder(), sourceLocation: SourceLocation = #_sourceLocation) -> JobError? {
        decoder.refusal(bytes, now: now, sourceLocation: sourceLocation)
    }

    // MARK: Valid jobs

    @Test func fullJob() throws {
        let bytes = Fixtures.json(
            """
            {
              "id": "spring-sale:000001",
              "app": "com.example.shop",
              "token": "\(Fixtures.tokenHex)",
              "payload": { "aps": { "alert": "Sale!", "badge": 1, "sound": "default" }, "acme": [1, 2] },
              "alerts": { "fr": "Soldes !", "de": { "title": "Angebot", "body": "Ausverkauf!" } },
              "expiry": 1767225600,
              "priority": 5,
              "campaign": "spring-sale"
            }
            """)
        let job = try decoder.decode(bytes, now: now)
        #expect(job.id == "spring-sale:000001")
        #expect(job.app == "com.example.shop")
        #expect(job.token == Fixtures.token)
        #expect(job.payload.aps.alert == .text("Sale!"))
        #expect(job.payload.aps.badge == 1)
        #expect(job.payload.aps.sound == "default")
        #expect(job.payload.custom == [Payload.CustomKey("acme", [1, 2])])
        #expect(job.alerts.count == 2 && job.hasAlerts)
        #expect(job.alerts["fr"] == .text("Soldes !"))
        #expect(job.alerts["de"] == .dictionary(AlertDictionary(title: "Angebot", body: "Ausverkauf!")))
        #expect(job.expiry == 1_767_225_600)
        #expect(job.priority == .conservePower)
        #expect(job.campaign == "spring-sale")
        // The raw-buffer entry point gives the same job.
        let viaRaw = try bytes.withUnsafeBytes { raw in try decoder.decode(raw, now: now) }
        #expect(viaRaw.id == job.id && viaRaw.payload == job.payload && viaRaw.alerts == job.alerts)
    }

    @Test func defaults() throws {
        let job = try decoder.decode(Fixtures.job(), now: now)
        #expect(job.expiry == now + 86_400)
        #expect(job.priority == .immediate)
        #expect(job.campaign == nil)
        #expect(job.alerts.isEmpty && !job.hasAlerts)
        let short = try JobDecoder(defaultTimeToLive: 60).decode(Fixtures.job(), now: now)
        #expect(short.expiry == now + 60)
        // now + TTL past 2106 saturates instead of wrapping into the past.
        let late = try JobDecoder().decode(Fixtures.job(), now: UInt32.max - 10)
        #expect(late.expiry == UInt32.max)
    }

    @Test func tokenIsCaseInsensitive() throws {
        let upper = try decoder.decode(Fixtures.job(["token": Fixtures.quoted(Fixtures.tokenHex.uppercased())]), now: now)
        #expect(upper.token == Fixtures.token)
        #expect(upper.token.hex == Fixtures.tokenHex)
    }

    @Test func unknownKeysAreIgnoredAndNullIsAbsent() throws {
        let job = try decoder.decode(
            Fixtures.job([
                "future_key": #"{"anything":[1,2,3]}"#, "trace": #""abc""#, "expiry": "null", "priority": "null",
                "campaign": "null", "alerts": "null",
            ]), now: now)
        #expect(job.expiry == now + 86_400)
        #expect(job.priority == .immediate)
        #expect(job.campaign == nil)
        #expect(job.alerts.isEmpty)
    }

    /// Keys one letter (or one case) away from a known key, of every known key's length, are unknown:
    /// ignored, where the known key would refuse the value (the decoder matches a key by its length first).
    @Test func nearMissKeysAreUnknown() throws {
        let nearMisses = [
            "iD", "ap_", "usex", "tokem", "alertz", "expirY", "payloax", "channeL", "campaigm", "prioritx", "push_typo",
            "time-zone", "collapse_ix", "transactionaL", "storage_polica", "transactional_", "i", "",
        ]
        let extra: [String: String?] = Dictionary(uniqueKeysWithValues: nearMisses.map { ($0, "[1]") })
        // Both paths: the general one and the one that reads strings from the message's bytes.
        func decodings(_ bytes: [UInt8]) -> [Result<Job, JobError>] {
            [
                Result { () throws(JobError) in try decoder.decode(bytes, now: now) },
                bytes.withUnsafeBytes { raw in
                    Result { () throws(JobError) in try decoder.decode(raw, now: now, templates: JobTemplates()) }
                },
            ]
        }
        for result in decodings(Fixtures.job(extra)) {
            let job = try result.get()
            #expect(job.user == nil && job.timeZone == nil && !job.isTransactional && job.campaign == nil)
        }
        // The known keys themselves are read: each of these values is refused.
        for key in [
            "id", "app", "user", "token", "alerts", "expiry", "payload", "channel", "campaign", "priority", "push_type", "time_zone",
            "collapse_id", "transactional", "storage_policy",
        ] {
            for result in decodings(Fixtures.job([key: "[1]"])) {
                guard case .failure = result else {
                    Issue.record("\(key): [1] was not refused")
                    continue
                }
            }
        }
    }

    /// The payload examples of Apple's "Examples of JSON Payloads" (2 and 5 mended: they have trailing commas / a missing comma).
    @Test(arguments: [
        #"{"aps":{"alert":"Message received from Bob"},"acme2":["bang","whiz"]}"#,
        #"{"aps":{"alert":{"title":"Game Request","body":"Bob wants to play poker","action-loc-key":"PLAY"},"badge":5},"acme1":"bar","acme2":["bang","whiz"]}"#,
        #"{"aps":{"alert":"You got your emails.","badge":9,"sound":"bingbong.aiff"},"acme1":"bar","acme2":42}"#,
        #"{"aps":{"alert":{"loc-key":"GAME_PLAY_REQUEST_FORMAT","loc-args":["Jenna","Frank"]},"sound":"chime.aiff"},"acme":"foo"}"#,
        #"{"aps":{"category":"NEW_MESSAGE_CATEGORY","alert":{"body":"Acme message received from Johnny Appleseed","action-loc-key":"VIEW"},"badge":3}}"#,
    ])
    func specExamples(payload: String) throws {
        let job = try decoder.decode(Fixtures.job(["payload": payload]), now: now)
        // Compact re-encoding keeps the producer's meaning: parse both and compare.
        let encoded = try job.encodedPayload(language: nil, encoder: PayloadEncoder())
        #expect(try Payload(json: JSONParser.parse(encoded)) == job.payload)
    }

    // MARK: Refusals, one per reason

    /// Example payloads 2 and 5 of Apple's "Examples of JSON Payloads" as printed (not valid JSON) inside a job.
    @Test func invalidJSON() {
        let example2 = """
            {"aps" : {"alert" : {"title" : "Game Request","body" : "Bob wants to play poker","action-loc-key" : "PLAY"},"badge" : 5,},"acme1" : "bar","acme2" : [ "bang", "whiz" ]}
            """
        let example5 = """
            {"aps" : {"category" : "NEW_MESSAGE_CATEGORY" "alert" : {"body" : "Acme message received from Johnny Appleseed","action-loc-key" : "VIEW",},"badge" : 3,},}
            """
        #expect(reason(Fixtures.job(["payload": example2])) == .invalidJSON)
        #expect(reason(Fixtures.job(["payload": example5])) == .invalidJSON)
        #expect(reason(Fixtures.json("")) == .invalidJSON)
        #expect(reason(Fixtures.json(#"{"id":"x""#)) == .invalidJSON)
        #expect(reason(Array(Fixtures.job().dropLast())) == .invalidJSON)
        #expect(reason(Fixtures.job() + Fixtures.json("{}")) == .invalidJSON)
        #expect(reason([0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D]) == .invalidJSON)  // {"\xFF":1}: not UTF-8
        let e = error(Fixtures.json(#"{"id":"x",}"#))
        #expect(e?.reason == .invalidJSON)
        #expect(e?.detail.contains("byte") == true, "the detail says where: \(e?.detail ?? "")")
    }

    @Test func duplicateKnownKeyIsInvalidJSON() {
        let bytes = Fixtures.json(#"{"id":"a","id":"b","app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}}}"#)
        let e = error(bytes)
        #expect(e?.reason == .invalidJSON)
        #expect(e?.detail.contains("\"id\"") == true)
        // Unknown keys may repeat: they are ignored.
        let repeated = Fixtures.json(#"{"x":1,"id":"a","x":2,"app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}}}"#)
        #expect(throws: Never.self) { try decoder.decode(repeated, now: now) }
    }

    @Test func notAnObject() {
        #expect(reason(Fixtures.json("[]")) == .notAnObject)
        #expect(reason(Fixtures.json(#""a job""#)) == .notAnObject)
        #expect(reason(Fixtures.json("42")) == .notAnObject)
        #expect(reason(Fixtures.json("null")) == .notAnObject)
    }

    @Test func id() throws {
        #expect(reason(Fixtures.job(["id": nil])) == .missingID)
        #expect(reason(Fixtures.job(["id": "null"])) == .missingID)
        #expect(reason(Fixtures.job(["id": "42"])) == .invalidID)
        #expect(reason(Fixtures.job(["id": #""""#])) == .invalidID)
        #expect(reason(Fixtures.job(["id": Fixtures.quoted(String(repeating: "x", count: 129))])) == .invalidID)
        let max = try decoder.decode(Fixtures.job(["id": Fixtures.quoted(String(repeating: "x", count: 128))]), now: now)
        #expect(max.id.utf8.count == 128)
        // Bytes, not characters: 64 × "é" is 128 bytes, 65 is 130.
        #expect(throws: Never.self) {
            try decoder.decode(Fixtures.job(["id": Fixtures.quoted(String(repeating: "é", count: 64))]), now: now)
        }
        let e = error(Fixtures.job(["id": Fixtures.quoted(String(repeating: "é", count: 65))]))
        #expect(e?.reason == .invalidID)
        #expect(e?.detail.contains("130") == true)
    }

    @Test func app() {
        #expect(reason(Fixtures.job(["app": nil])) == .missingApp)
        #expect(reason(Fixtures.job(["app": #""""#])) == .missingApp)
        #expect(reason(Fixtures.job(["app": "7"])) == .missingApp)
    }

    @Test func token() {
        #expect(reason(Fixtures.job(["token": nil])) == .invalidToken)
        #expect(reason(Fixtures.job(["token": "12"])) == .invalidToken)
        #expect(reason(Fixtures.job(["token": Fixtures.quoted(String(Fixtures.tokenHex.dropLast()))])) == .invalidToken)
        #expect(reason(Fixtures.job(["token": Fixtures.quoted(Fixtures.tokenHex + "0")])) == .invalidToken)
        #expect(reason(Fixtures.job(["token": Fixtures.quoted(String(Fixtures.tokenHex.dropLast()) + "g")])) == .invalidToken)
        #expect(reason(Fixtures.job(["token": Fixtures.quoted(String(repeating: "0a 1b ", count: 11))])) == .invalidToken)
        let e = error(Fixtures.job(["token": Fixtures.quoted("zz" + String(Fixtures.tokenHex.dropFirst(2)))]))
        #expect(e == JobError(reason: .invalidToken, detail: "token: device token has a non-hex character at offset 0"))
    }

    /// Apple: "APNs device tokens are of variable length. Do not hard-code their size." Any even count of
    /// 16…200 hex digits is a token (both decoding paths agree); the job keeps its lower-case hex.
    @Test func tokensOfOtherSizes() throws {
        for n in [8, 16, 31, 33, 40, 64, 100] {
            let text = String(repeating: "aB", count: n)
            let bytes = Fixtures.job(["token": Fixtures.quoted(text)])
            JobTemplateTests.expectSameDecoding(bytes, decoder: decoder, now: now)
            let job = try decoder.decode(bytes, now: now)
            #expect(job.token.byteCount == n && job.tokenHex == text.lowercased() && job.token.hex == text.lowercased())
            #expect(job.token.fitsBinaryInterface == false)
        }
        // The same 32 bytes in upper case: the inline token every 64-digit token is.
        let upper = try decoder.decode(Fixtures.job(["token": Fixtures.quoted(Fixtures.tokenHex.uppercased())]), now: now)
        let lower = try DeviceToken(hex: Fixtures.tokenHex)
        #expect(upper.token.fitsBinaryInterface && upper.token == lower)
    }

    /// Each refusal names what is wrong: too short, too long, an odd count, not hex, not a string.
    @Test func tokenRefusalsSayWhy() {
        func detail(_ token: String) -> String? { error(Fixtures.job(["token": token]))?.detail }
        #expect(
            detail(Fixtures.quoted(String(repeating: "ab", count: 7)))
                == "token: device token must be 16…200 hex digits (8…100 bytes; usually 64), got 14")
        #expect(
            detail(Fixtures.quoted(String(repeating: "ab", count: 101)))
                == "token: device token must be 16…200 hex digits (8…100 bytes; usually 64), got 202")
        #expect(
            detail(Fixtures.quoted(String(repeating: "a", count: 81)))
                == "token: device token must be an even number of hex digits (two a byte), got 81")
        #expect(
            detail(Fixtures.quoted(String(repeating: "ab", count: 39) + "xy")) == "token: device token has a non-hex character at offset 78"
        )
        #expect(detail("12") == "token must be a string of hex digits (an even count, 16…200; 64 for a 32-byte token), got a number")
        for t in [String(repeating: "ab", count: 7), String(repeating: "ab", count: 101), String(repeating: "a", count: 65), ""] {
            #expect(error(Fixtures.job(["token": Fixtures.quoted(t)]))?.reason == .invalidToken, "\(t.count)")
        }
    }

    @Test func payload() {
        #expect(reason(Fixtures.job(["payload": nil])) == .missingPayload)
        #expect(reason(Fixtures.job(["payload": "null"])) == .missingPayload)
        #expect(reason(Fixtures.job(["payload": #""{\"aps\":{}}""#])) == .invalidPayload)  // a string holding JSON
        #expect(reason(Fixtures.job(["payload": "[]"])) == .invalidPayload)
        // Missing aps.
        let missingAPS = error(Fixtures.job(["payload": #"{"alert":"hi","acme":1}"#]))
        #expect(missingAPS == JobError(reason: .invalidPayload, detail: "payload has no aps dictionary"))
        #expect(reason(Fixtures.job(["payload": #"{"aps":"hi"}"#])) == .invalidPayload)
        #expect(reason(Fixtures.job(["payload": #"{"aps":{"badge":"1"}}"#])) == .invalidPayload)
        #expect(reason(Fixtures.job(["payload": #"{"aps":{"badge":-1}}"#])) == .invalidPayload)
        #expect(reason(Fixtures.job(["payload": #"{"aps":{"alert":7}}"#])) == .invalidPayload)
        #expect(reason(Fixtures.job(["payload": #"{"aps":{"content-available":2}}"#])) == .invalidPayload)
        let e = error(Fixtures.job(["payload": #"{"aps":{"alert":{"title":1}}}"#]))
        #expect(e == JobError(reason: .invalidPayload, detail: "payload.aps.alert.title: expected a string"))
        // An empty aps is a valid (if pointless) payload.
        #expect(throws: Never.self) { try decoder.decode(Fixtures.job(["payload": #"{"aps":{}}"#]), now: now) }
    }

    @Test func priority() throws {
        #expect(try decoder.decode(Fixtures.job(["priority": "10"]), now: now).priority == .immediate)
        #expect(try decoder.decode(Fixtures.job(["priority": "5"]), now: now).priority == .conservePower)
        for bad in ["7", "0", "-10", "10.0", "1e1", #""10""#, "true", "[10]"] {
            #expect(reason(Fixtures.job(["priority": bad])) == .invalidPriority, "priority \(bad)")
        }
    }

    @Test func contentAvailableOnlyWithPriority10() throws {
        let silent = #"{"aps":{"content-available":1},"acme":"sync"}"#
        #expect(reason(Fixtures.job(["payload": silent, "priority": "10"])) == .contentAvailableOnlyWithPriority10)
        // 10 is the default: a silent job must say priority 5.
        let byDefault = error(Fixtures.job(["payload": silent]))
        #expect(byDefault?.reason == .contentAvailableOnlyWithPriority10)
        #expect(byDefault?.detail.contains("default") == true)
        let ok = try decoder.decode(Fixtures.job(["payload": silent, "priority": "5"]), now: now)
        #expect(ok.payload.isContentAvailableOnly)
        // content-available with something to show may go at 10.
        #expect(throws: Never.self) {
            try decoder.decode(Fixtures.job(["payload": #"{"aps":{"content-available":1,"badge":2}}"#, "priority": "10"]), now: now)
        }
    }

    @Test func expiry() throws {
        #expect(try decoder.decode(Fixtures.job(["expiry": "0"]), now: now).expiry == 0)
        #expect(try decoder.decode(Fixtures.job(["expiry": "\(now)"]), now: now).expiry == now)
        #expect(try decoder.decode(Fixtures.job(["expiry": "4294967295"]), now: now).expiry == UInt32.max)
        let past = error(Fixtures.job(["expiry": "\(now - 5)"]))
        #expect(past == JobError(reason: .expired, detail: "expiry \(now - 5) is 5 s in the past (now \(now))"))
        #expect(reason(Fixtures.job(["expiry": "1"])) == .expired)
        for bad in ["-1", "1767225600.5", "1.7e9", "4294967296", "99999999999999999999", #""1767225600""#, "false", "{}"] {
            #expect(reason(Fixtures.job(["expiry": bad])) == .invalidExpiry, "expiry \(bad)")
        }
    }

    @Test func alerts() throws {
        let job = try decoder.decode(
            Fixtures.job(["alerts": #"{"fr":"Bonjour","pt-BR":{"loc-key":"K","loc-args":["a"]},"de":{"body":"Hallo"}}"#]),
            now: now)
        #expect(job.alerts["fr"] == .text("Bonjour"))
        #expect(job.alerts["pt-BR"] == .dictionary(AlertDictionary(locKey: "K", locArgs: ["a"])))
        #expect(job.alerts["de"] == .dictionary(AlertDictionary(body: "Hallo")))
        #expect(try decoder.decode(Fixtures.job(["alerts": "{}"]), now: now).alerts.isEmpty)
        for bad in ["[]", #""fr""#, "1", #"{"fr":1}"#, #"{"fr":["a"]}"#, #"{"fr":null}"#, #"{"":"x"}"#, #"{"fr":"a","fr":"b"}"#] {
            #expect(reason(Fixtures.job(["alerts": bad])) == .invalidAlerts, "alerts \(bad)")
        }
        let e = error(Fixtures.job(["alerts": #"{"fr":{"title":["x"]}}"#]))
        #expect(e == JobError(reason: .invalidAlerts, detail: #"alerts["fr"].title: expected a string"#))
    }

    @Test func campaign() throws {
        #expect(try decoder.decode(Fixtures.job(["campaign": #""c1""#]), now: now).campaign == "c1")
        #expect(reason(Fixtures.job(["campaign": "1"])) == .invalidCampaign)
        #expect(reason(Fixtures.job(["campaign": #""""#])) == .invalidCampaign)
        #expect(reason(Fixtures.job(["campaign": Fixtures.quoted(String(repeating: "c", count: 129))])) == .invalidCampaign)
        // The reason names the key and what it takes.
        for (job, text) in [
            (Fixtures.job(["campaign": "1"]), "campaign must be a string"),
            (
                Fixtures.job(["campaign": Fixtures.quoted(String(repeating: "c", count: 129))]),
                "campaign must be 1…128 UTF-8 bytes, got 129"
            ),
            (Fixtures.job(["collapse_id": #""""#]), "collapse_id must be 1…64 UTF-8 bytes, got 0"),
            (Fixtures.job(["collapse_id": "[]"]), "collapse_id must be a string"),
        ] {
            do {
                _ = try decoder.decode(job, now: now)
                Issue.record("decoded: \(text)")
            } catch {
                #expect("\(error)".contains(text), "\(error)")
            }
        }
    }

    @Test func collapseID() throws {
        #expect(try decoder.decode(Fixtures.job([:]), now: now).collapseID == nil)
        #expect(try decoder.decode(Fixtures.job(["collapse_id": #""score-42""#]), now: now).collapseID == "score-42")
        let sixtyFour = String(repeating: "é", count: 32)  // 64 UTF-8 bytes: the most Apple takes
        #expect(try decoder.decode(Fixtures.job(["collapse_id": Fixtures.quoted(sixtyFour)]), now: now).collapseID == sixtyFour)
        for bad in [Fixtures.quoted(sixtyFour + "x"), #""""#, "42", "[]"] {
            #expect(reason(Fixtures.job(["collapse_id": bad])) == .invalidCollapseID, "collapse_id \(bad)")
        }
    }

    @Test func pushType() throws {
        #expect(try decoder.decode(Fixtures.job([:]), now: now).pushType == nil)
        #expect(try decoder.decode(Fixtures.job(["push_type": #""alert""#]), now: now).pushType == .alert)
        #expect(try decoder.decode(Fixtures.job(["push_type": #""voip""#]), now: now).pushType == .voip)
        for bad in [#""Alert""#, #""push""#, "1", #""""#] {
            #expect(reason(Fixtures.job(["push_type": bad])) == .invalidPushType, "push_type \(bad)")
        }
        // background: priority 5 by default, and a payload that shows nothing.
        let silent = #"{"aps":{"content-available":1}}"#
        let background = try decoder.decode(Fixtures.job(["push_type": #""background""#, "payload": silent]), now: now)
        #expect(background.priority == .conservePower && background.pushType == .background)
        #expect(reason(Fixtures.job(["push_type": #""background""#, "payload": silent, "priority": "10"])) == .invalidPushType)
        #expect(reason(Fixtures.job(["push_type": #""background""#])) == .invalidPushType, "an alert is not a background push")
    }

    // MARK: Recipient (audience rules): user, time_zone, transactional

    @Test func recipientKeys() throws {
        let job = try decoder.checkedDecode(
            Fixtures.job(["user": #""u-81723""#, "time_zone": #""Europe/Paris""#, "transactional": "true"]), now: now)
        #expect(job.user == "u-81723" && job.timeZone == "Europe/Paris" && job.isTransactional)
        // Absent, or null: none, and not transactional.
        let plain = try decoder.checkedDecode(Fixtures.job(), now: now)
        #expect(plain.user == nil && plain.timeZone == nil && !plain.isTransactional)
        let nulls = try decoder.checkedDecode(Fixtures.job(["user": "null", "time_zone": "null", "transactional": "null"]), now: now)
        #expect(nulls.user == nil && nulls.timeZone == nil && !nulls.isTransactional)
        #expect(try !decoder.checkedDecode(Fixtures.job(["transactional": "false"]), now: now).isTransactional)
        // A broadcast may name them too (no rule applies to a channel).
        let broadcast = try JobDecoder(payloadLimit: 4096).checkedDecode(
            Fixtures.job(try BroadcastJobTests().changes(["user": #""u-1""#, "transactional": "true"])), now: now)
        #expect(broadcast.user == "u-1" && broadcast.isTransactional)
        // Jobs made in code carry them; a setter changes only its own.
        var made = Job(
            id: "a", app: "x", token: Fixtures.token, payload: job.payload, expiry: 0, user: "u", timeZone: "Asia/Tokyo",
            isTransactional: true)
        #expect(made.user == "u" && made.timeZone == "Asia/Tokyo" && made.isTransactional)
        made.timeZone = nil
        #expect(made.user == "u" && made.timeZone == nil && made.isTransactional)
    }

    @Test func user() throws {
        let max = String(repeating: "é", count: 64)  // 128 UTF-8 bytes
        for good in ["u", "42", max, "user@example.com"] {
            #expect(try decoder.checkedDecode(Fixtures.job(["user": Fixtures.quoted(good)]), now: now).user == good)
        }
        // Escapes are read as what they spell (and measured so).
        #expect(try decoder.checkedDecode(Fixtures.job(["user": #""u\u002d1\n""#]), now: now).user == "u-1\n")
        for bad in [#""""#, Fixtures.quoted(max + "x"), "42", "true", "[]", #"{"id":"u"}"#] {
            #expect(reason(Fixtures.job(["user": bad])) == .invalidUser, "user \(bad)")
        }
        #expect(
            error(Fixtures.job(["user": #""""#]))?.detail == "user must be the recipient's user id, a string of 1…128 UTF-8 bytes, got 0")
        #expect(
            error(Fixtures.job(["user": "42"]))?.detail
                == "user must be the recipient's user id, a string of 1…128 UTF-8 bytes, got a number")
    }

    @Test func timeZone() throws {
        for good in ["Europe/Paris", "America/Argentina/Buenos_Aires", "Asia/Kolkata", "Etc/UTC", "UTC", "GMT", "Etc/GMT+5", "GMT-0"] {
            #expect(try decoder.checkedDecode(Fixtures.job(["time_zone": Fixtures.quoted(good)]), now: now).timeZone == good)
        }
        // `\/` is JSON's escape of `/`.
        #expect(try decoder.checkedDecode(Fixtures.job(["time_zone": #""Europe\/Paris""#]), now: now).timeZone == "Europe/Paris")
        let unknown = error(Fixtures.job(["time_zone": #""Mars/Olympus""#]))
        #expect(
            unknown
                == JobError(
                    reason: .invalidTimeZone, detail: #"time_zone "Mars/Olympus" is not an IANA time zone name (e.g. "Europe/Paris")"#))
        // Case matters; offsets spelled as names are no zone; nor is anything but a string.
        for bad in ["europe/paris", "Europe/Paris ", "GMT+5", "UTC+01:00", "GMT-03:30", "+05:00", "-0500", "Z", ""] {
            #expect(reason(Fixtures.job(["time_zone": Fixtures.quoted(bad)])) == .invalidTimeZone, "time_zone \(bad)")
        }
        for bad in ["1", "true", "[]", #"{"name":"Europe/Paris"}"#] {
            #expect(reason(Fixtures.job(["time_zone": bad])) == .invalidTimeZone, "time_zone \(bad)")
        }
        #expect(
            error(Fixtures.job(["time_zone": "1"]))?.detail
                == #"time_zone must be a string, an IANA time zone name (e.g. "Europe/Paris"), got a number"#)
        let long = "Europe/" + String(repeating: "x", count: 58)  // 65 bytes
        #expect(
            error(Fixtures.job(["time_zone": Fixtures.quoted(long)]))?.detail
                == #"time_zone must be an IANA time zone name (e.g. "Europe/Paris") of at most 64 UTF-8 bytes, got 65"#)
    }

    @Test func knownTimeZones() {
        for name in ["Europe/Paris", "Pacific/Chatham", "Etc/GMT-14", "GMT+0", "GMT0", "UTC", "Etc/UTC"] {
            #expect(JobDecoder.knownTimeZone(name), "\(name)")
        }
        for name in ["Mars/Olympus", "GMT+5", "GMT+05:00", "UTC+1", "UTC-1", "+05:00", "-05:00", "", "EUROPE/PARIS", "Europe/"] {
            #expect(!JobDecoder.knownTimeZone(name), "\(name)")
        }
    }

    @Test func transactional() throws {
        #expect(try decoder.checkedDecode(Fixtures.job(["transactional": "true"]), now: now).isTransactional)
        for bad in [#""true""#, "1", "0", #""yes""#, "[]", "{}"] {
            #expect(reason(Fixtures.job(["transactional": bad])) == .invalidTransactional, "transactional \(bad)")
        }
        #expect(
            error(Fixtures.job(["transactional": #""true""#]))?.detail
                == #"transactional must be true or false (a JSON boolean), got the string "true""#)
    }

    /// Each recipient key given twice is ambiguous (`invalid-json`), null or not; an unknown key beside them
    /// is still ignored.
    @Test(arguments: [
        (#""user":"a","user":"b""#, "user"),
        (#""user":null,"user":"b""#, "user"),
        (#""time_zone":"Europe/Paris","time_zone":"Asia/Tokyo""#, "time_zone"),
        (#""time_zone":"Europe/Paris","time_zone":null"#, "time_zone"),
        (#""transactional":true,"transactional":false"#, "transactional"),
        (#""transactional":null,"transactional":true"#, "transactional"),
    ])
    func recipientKeyGivenTwice(members: String, key: String) {
        let bytes = Fixtures.json(#"{"id":"a","app":"x","token":"\#(Fixtures.tokenHex)","payload":{"aps":{}},\#(members),"users":1}"#)
        let e = error(bytes)
        #expect(e?.reason == .invalidJSON)
        #expect(e?.detail == "the key \"\(key)\" appears more than once")
    }

    // MARK: Size

    /// A payload of exactly `size` compact bytes: `{"aps":{"alert":"xxx…"}}`.
    static func payload(ofSize size: Int) -> String {
        #"{"aps":{"alert":""# + String(repeating: "x", count: size - 20) + #""}}"#
    }

    @Test func payloadSizeLimit() throws {
        #expect(Self.payload(ofSize: 2048).utf8.count == 2048)
        #expect(throws: Never.self) { try decoder.decode(Fixtures.job(["payload": Self.payload(ofSize: 2048)]), now: now) }
        let e = error(Fixtures.job(["payload": Self.payload(ofSize: 2049)]))
        #expect(e == JobError(reason: .payloadTooLarge, detail: "payload is 2049 bytes compact, over the limit of 2048"))
        // Checked on the compact form: whitespace in the message does not count.
        let spaced = Self.payload(ofSize: 2048).replacingOccurrences(of: ":", with: " :  ")
        #expect(throws: Never.self) { try decoder.decode(Fixtures.job(["payload": spaced]), now: now) }
        // Escapes count as they are written: "\u00e9" in the message is 2 bytes of UTF-8 when compact.
        let escaped = #"{"aps":{"alert":""# + String(repeating: #"\u00e9"#, count: 1014) + #""}}"#
        #expect(throws: Never.self) { try decoder.decode(Fixtures.job(["payload": escaped]), now: now) }
        // Configurable limit (4096 for HTTP/2).
        let http2 = JobDecoder(payloadLimit: 4096)
        #expect(throws: Never.self) { try http2.decode(Fixtures.job(["payload": Self.payload(ofSize: 4096)]), now: now) }
        #expect(reason(Fixtures.job(["payload": Self.payload(ofSize: 4097)]), decoder: http2) == .payloadTooLarge)
    }

    @Test func largestAlertsVariantMustFit() throws {
        let small = JobDecoder(payloadLimit: 100)
        let payload = #"{"aps":{"alert":"short","badge":1},"acme":1}"#  // 44 bytes
        // "short" (7 bytes as a JSON string) replaced by a 63-byte string: 100 bytes, fits exactly.
        let fits = #"{"fr":"x","de":""# + String(repeating: "d", count: 61) + #""}"#
        let job = try small.decode(Fixtures.job(["payload": payload, "alerts": fits]), now: now)
        #expect(try job.encodedPayload(language: "de", encoder: PayloadEncoder(limit: 100)).count == 100)
        let over = #"{"fr":"x","de":""# + String(repeating: "d", count: 62) + #""}"#
        let e = error(Fixtures.job(["payload": payload, "alerts": over]), decoder: small)
        #expect(
            e
                == JobError(
                    reason: .payloadTooLarge, detail: #"payload with the alerts["de"] alert is 101 bytes compact, over the limit of 100"#))
    }

    /// The decoder counts variant sizes without encoding them; check it against real encodings for
    /// payloads with and without their own alert and for every kind of alert.
    @Test(arguments: [
        #"{"aps":{"alert":"own alert","badge":1},"acme":1}"#,
        #"{"aps":{"badge":1},"acme":1}"#,
        #"{"aps":{}}"#,
        #"{"aps":{"alert":{"title":"T","body":"B","loc-args":["a"]},"sound":"s"}}"#,
    ])
    func variantSizeMatchesEncoding(payload: String) throws {
        let alerts = [
            #""plain""#, #""quote \" and é and \n""#, #"{"body":"body only"}"#,
            #"{"title":"T","body":"B","action-loc-key":null,"title-loc-args":["x","y"],"custom":{"k":[1,2.5e3]}}"#,
        ]
        for (i, alert) in alerts.enumerated() {
            let message = Fixtures.job(["payload": payload, "alerts": #"{"xx":\#(alert)}"#])
            let job = try JobDecoder(payloadLimit: 4096).decode(message, now: now)
            let size = try job.encodedPayload(language: "xx", encoder: PayloadEncoder(limit: 4096)).count
            let own = try job.encodedPayload(language: nil, encoder: PayloadEncoder(limit: 4096)).count
            let largest = max(size, own)
            #expect(throws: Never.self, "alert \(i) fits \(largest)") {
                try JobDecoder(payloadLimit: largest).decode(message, now: now)
            }
            #expect(reason(message, decoder: JobDecoder(payloadLimit: largest - 1)) == .payloadTooLarge, "alert \(i) at \(largest - 1)")
        }
    }

    @Test func firstFailureWinsInDocumentedOrder() {
        // Bad id and bad token: id is checked first.
        #expect(reason(Fixtures.job(["id": "1", "token": "2"])) == .invalidID)
        // Bad priority and expired: priority first.
        #expect(reason(Fixtures.job(["priority": "7", "expiry": "1"])) == .invalidPriority)
        // Oversized and silent-at-10: the cheap check first.
        let big = #"{"aps":{"content-available":1},"pad":""# + String(repeating: "p", count: 3000) + #""}"#
        #expect(reason(Fixtures.job(["payload": big])) == .contentAvailableOnlyWithPriority10)
    }

    @Test func errorDescriptionStartsWithTheReason() {
        let e = JobError(reason: .expired, detail: "expiry 1 is in the past")
        #expect(e.description == "expired: expiry 1 is in the past")
        #expect(JobErrorReason.contentAvailableOnlyWithPriority10.rawValue == "priority-10-content-available-only")
    }
}
