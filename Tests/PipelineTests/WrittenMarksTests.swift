import APNsProtocol
import Logging
import Redis
import Sender
import TestSupport
import Testing

@testable import Pipeline

/// A process whose heartbeat lapsed (cut off from Redis longer than it lives) comes back and writes
/// what it had gated before: other processes may have sent those jobs too, having found no written mark.
/// Its marks are refused, so it counts the call's jobs `ambiguous` itself — once — before it writes
/// them (ops/fleet, a host cut off 15 s: duplicates had gone uncounted).
@Suite struct WrittenMarksTests {
    static let token = try! DeviceToken(hex: String(repeating: "ab", count: 32))

    static func notifications(_ count: Int, campaign: String) -> [PushNotification] {
        (0..<count).map {
            PushNotification(jobID: "j\($0)", app: "app", token: token, payload: [], expiry: 0, priority: .immediate, campaign: campaign)
        }
    }

    @Test(arguments: [RedisTestTarget.single, .cluster])
    func aCallGatedBeforeALapseIsCountedAmbiguousBeforeItIsWritten(_ target: RedisTestTarget) async throws {
        let redis = try await RedisUnderTest(target)
        defer { redis.stop() }
        let client = try redis.connection()
        let store = PipelineStore(
            client: client,
            configuration: PipelineStoreConfiguration(inFlightLease: .seconds(600), leaseOwner: "owner-a", ownerHeartbeat: .seconds(600)))
        let heartbeat = OwnerHeartbeat(description: "test pid 1")
        let marks = WrittenMarks(store: store, heartbeat: heartbeat, logger: Logger(label: "test"))
        try await heartbeat.start(store: store)
        #expect(try await heartbeat.refresh(store: store) == false, "alive: refreshed as it is")

        let before = marks.newCall()
        // The heartbeat lapses (here at once); the next refresh beats a new epoch.
        _ = try await client.send(RedisCommand("DEL", store.keys.owner("owner-a")))
        #expect(try await heartbeat.refresh(store: store))
        #expect(heartbeat.value == "test pid 1 epoch 1")
        let after = marks.newCall()

        // The send stage's step before a hand-off: the fenced mark, and the count when it is refused.
        // Asked twice for the lapsed call (a retry of the batch after a failure), counted once.
        for _ in 0..<2 {
            #expect(try await marks.fencedMark(before) == false, "gated under the lapsed heartbeat")
            try await marks.countLapsed(before, notifications: Self.notifications(3, campaign: "c"))
        }
        #expect(try await marks.fencedMark(after), "gated under the new heartbeat")

        #expect(try await store.readStats().totals[.ambiguous] == 3, "the call gated before the lapse, once")
        #expect(try await store.readCampaign("c").counters[.ambiguous] == 3)
        for call in [before, after] {
            #expect(try await client.send(RedisCommand("EXISTS", store.keys.written(owner: "owner-a", call: call.id))).integer == 1)
        }
        await client.close()
    }
}
