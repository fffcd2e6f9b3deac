import APNsProtocol
import Testing

/// The broadcast request's contract (`APNsBroadcast`, issue 31 item 2), pure: its path, the channel id's
/// shape, and what a server (the simulator) refuses, each with Apple's reason.
@Suite struct BroadcastContractTests {
    static let update = Array(
        #"{"aps":{"event":"update","timestamp":1685952000,"content-state":{"currentHealthLevel":0.0}}}"#.utf8)
    static let channel = "dHN0LXNyY2gtMDAwMDAx"

    func headers(_ changes: [String: String?] = [:]) -> [(String, String)] {
        var h: [(String, String)] = [
            (APNsHeader.channelID, Self.channel), (APNsHeader.pushType, "liveactivity"), (APNsHeader.priority, "10"),
            (APNsHeader.expiration, "0"), (APNsHeader.requestID, "123e4567-e89b-12d3-a456-426614174000"),
        ]
        for (name, value) in changes {
            h.removeAll { $0.0 == name }
            if let value { h.append((name, value)) }
        }
        return h
    }

    func refusal(_ h: [(String, String)], payload: [UInt8] = update, method: String = "POST") -> String? {
        if case .failure(let r) = APNsBroadcast.validate(bundleID: "com.example.shop", method: method, headers: h, payload: payload) {
            return r.reason
        }
        return nil
    }

    @Test func pathNamesTheApp() {
        #expect(APNsBroadcast.path(bundleID: "com.example.shop") == "/4/broadcasts/apps/com.example.shop")
        #expect(APNsBroadcast.bundleID(path: "/4/broadcasts/apps/com.example.shop") == "com.example.shop")
        #expect(APNsBroadcast.bundleID(path: "/4/broadcasts/apps/") == nil)
        #expect(APNsBroadcast.bundleID(path: "/4/broadcasts/apps/a/b") == nil)
        #expect(APNsBroadcast.bundleID(path: "/3/device/abcd") == nil)
        // An app configured with the Live Activity topic broadcasts under its bundle id.
        #expect(APNsBroadcast.bundleID(app: "com.example.shop.push-type.liveactivity") == "com.example.shop")
        #expect(APNsBroadcast.bundleID(app: "com.example.shop") == "com.example.shop")
    }

    @Test func channelIDsAreBase64() {
        #expect(BroadcastChannelID(Self.channel)?.value == Self.channel)
        #expect(BroadcastChannelID("ab-_cd==") != nil)
        #expect(BroadcastChannelID("") == nil && BroadcastChannelID("a b") == nil && BroadcastChannelID("ab=c") == nil)
        #expect(BroadcastChannelID(String(repeating: "A", count: APNsChannelManagement.maxChannelIDLength + 1)) == nil)
    }

    @Test func aValidBroadcast() throws {
        let r = try APNsBroadcast.validate(bundleID: "com.example.shop", method: "POST", headers: headers(), payload: Self.update).get()
        #expect(r.channelID == Self.channel && r.priority == .immediate && r.expiration == 0)
        #expect(r.requestID == "123e4567-e89b-12d3-a456-426614174000")
    }

    @Test func refusalsCarryApplesReasons() {
        #expect(refusal(headers([APNsHeader.channelID: nil])) == "MissingChannelId")
        #expect(refusal(headers([APNsHeader.channelID: "not base64!"])) == "BadChannelId")
        #expect(refusal(headers([APNsHeader.pushType: "alert"])) == "InvalidPushType")
        #expect(refusal(headers([APNsHeader.priority: "1"])) == "BadPriority")
        #expect(refusal(headers([APNsHeader.expiration: "soon"])) == "BadExpirationDate")
        #expect(refusal(headers([APNsHeader.requestID: "nope"])) == "BadMessageId")
        #expect(refusal(headers() + [(APNsHeader.channelID, Self.channel)]) == "DuplicateHeaders")
        #expect(refusal(headers(), payload: []) == "PayloadEmpty")
        #expect(refusal(headers(), payload: Array(repeating: 0x20, count: 4097)) == "PayloadTooLarge")
        #expect(refusal(headers(), payload: Array(#"{"aps":{"event":"update"}}"#.utf8)) == "InvalidPushType")
        #expect(refusal(headers(), method: "GET") == "MethodNotAllowed")
        let missing = APNsBroadcastRefusal(APNsChannelReason.missingChannelId)
        #expect(missing.status == 400)
    }
}
