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
        #expect(refusal(headers([APNsHeader.pushType: nil])) == "MissingPushType")
        #expect(refusal(headers([APNsHeader.priority: "7"])) == "BadPriority")
        #expect(refusal(headers([APNsHeader.priority: nil])) == "BadPriority")
        #expect(refusal(headers([APNsHeader.expiration: "soon"])) == "BadExpirationDate")
        #expect(refusal(headers([APNsHeader.expiration: nil])) == "BadExpirationDate")
        #expect(refusal(headers([APNsHeader.requestID: "nope"])) == "BadMessageId")
        #expect(refusal(headers() + [(APNsHeader.channelID, Self.channel)]) == "DuplicateHeaders")
        #expect(refusal(headers(), payload: []) == "PayloadEmpty")
        #expect(refusal(headers(), payload: Array(#"{"aps":{"event":"update"}}"#.utf8)) == "InvalidPushType")
        #expect(refusal(headers(), method: "GET") == "MethodNotAllowed")
        let missing = APNsBroadcastRefusal(APNsChannelReason.missingChannelId)
        #expect(missing.status == 400)
    }

    /// Apple's table for these endpoints pairs every channel reason with 400 (ChannelNotRegistered and
    /// FeatureNotEnabled included).
    @Test func channelReasonsAre400() {
        for reason in APNsChannelReason.allCases { #expect(reason.status == 400, "\(reason)") }
        #expect(APNsReason.topicMismatch.status == 403)
    }

    /// "Specify 1 to prioritize the device's power considerations over all other factors for delivery":
    /// a broadcast takes 10, 5 and 1.
    @Test(arguments: ["10", "5", "1"]) func everyDocumentedPriority(priority: String) throws {
        let r = try APNsBroadcast.validate(
            bundleID: "com.example.shop", method: "POST", headers: headers([APNsHeader.priority: priority]), payload: Self.update
        ).get()
        #expect(r.priority?.rawValue == Int(priority))
    }

    /// "the payload is limited to a maximum size of 5 KB (5,120 bytes)": above a device push's 4096.
    @Test func payloadsUpTo5120Bytes() {
        func padded(_ size: Int) -> [UInt8] {
            let head = Array(#"{"aps":{"event":"update","timestamp":1685952000,"content-state":{"x":""#.utf8)
            let tail = Array(#""}}}"#.utf8)
            return head + Array(repeating: UInt8(ascii: "a"), count: size - head.count - tail.count) + tail
        }
        #expect(refusal(headers(), payload: padded(4500)) == nil)
        #expect(refusal(headers(), payload: padded(5120)) == nil)
        #expect(refusal(headers(), payload: padded(5121)) == "PayloadTooLarge")
    }

    /// "Ensure that no push type suffix is added to the bundle ID."
    @Test func aSuffixedBundleIDIsTopicDisallowed() {
        let r = APNsBroadcast.validate(
            bundleID: "com.example.shop.push-type.liveactivity", method: "POST", headers: headers(), payload: Self.update)
        #expect(r.failureReason == "TopicDisallowed")
    }

    // MARK: apns-expiration against the channel's storage policy (APNsBroadcastExpiration)

    static let now: UInt32 = 1_767_000_000

    @Test func noMessageStoredTakesOnlyZero() {
        #expect(APNsBroadcastExpiration.expiration(requested: nil, policy: .noStorage, now: Self.now) == .success(0))
        #expect(APNsBroadcastExpiration.expiration(requested: 0, policy: .noStorage, now: Self.now) == .success(0))
        #expect(
            APNsBroadcastExpiration.expiration(requested: Self.now + 60, policy: .noStorage, now: Self.now)
                == .failure(.storedOnNoStorageChannel(requested: Self.now + 60)))
        #expect(APNsBroadcastExpiration.accepts(0, on: .noStorage) && !APNsBroadcastExpiration.accepts(Int64(Self.now), on: .noStorage))
    }

    /// "Messages in Most Recent Message store for a maximum duration of 8 hours. You can specify an earlier
    /// expiration": the job's own, else 8 hours; a later one is sent as 8 hours.
    @Test func mostRecentMessageKeepsAtMostEightHours() {
        let eight = Self.now + 8 * 3600
        #expect(APNsBroadcastExpiration.expiration(requested: nil, policy: .mostRecent, now: Self.now) == .success(eight))
        #expect(APNsBroadcastExpiration.expiration(requested: 0, policy: .mostRecent, now: Self.now) == .success(0))
        #expect(
            APNsBroadcastExpiration.expiration(requested: Self.now + 600, policy: .mostRecent, now: Self.now) == .success(Self.now + 600))
        #expect(APNsBroadcastExpiration.expiration(requested: Self.now + 86_400, policy: .mostRecent, now: Self.now) == .success(eight))
        #expect(APNsBroadcastExpiration.expiration(requested: nil, policy: .mostRecent, now: UInt32.max - 5) == .success(UInt32.max))
        #expect(APNsBroadcastExpiration.accepts(Int64(eight), on: .mostRecent) && APNsBroadcastExpiration.accepts(0, on: .mostRecent))
    }

    /// Not known: the job's word, else 0 (which either policy takes).
    @Test func anUnknownPolicyTakesTheJobsWordElseZero() {
        #expect(APNsBroadcastExpiration.expiration(requested: nil, policy: nil, now: Self.now) == .success(0))
        #expect(APNsBroadcastExpiration.expiration(requested: Self.now + 60, policy: nil, now: Self.now) == .success(Self.now + 60))
    }
}

extension Result where Failure == APNsBroadcastRefusal {
    var failureReason: String? {
        if case .failure(let r) = self { return r.reason }
        return nil
    }
}
