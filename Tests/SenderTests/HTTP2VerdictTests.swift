import APNsProtocol
import Testing

@testable import Sender

/// Every row of the docs/design.md §5.6 table, as the transport acts on it.
@Suite struct HTTP2VerdictTests {
    @Test func okIsAccepted() {
        #expect(HTTP2Verdict.of(status: 200, reason: nil, timestamp: nil) == .accepted)
    }

    @Test(arguments: ["Unregistered", "ExpiredToken"])
    func goneSuppressesFromApplesTimestampInSeconds(reason: String) {
        #expect(
            HTTP2Verdict.of(status: 410, reason: reason, timestamp: 1_700_000_123_456)
                == .rejected(.invalidToken(since: 1_700_000_123, reason: "unregistered")))
        #expect(HTTP2Verdict.code(status: 410, reason: reason) == reason)
    }

    @Test func goneWithoutTimestampSuppressesFromNow() {
        #expect(
            HTTP2Verdict.of(status: 410, reason: "Unregistered", timestamp: nil)
                == .rejected(.invalidToken(since: nil, reason: "unregistered")))
    }

    @Test(arguments: ["BadDeviceToken", "DeviceTokenNotForTopic"])
    func badTokenIsRejectedAndSuppressed(reason: String) {
        #expect(
            HTTP2Verdict.of(status: 400, reason: reason, timestamp: nil)
                == .rejected(.invalidToken(since: nil, reason: "invalid-token")))
    }

    @Test(arguments: [
        (400, "BadCollapseId"), (400, "BadTopic"), (400, "PayloadEmpty"), (400, "InvalidPushType"),
        (400, "TopicDisallowed"), (413, "PayloadTooLarge"), (404, "BadPath"), (405, "MethodNotAllowed"),
        (403, "Forbidden"),
    ])
    func malformedRequestsAreDeadLetteredWithTheirReason(status: Int, reason: String) {
        #expect(HTTP2Verdict.of(status: status, reason: reason, timestamp: nil) == .rejected(.badRequest(reason: reason)))
    }

    @Test func expiredProviderTokenRenews() {
        #expect(HTTP2Verdict.of(status: 403, reason: "ExpiredProviderToken", timestamp: nil) == .renewProviderToken)
    }

    @Test(arguments: [
        (403, "InvalidProviderToken"), (403, "MissingProviderToken"), (403, "BadCertificate"),
        (403, "BadCertificateEnvironment"), (403, "UnrelatedKeyIdInToken"), (403, "BadEnvironmentKeyIdInToken"),
        (403, "BadEnvironmentKeyInToken"),
        (403, "SomethingNew"), (429, "TooManyProviderTokenUpdates"),
    ])
    func refusedCredentialsStopTheConnection(status: Int, reason: String) {
        #expect(HTTP2Verdict.of(status: status, reason: reason, timestamp: nil) == .stopConnection)
    }

    @Test func tooManyRequestsRetriesLater() {
        #expect(HTTP2Verdict.of(status: 429, reason: "TooManyRequests", timestamp: nil) == .retryLater)
    }

    @Test(
        arguments: [
            (500, "InternalServerError"), (503, "ServiceUnavailable"), (503, "Shutdown"), (502, ""), (500, nil),
        ] as [(Int, String?)])
    func serverErrorsRetryElsewhere(status: Int, reason: String?) {
        #expect(HTTP2Verdict.of(status: status, reason: reason, timestamp: nil) == .retryElsewhere)
    }

    /// Every reason Apple lists (design §5.6) has its settlement; none is left to the unknown-answer rule.
    @Test func everyDocumentedReasonHasItsVerdict() {
        for reason in APNsReason.allCases {
            let verdict = HTTP2Verdict.of(status: reason.status, reason: reason.rawValue, timestamp: 1_700_000_000_000)
            let expected: HTTP2Verdict =
                switch reason {
                case .unregistered, .expiredToken: .rejected(.invalidToken(since: 1_700_000_000, reason: "unregistered"))
                case .badDeviceToken, .deviceTokenNotForTopic: .rejected(.invalidToken(since: nil, reason: "invalid-token"))
                case .expiredProviderToken: .renewProviderToken
                case .badCertificate, .badCertificateEnvironment, .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken,
                    .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken, .topicMismatch, .tooManyProviderTokenUpdates:
                    .stopConnection
                case .tooManyRequests: .retryLater
                case .internalServerError, .serviceUnavailable, .shutdown: .retryElsewhere
                default: .rejected(.badRequest(reason: reason.rawValue))
                }
            #expect(verdict == expected, "\(reason)")
        }
    }

    /// Every row of Apple's broadcast error table ("Handling error responses from Apple Push Notification
    /// service", as design §5.6 lists it), with the outcome a broadcast gets: the channel's and the
    /// request's faults are dead letters with Apple's reason (nothing suppressed: a channel is no device),
    /// the credentials' stop the connection, 429 and 5xx are retried. `Service Unavailable` is written so
    /// (with a space) in Apple's table; APNs' provider API spells it `ServiceUnavailable`: both retry.
    @Test(
        arguments: [
            (400, "FeatureNotEnabled"), (400, "MissingChannelId"), (400, "BadChannelId"), (400, "ChannelNotRegistered"),
            (400, "BadRequestParams"), (400, "BadRequestPayload"), (400, "PayloadEmpty"), (400, "BadMessageId"),
            (400, "MissingPushType"), (400, "InvalidPushType"), (400, "CannotCreateChannelConfig"), (400, "BadExpirationDate"),
            (400, "TopicDisallowed"), (400, "BadPriority"), (404, "BadPath"), (405, "MethodNotAllowed"), (413, "PayloadTooLarge"),
        ])
    func applesBroadcastTableRefusalsAreDeadLetters(status: Int, reason: String) {
        #expect(HTTP2Verdict.of(status: status, reason: reason, timestamp: nil) == .rejected(.badRequest(reason: reason)))
    }

    @Test func applesBroadcastTableOtherRows() {
        for reason in ["BadCertificate", "BadCertificateEnvironment", "TopicMismatch", "MissingProviderToken", "InvalidProviderToken"] {
            #expect(HTTP2Verdict.of(status: 403, reason: reason, timestamp: nil) == .stopConnection, "\(reason)")
        }
        #expect(HTTP2Verdict.of(status: 403, reason: "ExpiredProviderToken", timestamp: nil) == .renewProviderToken)
        #expect(HTTP2Verdict.of(status: 429, reason: "TooManyRequests", timestamp: nil) == .retryLater)
        #expect(HTTP2Verdict.of(status: 429, reason: "TooManyProviderTokenUpdates", timestamp: nil) == .stopConnection)
        for (status, reason) in [
            (500, "InternalServerError"), (503, "Service Unavailable"), (503, "ServiceUnavailable"), (503, "Shutdown"),
        ] {
            #expect(HTTP2Verdict.of(status: status, reason: reason, timestamp: nil) == .retryElsewhere, "\(reason)")
        }
    }

    @Test func codeFallsBackToTheStatusWithoutABody() {
        #expect(HTTP2Verdict.code(status: 503, reason: nil) == "503")
        #expect(HTTP2Verdict.code(status: 503, reason: "") == "503")
        #expect(HTTP2Verdict.code(status: 400, reason: "BadTopic") == "BadTopic")
    }
}
