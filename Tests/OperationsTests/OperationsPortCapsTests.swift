import Foundation
import Testing

@testable import Operations

/// The operations port's caps over real sockets: slots kept for the probes when the general ones are
/// taken, and a share per peer address. No deadline of the server is raced: the held connections say
/// nothing for the whole test (their timeouts are set long), and what is checked is what the server
/// answered or closed.
@Suite struct OperationsPortCapsTests {
    /// Limits whose timeouts no test step can reach.
    static func patient() -> OperationsServer.Limits {
        var limits = OperationsServer.Limits()
        limits.requestTimeout = .seconds(300)
        limits.connectionTimeout = .seconds(300)
        limits.probeRequestTimeout = .seconds(300)
        return limits
    }

    /// Every general slot held by idle connections (the flood: 64 slots, connections that never
    /// finish a request): `/healthz` and `/readyz` are still answered, on the slots kept for them; any
    /// other path there is answered 503 (counted `connection-cap`); a peer holds at most two of those
    /// slots, and one more connection is closed at once.
    @Test func probesGetThroughWhenEverySlotIsHeld() async throws {
        var limits = Self.patient()
        limits.maxConnections = 3
        limits.maxConnectionsPerPeer = 100
        let server = try await plainServer(limits: limits)
        defer { Task { await server.stop() } }
        let base = "http://127.0.0.1:\(server.port)"
        var held: [RawConnection] = []
        for _ in 0..<3 { held.append(try await RawConnection.open(port: server.port)) }
        try await eventually("the general slots taken") { server.openConnections == 3 }

        let live = try await get(base + "/healthz", headers: [:])
        #expect(live.status == 200 && live.body == "ok\n")
        let ready = try await get(base + "/readyz", headers: ["Authorization": "Bearer \(opsToken)"])
        #expect(ready.status == 200 && ready.body == "ready\n")
        let metrics = try await get(base + "/metrics", headers: ["Authorization": "Bearer \(opsToken)"])
        #expect(metrics.status == 503 && metrics.body.contains("kept for /healthz and /readyz"), "\(metrics)")
        #expect(!metrics.body.contains("apns_up"))
        #expect(server.refusals[.connectionCap] == 1)

        // Two idle connections take this peer's two probe slots; a third is closed unanswered.
        try await eventually("the answered probes' slots free") { server.openConnections == 3 }
        for _ in 0..<2 { held.append(try await RawConnection.open(port: server.port)) }
        try await eventually("the peer's probe slots taken") { server.openConnections == 5 }
        let extra = try await RawConnection.open(port: server.port)
        #expect(try await extra.closedByServer() == "")
        #expect(server.refusals[.connectionCap] == 2)
        #expect(held.allSatisfy { $0.isOpen })
        for c in held { await c.close() }
        try await eventually("all closed") { server.openConnections == 0 }
    }

    /// A connection on a probe slot that says nothing is closed at `probeRequestTimeout`, so idle
    /// connections cannot keep the probe slots either (general ones keep the longer request timeout).
    @Test func idleConnectionsOnProbeSlotsAreClosedEarly() async throws {
        var limits = Self.patient()
        limits.maxConnections = 1
        limits.probeRequestTimeout = .milliseconds(200)
        let server = try await plainServer(limits: limits)
        defer { Task { await server.stop() } }
        let general = try await RawConnection.open(port: server.port)
        try await eventually("the general slot taken") { server.openConnections == 1 }
        let probe = try await RawConnection.open(port: server.port)
        #expect(try await probe.closedByServer() == "")
        #expect(server.refusals[.timeout] == 1)
        #expect(general.isOpen)
        try await eventually("the probe slot free") { server.openConnections == 1 }
        await general.close()
    }

    /// One address holds at most `maxConnectionsPerPeer` general slots, whatever is left for others: past
    /// it (no probe slot here) a connection is closed at once, counted `peer-cap`; with probe slots, the
    /// same connection still answers a probe, and refuses the rest as `peer-cap`.
    @Test func onePeerHoldsAtMostItsShare() async throws {
        var limits = Self.patient()
        limits.maxConnections = 10
        limits.maxConnectionsPerPeer = 2
        limits.probeSlots = 0
        let server = try await plainServer(limits: limits)
        defer { Task { await server.stop() } }
        var held: [RawConnection] = []
        for _ in 0..<2 { held.append(try await RawConnection.open(port: server.port)) }
        try await eventually("the peer's share taken") { server.openConnections == 2 }
        let extra = try await RawConnection.open(port: server.port)
        #expect(try await extra.closedByServer() == "")
        #expect(server.refusals[.peerCap] == 1 && server.refusals[.connectionCap] == nil)
        #expect(server.openConnections == 2, "8 general slots are left for other addresses")
        for c in held { await c.close() }

        limits.probeSlots = 8
        let withProbes = try await plainServer(limits: limits)
        defer { Task { await withProbes.stop() } }
        let base = "http://127.0.0.1:\(withProbes.port)"
        var mine: [RawConnection] = []
        for _ in 0..<2 { mine.append(try await RawConnection.open(port: withProbes.port)) }
        try await eventually("the peer's share taken") { withProbes.openConnections == 2 }
        #expect(try await get(base + "/healthz", headers: [:]).body == "ok\n")
        #expect(try await get(base + "/api/dashboard", headers: ["Authorization": "Bearer \(opsToken)"]).status == 503)
        #expect(withProbes.refusals[.peerCap] == 1)
        for c in mine { await c.close() }
    }
}
