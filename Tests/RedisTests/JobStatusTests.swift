import Foundation
import Redis
import TestSupport
import Testing

private let app = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064x", n) }

/// Issue 30 (5): what happened to a job, read from Redis by the keys of its token (no scan), on a single
/// Redis and a Redis Cluster.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct JobStatusTests {
    /// A heartbeat that outlives the test however slow the machine: with the default 10 s, a loaded run
    /// read the lease's holder as gone between its beat and the status.
    static var longHeartbeat: PipelineStoreConfiguration {
        var configuration = PipelineStoreConfiguration()
        configuration.ownerHeartbeat = .seconds(600)
        return configuration
    }

    @Test(arguments: RedisTestTarget.allCases)
    func notSeenThenInFlightThenAccepted(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection(), configuration: Self.longHeartbeat)
        let now = PipelineStore.epochNow()

        #expect(try await store.jobStatus(jobID: "j1", app: app, tokenHex: token(1)).state == .notSeen)

        // Gated: a lease of this process, whose heartbeat lives.
        try await store.beat()
        let decisions = try await store.gate([GateRequest(jobID: "j1", app: app, tokenHex: token(1))])
        guard case .admitted = decisions.first else { throw TestFailure("gate: \(decisions)") }
        let inFlight = try await store.jobStatus(jobID: "j1", app: app, tokenHex: token(1).uppercased())
        #expect(inFlight.state == .inFlight, "the token's case does not matter")
        #expect(inFlight.lease?.owner == store.configuration.leaseOwner && inFlight.leaseHolderAlive == true)

        // Its process stops beating: the lease is void, as the gate would judge it.
        try await store.endHeartbeat()
        let void = try await store.jobStatus(jobID: "j1", app: app, tokenHex: token(1))
        #expect(void.state == .notSeen && void.lease != nil && void.leaseHolderAlive == false)

        // Settled as accepted: its dedup record's bucket brackets the settle time.
        _ = try await store.settle(
            SettleBatch(outcomes: [SettledOutcome(jobID: "j1", app: app, tokenHex: token(1), kind: .accepted)], settledAt: now))
        let accepted = try await store.jobStatus(jobID: "j1", app: app, tokenHex: token(1))
        #expect(accepted.state == .accepted)
        let from = try #require(accepted.acceptedFrom)
        let until = try #require(accepted.acceptedUntil)
        #expect(from <= now && now < until && until - from == 86_400, "\(from)…\(until) around \(now)")
        #expect(accepted.lease == nil, "the settle released the lease")

        // Another id of the same token is not the accepted one.
        #expect(try await store.jobStatus(jobID: "j2", app: app, tokenHex: token(1)).state == .notSeen)
    }

    @Test(arguments: RedisTestTarget.allCases)
    func aSuppressedTokenUntilItRegistersAgain(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let now = PipelineStore.epochNow()

        try await store.suppress([Suppression(app: app, tokenHex: token(7), at: now - 100, reason: "invalid-token")])
        let suppressed = try await store.jobStatus(jobID: "k1", app: app, tokenHex: token(7))
        #expect(suppressed.state == .suppressed)
        #expect(suppressed.suppressedAt == now - 100 && suppressed.suppressedReason == "invalid-token")
        #expect(try await store.jobStatus(jobID: "k1", app: "com.example.news", tokenHex: token(7)).state == .notSeen, "per app")

        // Registered after the suppression: the gate sends to it again.
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(7), registeredAt: now - 10)])
        let registered = try await store.jobStatus(jobID: "k1", app: app, tokenHex: token(7))
        #expect(registered.state == .notSeen && registered.registeredAt == now - 10 && registered.suppressedAt == now - 100)
    }

    /// A broadcast is kept in its channel's bucket, and a channel has no suppression to read.
    @Test(arguments: RedisTestTarget.allCases)
    func aBroadcastByItsChannel(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection(), configuration: Self.longHeartbeat)
        let channel = "dHN0LTEyMzQ1Njc4OTA="
        try await store.beat()
        _ = try await store.gate([GateRequest(jobID: "b1", app: app, channelID: channel)])
        let leased = try await store.jobStatus(jobID: "b1", app: app, channelID: channel)
        #expect(leased.state == .inFlight && leased.leaseHolderAlive == true)
        _ = try await store.settle(
            SettleBatch(
                outcomes: [SettledOutcome(jobID: "b1", app: app, tokenHex: channel, kind: .accepted, isBroadcast: true)],
                settledAt: PipelineStore.epochNow()))
        let accepted = try await store.jobStatus(jobID: "b1", app: app, channelID: channel)
        #expect(accepted.state == .accepted && accepted.suppressedAt == nil && accepted.registeredAt == nil)
    }
}
