import APNsProtocol
import APNsTransport
import Crypto
import Synchronization
import Testing

@testable import Sender

@Suite struct HTTP2RequestTests {
    static let token = try! DeviceToken(hex: String(repeating: "ab", count: 32))

    static func notification(
        payload: String = #"{"aps":{"alert":"hi"}}"#, pushType: APNsPushType? = nil, collapseID: String? = nil, jobID: String = "job-1"
    ) -> PushNotification {
        PushNotification(
            jobID: jobID, app: "com.example.news", token: token, payload: Array(payload.utf8), expiry: 1_700_000_000,
            priority: .conservePower, collapseID: collapseID, pushType: pushType)
    }

    @Test func headersFromTheNotification() throws {
        let r = try HTTP2Request(Self.notification(collapseID: "scores"))
        #expect(r.path == "/3/device/" + String(repeating: "ab", count: 32))
        #expect(r.topic == "com.example.news")
        #expect(r.expiration == "1700000000")
        #expect(r.priority == "5")
        #expect(r.pushType == .alert)
        #expect(r.collapseID == "scores")
    }

    @Test func devicePathIsThePrefixAndTheTokensHex() throws {
        let token = try DeviceToken(hex: "00ff10a9" + String(repeating: "7c", count: 28))
        #expect(HTTP2Request.devicePath(token) == "/3/device/" + token.hex)
        #expect(HTTP2Request.devicePath(token).utf8.count == 74)
    }

    @Test func apnsIDIsAStableUUIDPerJob() throws {
        let a = HTTP2Request.apnsID(jobID: "job-1")
        #expect(a == HTTP2Request.apnsID(jobID: "job-1"))
        #expect(a != HTTP2Request.apnsID(jobID: "job-2"))
        #expect(a.count == 36)
        let parts = a.split(separator: "-").map(\.count)
        #expect(parts == [8, 4, 4, 4, 12])
        #expect(a.allSatisfy { $0 == "-" || $0.isHexDigit })
        #expect(Array(a)[14] == "8")  // version 8
        // SHA-256("job-1"), first 16 bytes, version and variant bits set: the id must not change
        // between releases (a resent job carries the id it was first sent with).
        #expect(a == "026AB639-C21D-88AA-80E5-789370A9DB1B")
    }

