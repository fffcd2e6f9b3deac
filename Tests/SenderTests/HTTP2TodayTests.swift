#if canImport(HTTP2Simulator)
import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import Testing
import TestSupport

@testable import Sender

/// Issue 31 over real TLS against the HTTP/2 simulator: priority 1 goes out as `apns-priority: 1`, a
/// Live Activity update is delivered on its suffixed topic with token auth (and one that breaks Apple's
/// rules for its event is answered 400 InvalidPushType), and in sandbox mode every answer's
/// `apns-unique-id` reaches the outcome.
@Suite(.serialized) struct HTTP2TodayTests {
    static let liveUpdate = #"{"aps":{"event":"update","timestamp":1767000000,"content-state":{"home":2,"away":1}},"jid":"#

    static func notification(_ n: Int, payload: String, priority: Priority, pushType: APNsPushType?) -> PushNotification {
        let id = "today-\(n)"
        return PushNotification(
            jobID: id, app: shop, token: testToken(n), payload: Array((payload + "\"\(id)\"}").utf8), expiry: 0, priority: priority,
            pushType: pushType, position: SourcePosition(partition: 0, offset: Int64(n)))
    }

    static func tokenAuth() throws -> HTTP2Authentication {
        let signer = try ProviderTokenSigner(
            keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID)
        return .token(ProviderTokenCache(signer: signer), trustRootsPath: TestCertificates.pem("ca"))
    }

    @Test func priorityOneAndLiveActivityUpdatesWithUniqueIDsInSandbox() async throws {
        let sim = try await HTTP2TransportTests.simulator(tokens: true) { $0.sandbox = true }
        let log = OutcomeLog()
        let transport = try HTTP2TransportTests.transport(sim, connections: 2, auth: try Self.tokenAuth(), log: log)
        let alert = #"{"aps":{"alert":"later is fine"},"jid":"#
        let broken = #"{"aps":{"event":"update","timestamp":1767000000},"jid":"#  // no content-state
        var jobs = (0..<20).map { Self.notification($0, payload: alert, priority: .powerFirst, pushType: nil) }
        jobs += (20..<40).map {
            Self.notification($0, payload: Self.liveUpdate, priority: $0 % 2 == 0 ? .immediate : .conservePower, pushType: .liveactivity)
        }
        jobs.append(Self.notification(40, payload: broken, priority: .immediate, pushType: .liveactivity))
        try await HTTP2TransportTests.send(jobs, through: transport)

        #expect(HTTP2TransportTests.kinds(log) == [.accepted: 40, .deadLettered: 1])
        let refused = log.outcomes.filter { $0.kind == .deadLettered }
        #expect(refused.map(\.jobID) == ["today-40"])
        #expect(refused.first?.code == "InvalidPushType")
        // Sandbox: every answer, 200 or not, carries an apns-unique-id, and it reaches the outcome.
        #expect(log.outcomes.allSatisfy { $0.uniqueID.map(APNsRequestValidator.isUUID) == true })
        #expect(Set(log.outcomes.compactMap(\.uniqueID)).count == 41)

        let records = Dictionary(uniqueKeysWithValues: sim.records.map { ($0.jobID ?? "", $0) })
        #expect(records.count == 40)
        for n in 0..<20 {
            #expect(records["today-\(n)"]?.priority == 1)
            #expect(records["today-\(n)"]?.pushType == "alert")
        }
        for n in 20..<40 {
            #expect(records["today-\(n)"]?.pushType == "liveactivity")
            #expect(records["today-\(n)"]?.priority == (n % 2 == 0 ? 10 : 5))
            #expect(records["today-\(n)"]?.app == shop)
        }
        try await sim.stop()
    }

    @Test func productionAnswersCarryNoUniqueIDAndCertificatesCannotSendLiveActivitiesOrLocation() async throws {
        let sim = try await HTTP2TransportTests.simulator()
        let log = OutcomeLog()
        let transport = try HTTP2TransportTests.transport(sim, connections: 1, log: log)  // certificate auth
        try await HTTP2TransportTests.send(
            [
                Self.notification(0, payload: #"{"aps":{"alert":"hi"},"jid":"#, priority: .powerFirst, pushType: .alert),
                Self.notification(1, payload: Self.liveUpdate, priority: .immediate, pushType: .liveactivity),
                Self.notification(2, payload: #"{"aps":{},"jid":"#, priority: .immediate, pushType: .location),
            ], through: transport)
        #expect(HTTP2TransportTests.kinds(log) == [.accepted: 1, .deadLettered: 2])
        #expect(log.outcomes.allSatisfy { $0.uniqueID == nil })
        #expect(log.outcomes.first { $0.jobID == "today-1" }?.code == "TopicDisallowed")
        #expect(log.outcomes.first { $0.jobID == "today-2" }?.code == "TopicDisallowed")
        try await sim.stop()
    }
}
#endif
