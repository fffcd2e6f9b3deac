import APNsProtocol
import Testing

@Suite struct HTTP2ContractTests {
    let token = String(repeating: "ab", count: 32)
    let v = APNsRequestValidator()
    let alert = Array(#"{"aps":{"alert":"hi"}}"#.utf8)

    func check(
        method: String? = "POST", path: String? = nil, _ headers: [(String, String)] = [("apns-topic", "com.example.shop")],
        payload: [UInt8]? = nil, requireTopic: Bool = false
    ) -> Result<APNsRequest, APNsRejection> {
        v.validate(
            method: method, path: path ?? "/3/device/\(token)", headers: headers, payload: payload ?? alert,
            requireTopic: requireTopic)
    }

    func reason(_ r: Result<APNsRequest, APNsRejection>) -> APNsReason? {
        if case .failure(let e) = r { return e.reason }
        return nil
    }

    @Test func aWellFormedRequestIsParsed() throws {
        let r = try check([
            ("apns-topic", "com.example.shop.voip"), ("apns-id", "123e4567-e89b-12d3-a456-4266554400A0"),
            ("apns-expiration", "0"), ("apns-priority", "5"), ("apns-collapse-id", String(repeating: "c", count: 64)),
            ("apns-push-type", "voip"), ("authorization", "bearer x.y.z"), ("user-agent", "test"),
        ]).get()
        #expect(r.token.hex == token)
        #expect(r.topic == "com.example.shop.voip")
        #expect(r.apnsID == "123e4567-e89b-12d3-a456-4266554400A0")
        #expect(r.expiration == 0)
        #expect(r.priority == .throttled)
        #expect(r.collapseID?.count == 64)
        #expect(r.pushType == .voip)
        #expect(r.authorization == "bearer x.y.z")
    }

    @Test func everyViolationHasItsReason() {
        #expect(reason(check(method: "GET")) == .methodNotAllowed)
        #expect(reason(check(method: nil)) == .methodNotAllowed)
        #expect(reason(check(path: "/3/devices/\(token)")) == .badPath)
        #expect(reason(check(path: "/")) == .badPath)
        #expect(reason(check(path: "/3/device/")) == .missingDeviceToken)
        #expect(reason(check(path: "/3/device/abc")) == .badDeviceToken)
        #expect(reason(check(path: "/3/device/" + String(repeating: "zz", count: 32))) == .badDeviceToken)
        #expect(reason(check([("apns-topic", "a"), ("apns-topic", "b")])) == .duplicateHeaders)
        #expect(reason(check([("apns-id", "not-a-uuid")])) == .badMessageId)
        #expect(reason(check([("apns-id", "123e4567-e89b-12d3-a456-4266554400a0x")])) == .badMessageId)
        #expect(reason(check([("apns-priority", "7")])) == .badPriority)
        #expect(reason(check([("apns-expiration", "-1")])) == .badExpirationDate)
        #expect(reason(check([("apns-expiration", "soon")])) == .badExpirationDate)
        #expect(reason(check([("apns-collapse-id", String(repeating: "c", count: 65))])) == .badCollapseId)
        #expect(reason(check([("apns-topic", "a"), ("apns-push-type", "pager")])) == .invalidPushType)
        #expect(reason(check([("apns-topic", "com.example shop")])) == .badTopic)
        #expect(reason(check([("apns-topic", "com.example.shop"), ("apns-push-type", "voip")])) == .badTopic)
        #expect(reason(check([], requireTopic: true)) == .missingTopic)
        #expect(reason(check([("apns-push-type", "voip")])) == .missingTopic)
        #expect(reason(check(payload: [])) == .payloadEmpty)
        #expect(reason(check(payload: Array(repeating: 0x20, count: 4097))) == .payloadTooLarge)
        #expect(reason(check([("apns-topic", "com.example.shop")])) == nil)
    }

    @Test func payloadLimitFollowsThePushType() {
        let big = Array(repeating: UInt8(0x20), count: 5120)
        #expect(reason(check([("apns-topic", "a.voip"), ("apns-push-type", "voip")], payload: big)) == nil)
        #expect(reason(check([("apns-topic", "a.voip"), ("apns-push-type", "voip")], payload: big + [0x20])) == .payloadTooLarge)
        #expect(reason(check([("apns-topic", "a")], payload: Array(big.prefix(4096)))) == nil)
        #expect(APNsPushType.allCases.count == 11)
        #expect(APNsPushType.allCases.filter { $0.maxPayloadBytes != 4096 } == [.voip])
    }

    @Test func backgroundMeansPriorityFiveAndContentAvailableOnly() {
        let silent = Array(#"{"aps":{"content-available":1},"k":"v"}"#.utf8)
        let bg: [(String, String)] = [("apns-topic", "a"), ("apns-push-type", "background")]
        #expect(reason(check(bg + [("apns-priority", "5")], payload: silent)) == nil)
        #expect(reason(check(bg, payload: silent)) == .badPriority)  // absent means 10
        #expect(reason(check(bg + [("apns-priority", "10")], payload: silent)) == .badPriority)
        #expect(reason(check(bg + [("apns-priority", "5")], payload: alert)) == .invalidPushType)
        let both = Array(#"{"aps":{"content-available":1,"sound":"a"}}"#.utf8)
        #expect(reason(check(bg + [("apns-priority", "5")], payload: both)) == .invalidPushType)
    }

    @Test func priorityOneIsAccepted() throws {
        let r = try check([("apns-topic", "com.example.shop"), ("apns-priority", "1")]).get()
        #expect(r.priority == .powerSaving)
        #expect(reason(check([("apns-topic", "a"), ("apns-priority", "2")])) == .badPriority)
    }

    /// Live Activity payloads per event (LiveActivityPayload); a payload that breaks them: InvalidPushType.
    @Test func liveActivityPayloadsAreCheckedPerEvent() {
        let la: [(String, String)] = [("apns-topic", "com.example.shop.push-type.liveactivity"), ("apns-push-type", "liveactivity")]
        func payload(_ s: String) -> [UInt8] { Array(s.utf8) }
        let update = payload(#"{"aps":{"event":"update","timestamp":1767000000,"content-state":{"home":1}}}"#)
        #expect(reason(check(la, payload: update)) == nil)
        #expect(reason(check(la + [("apns-priority", "5")], payload: update)) == nil)
        #expect(reason(check(la + [("apns-priority", "1")], payload: update)) == .badPriority)  // "5 or 10"
        let noState = payload(#"{"aps":{"event":"update","timestamp":1767000000}}"#)
        #expect(reason(check(la, payload: noState)) == .invalidPushType)
        let startWithoutAlert = payload(
            #"{"aps":{"event":"start","timestamp":1767000000,"content-state":{},"attributes-type":"T","attributes":{}}}"#)
        #expect(reason(check(la, payload: startWithoutAlert)) == .invalidPushType)
        let start = payload(
            #"{"aps":{"event":"start","timestamp":1767000000,"content-state":{},"attributes-type":"T","attributes":{},"alert":"go"}}"#)
        #expect(reason(check(la, payload: start)) == nil)
        #expect(reason(check(la, payload: payload(#"{"aps":{"event":"stop","timestamp":1,"content-state":{}}}"#))) == .invalidPushType)
        // The same payloads under another push type are not Live Activities.
        #expect(reason(check(payload: noState)) == nil)
    }

    @Test func reasonsCarryApplesStatuses() {
        // Apple's table (32), plus BadEnvironmentKeyInToken, the spelling APNs has been seen to send, and
        // TopicMismatch, a 403 of the broadcast table.
        #expect(APNsReason.allCases.count == 34)
        let byStatus = Dictionary(grouping: APNsReason.allCases, by: \.status).mapValues(\.count)
        #expect(byStatus == [400: 14, 403: 10, 404: 1, 405: 1, 410: 2, 413: 1, 429: 2, 500: 1, 503: 2])
        #expect(APNsReason(rawValue: "UnrelatedKeyIdInToken")?.status == 403)
        #expect(APNsReason(rawValue: "BadEnvironmentKeyIdInToken")?.status == 403)
        #expect(APNsReason.unregistered.status == 410)
        #expect(APNsReason.tooManyProviderTokenUpdates.status == 429)
        #expect(APNsReason.shutdown.status == 503)
        #expect(APNsReason(rawValue: "BadDeviceToken") == .badDeviceToken)
    }

    @Test func errorBodyRoundTrips() throws {
        #expect(String(decoding: APNsErrorBody(reason: .badTopic).encoded(), as: UTF8.self) == #"{"reason":"BadTopic"}"#)
        let gone = APNsErrorBody(reason: .unregistered, timestamp: 1_700_000_000_123)
        #expect(String(decoding: gone.encoded(), as: UTF8.self) == #"{"reason":"Unregistered","timestamp":1700000000123}"#)
        #expect(try APNsErrorBody(decoding: gone.encoded()) == gone)
        let later = try APNsErrorBody(decoding: Array(#"{"timestamp":"12","reason":"SomethingNew","x":[1]}"#.utf8))
        #expect(later.reasonText == "SomethingNew" && later.reason == nil && later.timestamp == 12)
        #expect(throws: APNsErrorBody.DecodeError.noReason) { try APNsErrorBody(decoding: Array(#"{"status":1}"#.utf8)) }
        #expect(throws: APNsErrorBody.DecodeError.self) { try APNsErrorBody(decoding: Array("<html>".utf8)) }
    }
}
