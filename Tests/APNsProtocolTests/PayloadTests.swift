import APNsProtocol
import Testing

@Suite struct PayloadTests {
    @Test func everyKeyOfTables31And32() throws {
        let p = Payload(
            aps: APS(
                alert: .dictionary(
                    AlertDictionary(
                        title: "Game Request", body: "Bob wants to play poker", titleLocKey: .value("T"),
                        titleLocArgs: .value(["a", "b"]), actionLocKey: .value("PLAY"), locKey: "GAME_PLAY_REQUEST_FORMAT",
                        locArgs: ["Jenna", "Frank"], launchImage: "Default.png")),
                badge: 5, sound: "bingbong.aiff", contentAvailable: true, category: "INVITE"),
            custom: [.init("acme1", "bar"), .init("acme2", ["bang", "whiz"])])
        let json = String(decoding: try PayloadEncoder().encode(p), as: UTF8.self)
        #expect(
            json
                == #"{"aps":{"alert":{"title":"Game Request","body":"Bob wants to play poker","title-loc-key":"T","title-loc-args":["a","b"],"action-loc-key":"PLAY","loc-key":"GAME_PLAY_REQUEST_FORMAT","loc-args":["Jenna","Frank"],"launch-image":"Default.png"},"badge":5,"sound":"bingbong.aiff","content-available":1,"category":"INVITE"},"acme1":"bar","acme2":["bang","whiz"]}"#
        )
        // And back: reading the JSON gives the same payload.
        #expect(try Payload(json: JSONParser.parse(json)) == p)
    }

    @Test func nullMeaningsAreKept() throws {
        // "action-loc-key": null shows an alert with a single OK button: null must survive a round trip.
        let json = #"{"aps":{"alert":{"body":"Bob","title-loc-key":null,"title-loc-args":null,"action-loc-key":null}}}"#
        let p = try Payload(json: JSONParser.parse(json))
        guard case .dictionary(let d) = p.aps.alert else {
            Issue.record("alert not a dictionary")
            return
        }
        #expect(d.actionLocKey == .null)
        #expect(d.titleLocKey == .null)
        #expect(String(decoding: try PayloadEncoder().encode(p), as: UTF8.self) == json)
    }

    @Test func bodyOnlyDictionaryIsWrittenAsString() throws {
        // Note under Table 3-2: "Don't specify a dictionary as the value of alert if the dictionary only
        // has the body property."
        let p = Payload(aps: APS(alert: .dictionary(AlertDictionary(body: "You got your emails.")), badge: 9))
        #expect(String(decoding: try PayloadEncoder().encode(p), as: UTF8.self) == #"{"aps":{"alert":"You got your emails.","badge":9}}"#)
    }

    @Test func specExamplesParse() throws {
        // Examples 1, 3 and 4 of "Examples of JSON Payloads" as printed; 2 and 5 are not valid JSON in
        // the spec (a trailing comma in 2; 5 likewise), so they appear here mended.
        let examples = [
            #"{ "aps" : { "alert" : "Message received from Bob" }, "acme2" : [ "bang", "whiz" ] }"#,
            #"{ "aps" : { "alert" : { "title" : "Game Request", "body" : "Bob wants to play poker", "action-loc-key" : "PLAY" }, "badge" : 5 }, "acme1" : "bar", "acme2" : [ "bang", "whiz" ] }"#,
            #"{ "aps" : { "alert" : "You got your emails.", "badge" : 9, "sound" : "bingbong.aiff" }, "acme1" : "bar", "acme2" : 42 }"#,
            #"{ "aps" : { "alert" : { "loc-key" : "GAME_PLAY_REQUEST_FORMAT", "loc-args" : [ "Jenna", "Frank"] }, "sound" : "chime.aiff" }, "acme" : "foo" }"#,
            #"{ "aps" : { "content-available" : 1 }, "acme1" : "bar", "acme2" : 42 }"#,
        ]
        for e in examples {
            let p = try Payload(json: JSONParser.parse(e))
            let compact = try PayloadEncoder().encode(p)
            // Compact: the example minus the whitespace between tokens (its keys are already in table order).
            #expect(compact == (try JSONParser.parse(e)).serialized())
            #expect(compact.count < e.utf8.count)
            #expect(try Payload(json: JSONParser.parse(compact)) == p)
        }
    }

    @Test func typeErrorsNameTheKey() {
        let cases: [(String, PayloadError)] = [
            (#"[]"#, .invalid(path: "", expected: "a JSON object")),
            (#"{"acme":1}"#, .invalid(path: "aps", expected: "an aps dictionary")),
            (#"{"aps":"x"}"#, .invalid(path: "aps", expected: "a dictionary")),
            (#"{"aps":{"badge":"1"}}"#, .invalid(path: "aps.badge", expected: "a whole number ≥ 0")),
            (#"{"aps":{"badge":-1}}"#, .invalid(path: "aps.badge", expected: "a whole number ≥ 0")),
            (#"{"aps":{"sound":1}}"#, .invalid(path: "aps.sound", expected: "a string, or a dictionary (critical, name, volume)")),
            (#"{"aps":{"alert":1}}"#, .invalid(path: "aps.alert", expected: "a string or a dictionary")),
            (#"{"aps":{"alert":{"loc-args":["a",1]}}}"#, .invalid(path: "aps.alert.loc-args", expected: "an array of strings")),
            (#"{"aps":{"content-available":2}}"#, .invalid(path: "aps.content-available", expected: "the number 1 (or 0)")),
        ]
        for (json, error) in cases {
            #expect(throws: error, "\(json)") { try Payload(json: JSONParser.parse(json)) }
        }
    }

    @Test func priority10RefusedForContentAvailableOnly() throws {
        let silent = try Payload(json: JSONParser.parse(#"{"aps":{"content-available":1},"acme":1}"#))
        #expect(silent.isContentAvailableOnly)
        #expect(throws: PayloadError.priority10WithContentAvailableOnly) { try silent.validate(priority: .immediate) }
        try silent.validate(priority: .conservePower)
        let withBadge = try Payload(json: JSONParser.parse(#"{"aps":{"content-available":1,"badge":1}}"#))
        try withBadge.validate(priority: .immediate)
    }

    @Test func sizeLimitIsEnforced() throws {
        let p = Payload(aps: APS(alert: .text(String(repeating: "a", count: 2048))))
        #expect(throws: PayloadError.tooLarge(size: 2048 + 20, limit: 2048)) { try PayloadEncoder().encode(p) }
        // `{"aps":{"alert":""}}` is 20 bytes: 2028 characters fit exactly in 2048.
        let fits = Payload(aps: APS(alert: .text(String(repeating: "a", count: 2028))))
        #expect(try PayloadEncoder().encode(fits).count == 2048)
        #expect(throws: PayloadError.tooLarge(size: 2049, limit: 2048)) {
            try PayloadEncoder().encode(Payload(aps: APS(alert: .text(String(repeating: "a", count: 2029)))))
        }
        // A configurable limit (the legacy 256).
        #expect(throws: PayloadError.tooLarge(size: 276, limit: 256)) {
            try PayloadEncoder(limit: 256).encode(Payload(aps: APS(alert: .text(String(repeating: "a", count: 256)))))
        }
    }

    @Test func truncationFitsExactlyWithEllipsis() throws {
        let enc = PayloadEncoder(limit: 40, truncatesAlertBody: true)
        // `{"aps":{"alert":""}}` = 20 bytes, so 20 bytes remain: 17 of text + 3 of "…".
        let out = try enc.encode(Payload(aps: APS(alert: .text(String(repeating: "b", count: 100)))))
        #expect(String(decoding: out, as: UTF8.self) == #"{"aps":{"alert":"bbbbbbbbbbbbbbbbb…"}}"#)
        #expect(out.count == 40)
        // Short enough already: untouched.
        let short = try enc.encode(Payload(aps: APS(alert: .text("hi"))))
        #expect(String(decoding: short, as: UTF8.self) == #"{"aps":{"alert":"hi"}}"#)
    }

    @Test func truncationNeverSplitsACharacterOrAnEscape() throws {
        // 17 bytes of room for text. "é" is 2 bytes, "☕" 3, "\"" escapes to 2, "\u{01}" to 6, "🇫🇷" is
        // one character of 8 bytes.
        let body = "éé\"☕\u{01}🇫🇷zzzzzzzzzzzzzzzzzzzz"
        // é(2) é(2) \"(2) ☕(3) \u0001(6) = 15; the flag (8) does not fit in the remaining 2.
        let out = try PayloadEncoder(limit: 40, truncatesAlertBody: true).encode(Payload(aps: APS(alert: .text(body))))
        let text = String(decoding: out, as: UTF8.self)
        #expect(text == #"{"aps":{"alert":"éé\"☕\u0001…"}}"#)
        #expect(out.count <= 40)
        #expect(try JSONParser.parse(out)["aps"]?["alert"] == .string("éé\"☕\u{01}…"))
        // Dictionary alerts truncate their body.
        let dict = Payload(aps: APS(alert: .dictionary(AlertDictionary(title: "T", body: String(repeating: "x", count: 200)))))
        let d = try PayloadEncoder(limit: 60, truncatesAlertBody: true).encode(dict)
        #expect(d.count <= 60)
        #expect(String(decoding: d, as: UTF8.self).hasSuffix(#"x…"}}}"#))
    }

    @Test func truncationImpossibleIsAnError() {
        let p = Payload(aps: APS(alert: .text("body")), custom: [.init("big", .string(String(repeating: "q", count: 100)))])
        #expect(throws: PayloadError.self) { try PayloadEncoder(limit: 50, truncatesAlertBody: true).encode(p) }
    }
}
