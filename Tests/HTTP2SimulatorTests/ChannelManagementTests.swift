import APNsProtocol
import Foundation
import HTTP2Simulator
import TestSupport
import Testing

/// Channel management on the simulator (issue 31 item 7), over TLS with a raw HTTP/2 client: the
/// request shapes of Apple's "Sending channel management requests to APNs" and the answers.
@Suite(.serialized) struct ChannelManagementTests {
    static let channels = APNsChannelManagement.channelsPath(bundleID: H2Fixture.shop)
    static let all = APNsChannelManagement.allChannelsPath(bundleID: H2Fixture.shop)

    @Test func createGetListDeleteThenUnknown() async throws {
        let f = try await H2Fixture()
        let c = try await f.tokenClient()
        let auth = [("authorization", try f.bearer())]
        let requestID = "0f8fad5b-d9cb-469f-a165-70867728950e"
        let create = try await c.request(
            path: Self.channels, headers: auth + [("apns-request-id", requestID)],
            body: Array(#"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#.utf8))
        #expect(create.status == 201, "\(create.bodyText)")
        #expect(create.header("apns-request-id") == requestID)
        let id = try #require(create.header("apns-channel-id"))
        #expect(APNsChannelManagement.isPlausibleChannelID(id) && Data(base64Encoded: id)?.count == 16, "\(id)")

        let get = try await c.request(method: "GET", path: Self.channels, headers: auth + [("apns-channel-id", id)])
        #expect(get.status == 200)
        let settings = try JSONParser.parse(get.body)
        #expect(settings["message-storage-policy"]?.intValue == 1 && settings["push-type"]?.stringValue == "LiveActivity")
        // Without a request id, the simulator makes one (a canonical UUID), as APNs does.
        #expect(get.header("apns-request-id").map(APNsRequestValidator.isCanonicalUUID) == true)

        let second = try await c.request(
            path: Self.channels, headers: auth, body: Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8))
        let other = try #require(second.header("apns-channel-id"))
        #expect(other != id)
        let list = try await c.request(method: "GET", path: Self.all, headers: auth)
        #expect(list.status == 200)
        #expect(try JSONParser.parse(list.body)["channels"]?.arrayValue?.compactMap(\.stringValue) == [id, other])
        // Another app's list does not show them.
        let theirs = try await c.request(
            method: "GET", path: APNsChannelManagement.allChannelsPath(bundleID: "com.example.other"), headers: auth)
        #expect(try JSONParser.parse(theirs.body)["channels"]?.arrayValue?.isEmpty == true)

        let delete = try await c.request(method: "DELETE", path: Self.channels, headers: auth + [("apns-channel-id", id)])
        #expect(delete.status == 204 && delete.body.isEmpty)
        let gone = try await c.request(method: "GET", path: Self.channels, headers: auth + [("apns-channel-id", id)])
        // Apple's table: "400 ChannelNotRegistered — The apns-channel-id header used in the request doesn't exist."
        #expect(gone.status == 400 && reason(gone) == "ChannelNotRegistered")
        let again = try await c.request(method: "DELETE", path: Self.channels, headers: auth + [("apns-channel-id", id)])
        #expect(again.status == 400 && reason(again) == "ChannelNotRegistered")
        #expect(f.simulator.channels(app: H2Fixture.shop).map(\.id) == [other])
        // Channel answers are not counted as notifications.
        #expect(f.simulator.totals.accepted == 0)
        #expect(f.simulator.totals.channelAnswers["create 201"] == 2 && f.simulator.totals.channelAnswers["get ChannelNotRegistered"] == 1)
        try await f.shutdown()
    }

    @Test func theChannelLimitIsPerApp() async throws {
        let f = try await H2Fixture { $0.faults.channelLimit = 2 }
        let c = try await f.tokenClient()
        let auth = [("authorization", try f.bearer())]
        let body = Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8)
        for _ in 0..<2 { #expect(try await c.request(path: Self.channels, headers: auth, body: body).status == 201) }
        let third = try await c.request(path: Self.channels, headers: auth, body: body)
        #expect(third.status == 400 && reason(third) == "CannotCreateChannelConfig")
        // Another app has its own allowance.
        let other = try await c.request(path: APNsChannelManagement.channelsPath(bundleID: "com.example.other"), headers: auth, body: body)
        #expect(other.status == 201)
        // Deleting one makes room again.
        let first = try #require(f.simulator.channels(app: H2Fixture.shop).first?.id)
        #expect(try await c.request(method: "DELETE", path: Self.channels, headers: auth + [("apns-channel-id", first)]).status == 204)
        #expect(try await c.request(path: Self.channels, headers: auth, body: body).status == 201)
        try await f.shutdown()
    }

    @Test func requestsAPNsWouldRefuseAreRefusedWithTheirReason() async throws {
        let f = try await H2Fixture()
        let c = try await f.tokenClient()
        let auth = [("authorization", try f.bearer())]
        let cases: [(String, String, [(String, String)], String, Int, String)] = [
            ("POST", Self.channels, [], #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#, 403, "MissingProviderToken"),
            (
                "POST", Self.channels, [("authorization", "bearer nope")], #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#, 403,
                "InvalidProviderToken"
            ),
            ("POST", Self.channels, auth, #"{"message-storage-policy":0,"push-type":"alert"}"#, 400, "InvalidPushType"),
            ("POST", Self.channels, auth, #"{"message-storage-policy":0}"#, 400, "MissingPushType"),
            // Apple's table: BadRequestParams "contained an unrecognizable attribute", BadRequestPayload "is unparseable".
            ("POST", Self.channels, auth, #"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, 400, "BadRequestParams"),
            ("POST", Self.channels, auth, #"{"push-type":"LiveActivity"}"#, 400, "BadRequestParams"),
            ("POST", Self.channels, auth, #"{"message-storage-policy":0,"push-type":"LiveActivity","x":1}"#, 400, "BadRequestParams"),
            ("POST", Self.channels, auth, "", 400, "BadRequestPayload"),
            ("POST", Self.channels, auth, "{", 400, "BadRequestPayload"),
            ("GET", Self.channels, auth, "", 400, "MissingChannelId"),
            ("GET", Self.channels, auth + [("apns-channel-id", "not base64!")], "", 400, "BadChannelId"),
            ("DELETE", Self.channels, auth + [("apns-channel-id", "bm90LWEtY2hhbm5lbA==")], "", 400, "ChannelNotRegistered"),
            ("PUT", Self.channels, auth, "", 405, "MethodNotAllowed"),
            ("POST", Self.all, auth, "", 405, "MethodNotAllowed"),
            ("GET", "/1/apps/\(H2Fixture.shop)/channel", auth, "", 404, "BadPath"),
        ]
        for (method, path, headers, body, status, why) in cases {
            let r = try await c.request(method: method, path: path, headers: headers, body: Array(body.utf8))
            #expect(r.status == status && reason(r) == why, "\(method) \(path) \(body): \(r.status.map(String.init) ?? "-") \(r.bodyText)")
            #expect(r.header("apns-request-id").map(APNsRequestValidator.isCanonicalUUID) == true)
        }
        #expect(f.simulator.channels(app: H2Fixture.shop).isEmpty)
        try await f.shutdown()
    }

    /// A key restricted to the sandbox is refused by a production simulator, taken by a sandbox one.
    @Test func aKeyOfTheOtherEnvironmentIsRefused() async throws {
        for sandbox in [false, true] {
            let f = try await H2Fixture {
                $0.faults.keyEnvironments = [TestCertificates.tokenKeyID: "sandbox"]
                $0.sandbox = sandbox
            }
            let c = try await f.tokenClient()
            let r = try await c.request(method: "GET", path: Self.all, headers: [("authorization", try f.bearer())])
            if sandbox {
                #expect(r.status == 200, "\(r.bodyText)")
            } else {
                #expect(r.status == 403 && reason(r) == "BadEnvironmentKeyIdInToken", "\(r.bodyText)")
            }
            try await f.shutdown()
        }
    }

    @Test func aCertificateManagesOnlyItsOwnApp() async throws {
        let f = try await H2Fixture()
        let c = try await f.certClient()
        let body = Array(#"{"message-storage-policy":1,"push-type":"LiveActivity"}"#.utf8)
        #expect(try await c.request(path: Self.channels, body: body).status == 201)
        let other = try await c.request(path: APNsChannelManagement.channelsPath(bundleID: "com.example.other"), body: body)
        #expect(other.status == 400 && reason(other) == "TopicDisallowed")
        try await f.shutdown()
    }
}
