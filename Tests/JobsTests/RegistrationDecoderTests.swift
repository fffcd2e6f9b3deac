import APNsProtocol
import Jobs
import Testing

@Suite struct RegistrationDecoderTests {
    func reason(_ text: String) -> JobErrorReason? {
        do {
            let event = try RegistrationDecoder.decode(Fixtures.json(text))
            Issue.record("accepted: \(event)")
            return nil
        } catch {
            return error.reason
        }
    }

    let hex = Fixtures.tokenHex

    @Test func decodes() throws {
        let event = try RegistrationDecoder.decode(
            Fixtures.json(#"{"app":"com.example.shop","token":"\#(hex.uppercased())","registered_at":1767000000,"language":"fr-CA","v":2}"#))
        #expect(event == RegistrationEvent(app: "com.example.shop", token: Fixtures.token, registeredAt: 1_767_000_000, language: "fr-CA"))
        let noLanguage = try RegistrationDecoder.decode(Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":0}"#))
        #expect(noLanguage == RegistrationEvent(app: "a", token: Fixtures.token, registeredAt: 0, language: nil))
        for empty in ["null", #""""#] {
            let event = try RegistrationDecoder.decode(Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":5,"language":\#(empty)}"#))
            #expect(event.language == nil)
        }
        let viaRaw = try Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":5}"#).withUnsafeBytes { try RegistrationDecoder.decode($0) }
        #expect(viaRaw.registeredAt == 5)
    }

    @Test func refusals() {
        #expect(reason(#"{"app":"a","token":"\#(hex)","registered_at":1"#) == .invalidJSON)
        #expect(reason(#"{"app":"a","app":"b","token":"\#(hex)","registered_at":1}"#) == .invalidJSON)
        #expect(reason(#"["app"]"#) == .notAnObject)
        #expect(reason(#"{"token":"\#(hex)","registered_at":1}"#) == .missingApp)
        #expect(reason(#"{"app":"","token":"\#(hex)","registered_at":1}"#) == .missingApp)
        #expect(reason(#"{"app":"a","registered_at":1}"#) == .invalidToken)
        #expect(reason(#"{"app":"a","token":"abc","registered_at":1}"#) == .invalidToken)
        #expect(reason(#"{"app":"a","token":"\#(hex)"}"#) == .invalidRegisteredAt)
        for bad in ["-1", "1.5", "1e9", #""1767000000""#, "4294967296", "null"] {
            #expect(reason(#"{"app":"a","token":"\#(hex)","registered_at":\#(bad)}"#) == .invalidRegisteredAt, "registered_at \(bad)")
        }
        #expect(reason(#"{"app":"a","token":"\#(hex)","registered_at":1,"language":7}"#) == .invalidLanguage)
        let long = String(repeating: "x", count: 65)
        #expect(reason(#"{"app":"a","token":"\#(hex)","registered_at":1,"language":"\#(long)"}"#) == .invalidLanguage)
    }
}
