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
