import Foundation
import Pipeline
import Redis
import TestSupport
import Testing

/// Issue 31 (2): `apns-pipeline stats` shows broadcasts apart (`broadcast:<outcome>` rows, and
/// `broadcasts_by_outcome` in `--json`), only when there were any.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct StatsBroadcastTests {
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func broadcastsApartByOutcome() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let store = PipelineStore(client: try server.client())
        let url = "redis://127.0.0.1:\(server.port)/0"

        // Before any broadcast: no row and an empty object.
        _ = try await store.settle(
            SettleBatch(outcomes: [SettledOutcome(jobID: "d1", app: shop, tokenHex: String(repeating: "ab", count: 32), kind: .accepted)]))
        let before = try await PipelineProcess.command(["stats", "--redis", url])
        #expect(before.status == 0 && !before.stdout.contains("broadcast:"), "\(before.stdout)")

        let channel = "dHN0LTEyMzQ1Njc4OTA="
        _ = try await store.settle(
            SettleBatch(outcomes: [
                SettledOutcome(jobID: "b1", app: shop, tokenHex: channel, kind: .accepted, isBroadcast: true),
                SettledOutcome(jobID: "b2", app: shop, tokenHex: channel, kind: .accepted, isBroadcast: true),
                SettledOutcome(jobID: "b3", app: shop, tokenHex: channel, kind: .deadLettered, isBroadcast: true),
            ]))
        let text = try await PipelineProcess.command(["stats", "--redis", url])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("broadcast:accepted") && text.stdout.contains("broadcast:dead_lettered"), "\(text.stdout)")
        let json = try await PipelineProcess.command(["stats", "--redis", url, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let broadcasts = try #require(object["broadcasts_by_outcome"] as? [String: Any], "\(json.stdout)")
        #expect((broadcasts["accepted"] as? NSNumber)?.int64Value == 2 && (broadcasts["dead_lettered"] as? NSNumber)?.int64Value == 1)
        let totals = try #require(object["totals"] as? [String: Any])
        #expect((totals["accepted"] as? NSNumber)?.int64Value == 3, "broadcasts are among the outcomes")
    }
}
