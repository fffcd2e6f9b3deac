import APNsProtocol
import Testing

@testable import Sender

/// The binary transport's one mapping from Table 5-1 statuses to meanings.
@Suite struct BinaryVerdictTests {
    @Test func invalidTokenSuppressesFromSettlement() {
        #expect(BinaryVerdict(.invalidToken) == .rejected(.invalidToken(since: nil, reason: "invalid-token")))
    }

    @Test func processingErrorsAreRetried() {
        #expect(BinaryVerdict(.processingError) == .retry(reason: "status 1: Processing error"))
        guard case .retry = BinaryVerdict(.unknown) else {
            Issue.record("status 255 should be retried")
            return
        }
    }

    @Test func malformedFramesAreBadRequests() {
        for status in [
            ErrorStatus.missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize, .invalidTopicSize, .invalidPayloadSize,
        ] {
            guard case .rejected(.badRequest(let reason)) = BinaryVerdict(status) else {
                Issue.record("status \(status) should be a bad request")
                continue
            }
            #expect(reason.hasPrefix("status \(status.rawValue): "))
        }
    }

    @Test func outcomeKindsFollowTheMeaning() {
        let n = PushNotification(
            jobID: "j", app: "a", token: try! DeviceToken(bytes: [UInt8](repeating: 1, count: 32)), payload: [], expiry: 0,
            priority: .immediate)
        #expect(Outcome(notification: n, delivery: .accepted, attempts: 1, connection: 0).kind == .accepted)
        #expect(
            Outcome(notification: n, delivery: .rejected(.invalidToken(since: 5, reason: "Unregistered")), attempts: 1, connection: 0).kind
                == .rejected)
        #expect(
            Outcome(notification: n, delivery: .rejected(.badRequest(reason: "BadTopic")), attempts: 1, connection: 0).kind == .deadLettered
        )
        #expect(Outcome(notification: n, delivery: .rejected(.transient(reason: "503")), attempts: 3, connection: 0).kind == .deadLettered)
    }
}
