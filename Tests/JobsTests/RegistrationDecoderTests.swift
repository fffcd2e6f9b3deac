import APNsProtocol
import Jobs
import Testing

@Suite struct RegistrationDecoderTests {
    static let now: UInt32 = 1_767_000_000

    func reason(_ text: String, apps: KnownApps? = nil) -> JobErrorReason? {
        do {
            let event = try RegistrationDecoder.decode(Fixtures.json(text), now: Self.now, apps: apps)
            Issue.record("accepted: \(event)")
            return nil
        } catch {
            return error.reason
        }
    }

    let hex = Fixtures.tokenHex

    func accepts(_ text: String, apps: KnownApps? = nil) -> Bool {
        (try? RegistrationDecoder.decode(Fixtures.json(text), now: Self.now, apps: apps)) != nil
    }

    @Test func decodes() throws {
        let event = try RegistrationDecoder.decode(
            Fixtures.json(
                #"{"app":"com.example.shop","token":"\#(hex.uppercased())","registered_at":1767000000,"language":"fr-CA","v":2}"#),
            now: Self.now, apps: KnownApps(["com.example.shop"]))
        #expect(event == RegistrationEvent(app: "com.example.shop", token: Fixtures.token, registeredAt: 1_767_000_000, language: "fr-CA"))
        let noLanguage = try RegistrationDecoder.decode(Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":0}"#), now: Self.now)
        #expect(noLanguage == RegistrationEvent(app: "a", token: Fixtures.token, registeredAt: 0, language: nil))
        for empty in ["null", #""""#] {
            let event = try RegistrationDecoder.decode(
                Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":5,"language":\#(empty)}"#), now: Self.now)
            #expect(event.language == nil)
        }
        let viaRaw = try Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":5}"#).withUnsafeBytes {
            try RegistrationDecoder.decode($0, now: Self.now)
        }
        #expect(viaRaw.registeredAt == 5)
    }

    /// `user` and `time_zone`, as a job's (`invalid-user`, `invalid-time-zone`); null is absent, twice is
    /// `invalid-json`.
    @Test func recipientProfile() throws {
        let event = try RegistrationDecoder.decode(
            Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":5,"user":"u-81723","time_zone":"Europe/Paris"}"#), now: Self.now)
        #expect(
            event
                == RegistrationEvent(
                    app: "a", token: Fixtures.token, registeredAt: 5, language: nil, user: "u-81723", timeZone: "Europe/Paris"))
        let nulls = try RegistrationDecoder.decode(
            Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":5,"user":null,"time_zone":null}"#), now: Self.now)
        #expect(nulls.user == nil && nulls.timeZone == nil)
        let one = try RegistrationDecoder.decode(
            Fixtures.json(#"{"app":"a","token":"\#(hex)","registered_at":5,"time_zone":"Asia/Tokyo"}"#), now: Self.now)
        #expect(one.user == nil && one.timeZone == "Asia/Tokyo")
        let head = #"{"app":"a","token":"\#(hex)","registered_at":1"#
        for bad in [#""""#, "7", Fixtures.quoted(String(repeating: "u", count: 129))] {
            #expect(reason(head + #","user":\#(bad)}"#) == .invalidUser, "user \(bad)")
        }
        for bad in [#""Mars/Olympus""#, #""GMT+5""#, #""""#, "1", Fixtures.quoted(String(repeating: "z", count: 65))] {
            #expect(reason(head + #","time_zone":\#(bad)}"#) == .invalidTimeZone, "time_zone \(bad)")
        }
        #expect(reason(head + #","user":"a","user":"b"}"#) == .invalidJSON)
        #expect(reason(head + #","time_zone":null,"time_zone":"Europe/Paris"}"#) == .invalidJSON)
        do {
            _ = try RegistrationDecoder.decode(Fixtures.json(head + #","time_zone":"Mars/Olympus"}"#), now: Self.now)
            Issue.record("accepted Mars/Olympus")
        } catch {
            #expect(error.detail == #"time_zone "Mars/Olympus" is not an IANA time zone name (e.g. "Europe/Paris")"#)
        }
    }

    /// A registration names a token of any size a job may have (its suppression is lifted by the same
    /// hex): 40 bytes is accepted, lower-cased; an odd count or past 200 digits is `invalid-token`.
    @Test func tokensOfOtherSizes() throws {
        let long = String(repeating: "Ab", count: 40)
        let event = try RegistrationDecoder.decode(Fixtures.json(#"{"app":"a","token":"\#(long)","registered_at":5}"#), now: Self.now)
        #expect(event.token.byteCount == 40 && event.token.hex == long.lowercased())
        #expect(reason(#"{"app":"a","token":"\#(long)0","registered_at":1}"#) == .invalidToken)
        #expect(reason(#"{"app":"a","token":"\#(String(repeating: "ab", count: 101))","registered_at":1}"#) == .invalidToken)
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

    /// A registration from the future would lift every suppression of its token until then: at most a
    /// day ahead of the clock (issue 28).
    @Test func registeredAtAtMostADayAhead() {
        let day = RegistrationDecoder.maxAhead
        for (at, ok) in [(Self.now + day, true), (Self.now + day + 1, false), (UInt32.max, false), (0, true)] {
            let text = #"{"app":"a","token":"\#(hex)","registered_at":\#(at)}"#
            #expect(accepts(text) == ok, "registered_at \(at)")
            if !ok { #expect(reason(text) == .invalidRegisteredAt) }
        }
    }

    /// With the pipeline's apps given, a registration for another app is refused (checked after the
    /// rest, like jobs), and an app name over 255 bytes in any case.
    @Test func appMustBeConfigured() {
        let apps = KnownApps(["com.example.shop"])
        #expect(reason(#"{"app":"com.example.other","token":"\#(hex)","registered_at":1}"#, apps: apps) == .noCertificateForApp)
        #expect(reason(#"{"app":"com.example.other","token":"abc","registered_at":1}"#, apps: apps) == .invalidToken)
        let long = String(repeating: "a", count: 256)
        #expect(reason(#"{"app":"\#(long)","token":"\#(hex)","registered_at":1}"#) == .invalidApp)
        #expect(accepts(#"{"app":"com.example.shop","token":"\#(hex)","registered_at":1}"#, apps: apps))
    }
}
