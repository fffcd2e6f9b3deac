import Foundation
import Redis
import TestSupport
import Testing

private let app = "com.example.shop"
private let channel = "dHN0LXNyY2gtMDAwMDAx"

/// Issue 31 item 2 in Redis: a broadcast (a channel job) is deduped and leased by its job id like every
/// job, in its channel's bucket, but a channel is no device: the gate reads no suppression, registration
/// or language for it, whatever those hashes hold, and a settle never writes one.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct BroadcastGateTests {
    @Test(arguments: RedisTestTarget.allCases)
    func aBroadcastIsDedupedAndLeasedButNeverSuppressed(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection(), configuration: .init(inFlightLease: .seconds(30)))
        let tag = store.keys.tokenTag(app: app, tokenHex: channel)
        let client = store.client
        // Whatever a suppression hash might hold under the names a channel could be mistaken for (its id
        // as given or lower-cased, as a token would be stored; the empty field of a broadcast's argument):
        // none of it applies to the channel. A language there is not the channel's either.
        for field in [channel, channel.lowercased(), ""] {
            _ = try await client.send(RedisCommand("HSET", store.keys.suppressed(tag: tag), field, "9999999999:invalid-token"))
            _ = try await client.send(RedisCommand("HSET", store.keys.language(tag: tag), field, "fr"))
        }
        let gate = { (id: String) in GateRequest(jobID: id, app: app, channelID: channel) }
        #expect(try await store.gate([gate("score-1"), gate("score-2")]) == [.admitted(language: nil), .admitted(language: nil)])
        // A second copy while the first is in flight waits for it, as for any job.
        #expect(try await store.gate([gate("score-1")]) == [.inFlight])
        // Settled accepted: deduped by its job id from then on.
        var accepted = SettledOutcome(jobID: "score-1", app: app, tokenHex: channel, kind: .accepted, isBroadcast: true)
        accepted.shard = 0
        try await store.settle(
            SettleBatch(outcomes: [
                accepted, SettledOutcome(jobID: "score-2", app: app, tokenHex: channel, kind: .deadLettered, isBroadcast: true),
            ]))
        #expect(try await store.gate([gate("score-1"), gate("score-2")]) == [.deduped, .admitted(language: nil)])

        // A device job in the same bucket, in the same call, is still suppressed by its own entry.
        let token = String(repeating: "ab", count: 32)
        let deviceTag = store.keys.tokenTag(app: app, tokenHex: token)
        _ = try await client.send(RedisCommand("HSET", store.keys.suppressed(tag: deviceTag), token, "9999999999:invalid-token"))
        let mixed = try await store.gate([GateRequest(jobID: "d", app: app, tokenHex: token), gate("score-3")])
        #expect(mixed == [.suppressed, .admitted(language: nil)])

        // The totals count broadcasts apart: broadcast:<outcome> beside the outcome itself.
        let totals = try await store.readStats().totals.fields
        #expect(totals["accepted"] == 1 && totals["broadcast:accepted"] == 1)
        #expect(totals["dead_lettered"] == 1 && totals["broadcast:dead_lettered"] == 1)
    }
}
