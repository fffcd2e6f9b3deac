import APNsProtocol
import Foundation
import GatewaySimulator
import Testing

@testable import Sender

/// The binary interface carries 32-byte tokens only (command 2, item 1: "Device token, 32 bytes"), while
/// Apple says "APNs device tokens are of variable length". The pipeline and `send` refuse another size
/// for a binary app before it reaches a pool (`token-size-needs-http2`); a pool given one anyway answers
/// it as the gateway would, status 5, and writes only the rest (to the real simulator, over TLS).
@Suite(.serialized) struct BinaryTokenSizeTests {
    @Test func aTokenThatIsNot32BytesIsAnsweredStatus5AndNeverWritten() async throws {
        let sim = try await startSimulator()
        let log = OutcomeLog()
        let pool = try makePool(simulators: [sim], shards: 2, log: log)
        var batch = (0..<4).map { job($0, token: $0) }
        let long = try DeviceToken(bytes: [UInt8](repeating: 0x5A, count: 40))
        batch.insert(
            PushNotification(
                jobID: "job-long", app: shop, token: long, payload: Array(#"{"aps":{"alert":"x"},"jid":"job-long"}"#.utf8), expiry: 0,
                priority: .immediate, position: SourcePosition(partition: 0, offset: 99)),
            at: 2)
        try await pool.send(batch)
        try await waitUntil("an outcome for every job") { log.count >= 5 }
        _ = await pool.drainAndClose()

        let byJob = Dictionary(uniqueKeysWithValues: log.outcomes.map { ($0.jobID, $0) })
        let refused = try #require(byJob["job-long"])
        #expect(refused.delivery == .rejected(.badRequest(reason: "status 5: Invalid token size")))
        #expect(refused.kind == .deadLettered && refused.code == "5" && refused.attempts == 0)
        for n in 0..<4 { #expect(byJob["job-\(n)"]?.delivery == .accepted, "job-\(n)") }
        #expect(Set(sim.records.compactMap(\.jobID)) == ["job-0", "job-1", "job-2", "job-3"], "the long token was never written")
        #expect(sim.totals.rejectedByStatus[5] == nil && sim.totals.accepted == 4)
        try await sim.stop()
    }
}
