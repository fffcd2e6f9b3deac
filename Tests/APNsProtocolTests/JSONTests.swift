import APNsProtocol
import Testing

@Suite struct JSONTests {
    @Test func parsesAndWritesCompact() throws {
        let text = """
            { "aps" : { "alert" : "Message received from Bob" },
              "acme2" : [ "bang", "whiz" ], "n": -1.5e3, "t": true, "f": false, "z": null }
            """
        let v = try JSONParser.parse(text)
        #expect(
            v.serializedString
                == #"{"aps":{"alert":"Message received from Bob"},"acme2":["bang","whiz"],"n":-1.5e3,"t":true,"f":false,"z":null}"#)
        #expect(v["n"] == .number("-1.5e3"))  // numbers keep their spelling
    }

    @Test func escapesRoundTrip() throws {
        let s = "quote \" backslash \\ slash / nl \n tab \t bell \u{07} é ☕ 🎉"
        let written = JSONValue.string(s).serializedString
        #expect(written == #""quote \" backslash \\ slash / nl \n tab \t bell \u0007 é ☕ 🎉""#)
        #expect(try JSONParser.parse(written) == .string(s))
        // Escaped forms from other writers, surrogate pairs included.
        #expect(try JSONParser.parse(#""\u00e9\/\ud83c\udf89""#) == .string("é/🎉"))
    }

    @Test func errorsSayWhere() {
        let cases: [(String, Int)] = [
            ("", 0), ("{", 1), (#"{"a":}"#, 5), ("[1,]", 3), (#""\ud83c""#, 7), ("01", 1), ("1.", 2), ("tru", 0),
            (#"{"a":1}x"#, 7), ("\"a\u{01}\"", 2),
        ]
        for (text, offset) in cases {
            #expect(throws: JSONParser.Error.self, "\(text)") { try JSONParser.parse(text) }
            do {
                _ = try JSONParser.parse(text)
            } catch {
                #expect(error.offset == offset, "\(text): \(error)")
            }
        }
    }

    /// Strings are scanned eight bytes at a time while they hold nothing special: every byte value at
    /// every position of a 24-byte string (three chunks, and the chunk boundaries) gives the same result
    /// whether the string is built (`parse`) or only checked (`parseObject`'s raw member), and plain
    /// bytes give the string, control bytes an error at their own offset.
    @Test func everyByteAtEveryPositionOfAString() throws {
        for position in 0..<24 {
            for b in UInt8.min...UInt8.max {
                var body = [UInt8](repeating: UInt8(ascii: "a"), count: 24)
                body[position] = b
                let text = Array(#"{"k":""#.utf8) + body + Array(#""}"#.utf8)
                let built = Result { () throws(JSONParser.Error) in try JSONParser.parse(text) }
                let checked = text.withUnsafeBytes { raw in
                    Result { () throws(JSONParser.Error) in
                        try JSONParser.parseObject(raw, key: { $0.elementsEqual("k".utf8) ? 1 : nil }, keepingRaw: { $0 == 1 })
                    }
                }
                switch (built, checked) {
                case (.success(let value), .success(let members)):
                    guard case .raw(let range)? = members?.first?.value else {
                        Issue.record("byte \(b) at \(position): not kept raw")
                        continue
                    }
                    #expect(try JSONParser.parse(Array(text[range])) == value["k"], "byte \(b) at \(position)")
                case (.failure(let a), .failure(let c)):
                    #expect(a == c, "byte \(b) at \(position)")
                default:
                    Issue.record("byte \(b) at \(position): \(built) vs \(checked)")
                }
                if b >= 0x20 && b < 0x80 && b != UInt8(ascii: "\"") && b != UInt8(ascii: "\\") {
                    #expect((try? built.get())?["k"] == .string(String(decoding: body, as: UTF8.self)), "byte \(b) at \(position)")
                }
                if b < 0x20 {
                    #expect((try? built.get()) == nil)
                    if case .failure(let e) = built { #expect(e.offset == 6 + position && e.message == "control character in string") }
                }
            }
        }
    }

    /// `parseObject` reads what `parse` reads: the same members for the keys it names (escaped or not),
    /// unknown keys checked and left out, the same error at the same offset — and again when `knownValue`
    /// names values seen in an earlier message, taken without being read.
    @Test(arguments: [
        #"{"a":1,"b":{"x":[1,2,{"y":null}]},"c":"t","zz":[true,false]}"#,
        #"{"\u0061":1,"b":[]}"#,
        #"{"é":1,"b":{}}"#,
        #"{"a":1,"zz":[1,]}"#,
        #"{"a":1,"zz":"\q"}"#,
        #"{"b":{"x":1}}"#,
        #"{"b":{"x":1}}}"#,
        #"{"b":{"x":1},"b":{"x":1}}"#,
        #"{"b":{"x":1} ,"c":"t"}"#,
        #"{"b":[1,2],"c":[1,2]]}"#,
        #"{"c":5}"#,
        #"{"c":55}"#,
        #"{"a" 1}"#,
        #"{}"#,
        #"[1]"#,
    ])
    func parseObjectReadsWhatParseReads(text: String) throws {
        // Seen before: these values of b and c, which `knownValue` then offers at every b and c.
        let known = [#"{"x":1}"#, "[1,2]", "5", #"{"x":[1,2,{"y":null}]}"#].map { Array($0.utf8) }
        let codes: [String: UInt8] = ["a": 1, "b": 2, "c": 3]
        let bytes = Array(text.utf8)
        let parsed = Result { () throws(JSONParser.Error) in try JSONParser.parse(bytes) }
        for offering in [false, true] {
            let members = bytes.withUnsafeBytes { raw in
                Result { () throws(JSONParser.Error) in
                    try JSONParser.parseObject(
                        raw, key: { codes[String(decoding: $0, as: UTF8.self)] }, keepingRaw: { $0 != 1 },
                        knownValue: { key, rest in
                            guard offering, key != 1 else { return nil }
                            return known.first { rest.starts(with: $0) }?.count
                        })
                }
            }
            switch (parsed, members) {
            case (.success(.object(let object)), .success(let members?)):
                let expected = object.compactMap { m in codes[m.key].map { ($0, m.value) } }
                let got = try members.map { m -> (UInt8, JSONValue) in
                    switch m.value {
                    case .value(let v): return (m.key, v)
                    case .raw(let r): return (m.key, try JSONParser.parse(Array(bytes[r])))
                    }
                }
                #expect(got.map(\.0) == expected.map(\.0) && got.map(\.1) == expected.map(\.1), "\(text)")
            case (.success, .success(nil)):
                if case .success(.object) = parsed { Issue.record("\(text): an object not read as one") }
            case (.failure(let a), .failure(let b)):
                #expect(a == b, "\(text)")
            default:
                Issue.record("\(text) (offering \(offering)): \(parsed) vs \(members)")
            }
        }
    }

    @Test func invalidUTF8IsRefused() {
        #expect(throws: JSONParser.Error.self) { try JSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
    }

    @Test func nestingIsBounded() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONParser.Error.self) { try JSONParser.parse(deep) }
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect((try? JSONParser.parse(ok)) != nil)
    }
}
