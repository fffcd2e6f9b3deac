#if canImport(HTTP2Simulator)
import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import HTTP2Simulator
import NIOCore
import NIOPosix
import Testing
import TestSupport

@testable import Sender

/// A partial Apple incident against the HTTP/2 simulator over real TLS (design §2.9): a random share of
/// 503 or 429 is retried per job and leaves the connections their streams; a host answering only 503
/// sees little more than the circuit breakers' probes; resends the server proved it did not process
/// (REFUSED_STREAM) and resends after lost connections end at `give_up_after_s` and at the job's
/// expiration like 5xx retries. Counts and outcomes only: rates are `ops/bench faults`'s.
@Suite(.serialized) struct HTTP2PartialFailureTests {
    static func transport(
        _ port: Int, connections: Int = 2, log: OutcomeLog, configure: (inout HTTP2TransportConfiguration) -> Void = { _ in }
    ) throws -> HTTP2Transport {
        try HTTP2RetryTests.transport(port, connections: connections, log: log) {
            $0.streamCap = 20
            configure(&$0)
        }
    }

    static func sendAll(_ jobs: [PushNotification], through transport: HTTP2Transport) async throws -> [ConnectionStatistics] {
        try await withDeadline("every job answered") {
            try await transport.send(jobs)
            // Each connection's window before the drain closes it.
            try await waitUntil("the queues emptied", seconds: 300) {
                await transport.statistics().allSatisfy { $0.queueDepth == 0 && $0.replayCount == 0 }
            }
            let statistics = await transport.statistics()
            _ = await transport.drainAndClose()
            return statistics
        }
    }

    /// A random 30 % of 503 and 10 % of 429 (every job a token of its own): every job delivered once,
    /// none dead-lettered, each refusal retried; the connections end with all their streams, and no
    /// circuit breaker opened (it is for a host that is down).
    @Test(arguments: [(503, 0.3), (429, 0.1)])
    func aRandomShareIsRetriedAndLeavesTheStreams(_ status: Int, _ share: Double) async throws {
        var faults = HTTP2FaultScript()
        if status == 503 { faults.serviceUnavailableRate = share } else { faults.tooManyRequestsRate = share }
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let log = OutcomeLog()
        let transport = try Self.transport(sim.port, log: log)
        let statistics = try await Self.sendAll((0..<2000).map { job($0, token: $0) }, through: transport)
        #expect(log.outcomes.count == 2000)
        #expect(log.outcomes.allSatisfy { $0.kind == .accepted })
        #expect(Set(sim.records.compactMap(\.jobID)).count == 2000 && sim.records.count == 2000)
        let refused = sim.totals.byStatus[status, default: 0]
        #expect(refused > 100, "the share was met: \(refused)")
        let reason: RetryReason = status == 503 ? .serverError : .tooManyRequests
        #expect(log.events.retriedBy[reason] == refused, "each refusal retried once")
        #expect(log.events.gaveUp == 0)
        #expect(statistics.allSatisfy { $0.streamsAllowed == 20 }, "\(statistics.map(\.streamsAllowed))")
        #expect(statistics.allSatisfy { $0.lastError == nil }, "\(statistics.compactMap(\.lastError))")
        try await sim.stop()
    }

    /// 503 for everything for 3 s: once each connection's breaker opens (40 answers), only its probes
    /// reach the host, their pauses doubling from 0.5 s: at most (in-flight + window + probes) 503s per
    /// connection, the probes bounded by the storm's length as measured here (a late timer only makes
    /// fewer). After it every job is delivered once and none is dead-lettered.
    @Test func aHostAnsweringOnly503SeesTheBreakersProbes() async throws {
        var faults = HTTP2FaultScript()
        faults.serviceUnavailableRate = 1
        faults.ratesFromSecond = 0
        faults.ratesForSeconds = 3
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let log = OutcomeLog()
        let transport = try Self.transport(sim.port, log: log)
        let started = ContinuousClock.now
        try await transport.send((0..<2000).map { job($0, token: $0) })
        try await waitUntil("the storm ended and the jobs go again", seconds: 300) { sim.totals.accepted > 0 }
        let storm = (ContinuousClock.now - started) / .seconds(1)
        // Pauses of 0.5, 1, 2, 4, 5, 5 … s: how many fit in the storm.
        var probes = 0
        var paused = 0.0
        while paused <= storm {
            paused += min(5, 0.5 * Double(1 << probes))
            probes += 1
        }
        let bound = 2 * (40 + 20 + probes)
        let answered503 = sim.totals.byStatus[503, default: 0]
        #expect(answered503 <= bound, "\(answered503) answers 503 in \(storm) s (bound \(bound))")
        _ = try await Self.sendAll([], through: transport)
        // While the host was down the work gathered on the last connection to pause; when a probe found
        // it back, the other connection's pause ended and the queues were evened out: both connections
        // delivered (all accepted after the storm). Before, one delivered them all and the other idled.
        // How much each delivers depends on when each is back and sending on this machine (a loaded one
        // gave 1 979 and 21), so only "both" is asserted here; the hand-over and the recovery signal are
        // tested exactly, without sockets, in `HTTP2ConnectionStateMachineTests`.
        let perConnection = Dictionary(grouping: sim.records, by: \.connection).mapValues(\.count)
        #expect(perConnection.count == 2 && perConnection.values.allSatisfy { $0 >= 1 }, "accepted per connection: \(perConnection)")
        #expect(log.outcomes.count == 2000 && log.outcomes.allSatisfy { $0.kind == .accepted })
        #expect(Set(sim.records.compactMap(\.jobID)).count == 2000 && sim.records.count == 2000)
        #expect(log.events.gaveUp == 0)
        try await sim.stop()
    }