    @Test(arguments: [
        (#"{"aps":{"content-available":1}}"#, APNsPushType.background),
        (#"{"aps":{"content-available":1},"data":{"k":1}}"#, .background),
        (#"{"aps":{"content-available":1,"badge":2}}"#, .alert),
        (#"{"aps":{"alert":"x"}}"#, .alert),
        (#"{"aps":{}}"#, .alert),
        (#"not json"#, .alert),
        // The key spelled with an escape is still the key: the shortcut must not skip the parse.
        (#"{"aps":{"content\u002davailable":1}}"#, .background),
        (#"{"aps":{"alert":"content-available"}}"#, .alert),
    ])
    func pushTypeIsInferredFromTheAPSDictionary(payload: String, expected: APNsPushType) {
        #expect(HTTP2Request.inferredPushType(payload: Array(payload.utf8)) == expected)
    }

    @Test func namedPushTypeWinsAndSuffixesTheTopic() throws {
        let r = try HTTP2Request(Self.notification(pushType: .voip))
        #expect(r.pushType == .voip)
        #expect(r.topic == "com.example.news.voip")
    }

    @Test func payloadLimitDependsOnThePushType() throws {
        let big = #"{"aps":{"alert":""# + String(repeating: "x", count: 4100) + #""}}"#
        #expect(throws: HTTP2Request.Invalid.payloadTooLarge) { try HTTP2Request(Self.notification(payload: big)) }
        _ = try HTTP2Request(Self.notification(payload: big, pushType: .voip))
        let exact = #"{"aps":{"alert":""# + String(repeating: "x", count: 4096 - 20) + #""}}"#
        #expect(exact.utf8.count == 4096)
        _ = try HTTP2Request(Self.notification(payload: exact))
    }

    /// Heads built in a run through one `Memo` (as `HTTP2Transport.send` builds a batch's) equal heads
    /// built one by one: shared payload buffers, a buffer's own copy, payloads that differ only in
    /// type, expiries and priorities that change between notifications, and refusals in between.
    @Test func headsBuiltInARunEqualHeadsBuiltAlone() throws {
        let alert = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        let silent = Array(#"{"aps":{"content-available":1}}"#.utf8)
        let sameSizeAlert = Array(#"{"aps":{"content-availablX":1}}"#.utf8)
        #expect(silent.count == sameSizeAlert.count)
        func n(
            _ payload: [UInt8], expiry: UInt32 = 0, priority: Priority = .immediate, pushType: APNsPushType? = nil, id: String
        ) -> PushNotification {
            PushNotification(
                jobID: id, app: "com.example.news", token: Self.token, payload: payload, expiry: expiry, priority: priority,
                pushType: pushType)
        }
        var copied = silent
        copied.append(0x20)
        copied.removeLast()  // the same bytes in a buffer of its own
        let run = [
            n(alert, id: "a"), n(alert, id: "b"), n(silent, priority: .conservePower, id: "c"),
            n(silent, expiry: 1_700_000_000, priority: .conservePower, id: "d"),
            n(sameSizeAlert, expiry: 1_700_000_000, id: "e"), n(copied, expiry: 5, priority: .conservePower, id: "f"), n([], id: "g"),
            n(alert, pushType: .background, id: "h"), n(alert, expiry: 0, pushType: .voip, id: "i"),
            n(silent, priority: .conservePower, id: "j"),
            n(alert, expiry: 0, id: "k"),
        ]
        var memo = HTTP2Request.Memo()
        for notification in run {
            let alone = Result { () throws(HTTP2Request.Invalid) in try HTTP2Request(notification) }
            let inRun = Result { () throws(HTTP2Request.Invalid) in try HTTP2Request(notification, memo: &memo) }
            #expect(alone == inRun, "\(notification.jobID)")
        }
        #expect(try HTTP2Request(run[3], memo: &memo).pushType == .background)
        #expect(try HTTP2Request(run[4], memo: &memo).pushType == .alert)
        #expect(try HTTP2Request(run[3], memo: &memo).expiration == "1700000000")
    }

    @Test func refusedBeforeSending() {
        #expect(throws: HTTP2Request.Invalid.badCollapseID) {
            try HTTP2Request(Self.notification(collapseID: String(repeating: "c", count: 65)))
        }
        // A value HTTP/2 cannot carry as a header is refused per job (header validation is off on the wire).
        #expect(throws: HTTP2Request.Invalid.badCollapseID) { try HTTP2Request(Self.notification(collapseID: "a\r\nb")) }
        #expect(throws: HTTP2Request.Invalid.badCollapseID) { try HTTP2Request(Self.notification(collapseID: " a")) }
        #expect(throws: HTTP2Request.Invalid.payloadEmpty) { try HTTP2Request(Self.notification(payload: "")) }
    }
}

@Suite struct ProviderTokenCacheTests {
    /// A clock the test moves.
    final class Clock: Sendable {
        let seconds = Atomic<Int64>(1_700_000_000)
        func advance(_ s: Int64) { seconds.add(s, ordering: .relaxed) }
        var read: @Sendable () -> Int64 { { [self] in seconds.load(ordering: .relaxed) } }
    }

    static func cache(_ clock: Clock) throws -> ProviderTokenCache {
        let signer = try ProviderTokenSigner(
            pem: P256.Signing.PrivateKey().pemRepresentation, keyID: "KEY1234567", teamID: "TEAM123456")
        return ProviderTokenCache(signer: signer, clock: clock.read)
    }

    @Test func oneTokenUntilFiftyMinutes() throws {
        let clock = Clock()
        let cache = try Self.cache(clock)
        let first = try cache.current()
        clock.advance(49 * 60)
        #expect(try cache.current() == first)
        clock.advance(60)
        let second = try cache.current()
        #expect(second.issuedAt == first.issuedAt + 50 * 60)
        #expect(second.value != first.value)
    }

    @Test func renewalOnExpiredIsOncePerTokenAndNeverWithinTwentyMinutes() throws {
        let clock = Clock()
        let cache = try Self.cache(clock)
        let first = try cache.current()
        clock.advance(10 * 60)
        // Too young to renew: APNs would answer 429 TooManyProviderTokenUpdates.
        #expect(try cache.renew(rejectedIssuedAt: first.issuedAt) == false)
        #expect(try cache.current() == first)
        clock.advance(11 * 60)
        #expect(try cache.renew(rejectedIssuedAt: first.issuedAt))
        let second = try cache.current()
        #expect(second.issuedAt == first.issuedAt + 21 * 60)
        // A second connection reporting the same rejected token does not cause a second renewal.
        #expect(try cache.renew(rejectedIssuedAt: first.issuedAt))
        #expect(try cache.current() == second)
    }

    @Test func descriptionNamesTheKeyNeverTheToken() throws {
        let cache = try Self.cache(Clock())
        let token = try cache.current().value
        #expect(!cache.description.contains(token))
        #expect(cache.description.contains("KEY1234567"))
    }
}