    /// A server that refuses every stream (REFUSED_STREAM: its stream limit stays 0): each job is
    /// resent a bounded number of times, further apart, then dead-lettered `gateway-gave-up` at
    /// `give_up_after_s` (4 s here); a job whose `apns-expiration` comes first is dead-lettered `expired`.
    @Test func refusedStreamsEndAtTheGiveUpTimeOrTheExpiration() async throws {
        let sim = try await HTTP2Simulator.startedForTests(tokens: false) { $0.initialMaxConcurrentStreams = 0 }
        let log = OutcomeLog()
        let transport = try Self.transport(sim.port, log: log) { $0.giveUpAfter = .seconds(4) }
        // 1 to 2 s from now: before the give-up time.
        let soon = UInt32(Date().timeIntervalSince1970) + 2
        var jobs = (0..<10).map { job($0, token: $0) }
        for i in 0..<5 { jobs[i].expiry = soon }
        _ = try await Self.sendAll(jobs, through: transport)
        let byJob = Dictionary(uniqueKeysWithValues: log.outcomes.map { ($0.jobID, $0) })
        #expect(byJob.count == 10)
        for i in 0..<5 {
            #expect(byJob["job-\(i)"]?.rejection == .transient(reason: "expired"), "\(String(describing: byJob["job-\(i)"]))")
        }
        for i in 5..<10 {
            #expect(byJob["job-\(i)"]?.rejection == .transient(reason: "gateway-gave-up"), "\(String(describing: byJob["job-\(i)"]))")
        }
        // 4 s of back-off from 50 ms (doubling, at most 0.5 s): a dozen attempts or so, not a hot loop.
        #expect(log.outcomes.allSatisfy { $0.attempts >= 2 && $0.attempts <= 25 }, "\(log.outcomes.map(\.attempts))")
        #expect(sim.totals.refusedStreams == log.outcomes.reduce(0) { $0 + $1.attempts })
        // Every refusal is retried but a job's last one, when the give-up time or the expiration is already
        // past as it comes; a job whose expiration passes while its resend waits ends with all of its
        // refusals retried (which of the two a job meets depends on the machine's speed).
        let retried = log.events.retriedBy[.refusedStream]
        #expect(log.events.gaveUp == 10 && retried <= sim.totals.refusedStreams && retried >= sim.totals.refusedStreams - 10)
        #expect(sim.records.isEmpty)
        try await sim.stop()
    }

    /// A server that drops the connection under every request it takes (recorded, never answered): the
    /// resends after each lost connection end at `give_up_after_s` too.
    @Test func resendsAfterLostConnectionsEndAtTheGiveUpTime() async throws {
        var faults = HTTP2FaultScript()
        faults.dropEvery = 1
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let log = OutcomeLog()
        let transport = try Self.transport(sim.port, connections: 1, log: log) { $0.giveUpAfter = .seconds(2) }
        _ = try await Self.sendAll((0..<3).map { job($0, token: $0) }, through: transport)
        #expect(log.outcomes.count == 3)
        #expect(log.outcomes.allSatisfy { $0.rejection == .transient(reason: "gateway-gave-up") })
        #expect(log.outcomes.allSatisfy { $0.attempts >= 2 && $0.attempts <= 30 }, "\(log.outcomes.map(\.attempts))")
        #expect(log.events.retriedBy[.connectionLost] > 0)
        try await sim.stop()
    }
}
#endif
