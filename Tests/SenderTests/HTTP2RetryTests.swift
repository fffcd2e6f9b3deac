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

/// Retries bounded by time, against the HTTP/2 simulator over real TLS (issue 28): a 503 storm is
/// ridden out, a server that resets every stream gets a bounded number of requests spaced further and
/// further apart, a stream never answered is noticed on its own, and the connections of a host spread
/// over its addresses.
@Suite(.serialized) struct HTTP2RetryTests {
    static func transport(
        _ port: Int, host: String = "127.0.0.1", connections: Int = 4, log: OutcomeLog,
        configure: (inout HTTP2TransportConfiguration) -> Void = { _ in }
    ) throws -> HTTP2Transport {
        var c = HTTP2TransportConfiguration(
            app: shop, authentication: .certificate(.test(app: shop, in: TestCertificates.directory)),
            hosts: [GatewayAddress(host: host, port: port)])
        c.connections = connections
        c.serverHostname = "localhost"
        // A stream unanswered this long counts as stuck and is resent (ambiguous): a deadline a loaded
        // machine can miss, so the tests that are not about it wait longer (see docs/testing.md §3.1).
        c.requestTimeout = slowMachineRequestTimeout
        c.linger = .milliseconds(1)
        c.reconnect.initialDelay = .milliseconds(5)
        c.reconnect.maximumDelay = .milliseconds(200)
        c.reconnect.attemptsPerSecondPerGateway = 2000
        c.retry.initialDelay = .milliseconds(50)
        c.retry.maximumDelay = .milliseconds(500)
        configure(&c)
        return try HTTP2Transport(configuration: c, group: MultiThreadedEventLoopGroup.singleton, onOutcomes: log.handler)
    }

    static func send(_ jobs: [PushNotification], through transport: HTTP2Transport) async throws {
        try await transport.send(jobs)
        _ = await transport.drainAndClose()
    }

    /// Every request answered 503 for 2 s from the first: nothing is dead-lettered, every job is delivered
    /// once, after the storm.
    @Test func aServiceUnavailableStormIsRiddenOut() async throws {
        var faults = HTTP2FaultScript()
        faults.serviceUnavailableRate = 1
        faults.ratesFromSecond = 0
        faults.ratesForSeconds = 2
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let log = OutcomeLog()
        let transport = try Self.transport(sim.port, log: log)
        try await Self.send((0..<400).map { job($0, token: $0) }, through: transport)
        let outcomes = log.outcomes
        #expect(outcomes.count == 400)
        #expect(outcomes.allSatisfy { $0.kind == .accepted })
        #expect(sim.records.count == 400)
        #expect(Set(sim.records.compactMap(\.jobID)).count == 400)
        #expect(sim.totals.byStatus[503, default: 0] > 0, "the storm was met")
        let events = log.events
        #expect(events.retriedBy[.serverError] > 0)
        #expect(events.gaveUp == 0)
        try await sim.stop()
    }

    /// A server that resets every stream (RST_STREAM INTERNAL_ERROR): each job is sent a bounded
    /// number of times, further and further apart, then dead-lettered `gateway-gave-up` once
    /// `give_up_after_s` (here 4 s: long enough for five attempts on a loaded machine, whose timers and
    /// answers run late) has passed since its first failure.
    @Test func aServerResettingEveryStreamGetsBoundedSpacedAttemptsThenTheJobsGiveUp() async throws {
        var faults = HTTP2FaultScript()
        faults.resetStreamRate = 1
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let log = OutcomeLog()
        let transport = try Self.transport(sim.port, connections: 2, log: log) { $0.giveUpAfter = .seconds(4) }
        try await Self.send((0..<20).map { job($0, token: $0) }, through: transport)
        let outcomes = log.outcomes
        #expect(outcomes.count == 20)
        #expect(outcomes.allSatisfy { $0.rejection == .transient(reason: "gateway-gave-up") })
        // 4 s of back-off from 50 ms (doubling, capped at 0.5 s, jittered down to half): 10–20 attempts,
        // fewer when the machine is slow, never thousands.
        #expect(outcomes.allSatisfy { $0.attempts >= 5 && $0.attempts <= 26 }, "\(outcomes.map(\.attempts))")
        #expect(sim.totals.resetStreams == outcomes.reduce(0) { $0 + $1.attempts })
        #expect(sim.records.isEmpty)
        let events = log.events
        #expect(events.gaveUp == 20)
        #expect(events.retriedBy[.reset] == sim.totals.resetStreams - 20)
        // The spacing grows: the n-th wait is at least ½ × 50 ms × 2^n, so the fourth is at least 200 ms
        // (a hot loop resends within a millisecond). Only lower bounds: a timer never fires early, but on
        // a loaded machine any wait may fire late, so comparing one wait with another could fail.
        for (_, times) in sim.resetTimes {
            let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
            #expect(gaps.count >= 4)
            if gaps.count >= 4 { #expect(gaps[3] >= 190, "gaps (ms): \(gaps)") }
        }
        try await sim.stop()
    }

    /// A drain bounded by its deadline: with requests the gateway never answers, `drainAndClose` returns
    /// at the deadline and reports those written unanswered (`.timedOut`); a drain with nothing
    /// unanswered reports every connection `.allAnswered`.
    @Test(.timeLimit(.minutes(3))) func aDrainEndsAtItsDeadlineAndCountsWhatIsUnanswered() async throws {
        var faults = HTTP2FaultScript()
        faults.neverAnswerTokens = Set((100..<103).map { testToken($0).hex })
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let log = OutcomeLog()
        // No per-stream deadline inside the test's time: the requests stay written and unanswered.
        let transport = try Self.transport(sim.port, connections: 2, log: log) { $0.requestTimeout = .seconds(3600) }
        // The unanswered ones last: a new connection writes one request until an answer proves it.
        try await transport.send((0..<37).map { job($0, token: $0) } + (100..<103).map { job($0, token: $0) })
        // Until the 37 others are answered; of the 3 left, those written wait on their streams (a
        // connection with streams stuck keeps its window small, so one may still wait in its queue).
        let clock = ContinuousClock()
        let bound = clock.now + .seconds(120)
        while sim.totals.unansweredStreams < 1 || sim.totals.byStatus[200, default: 0] < 37, clock.now < bound {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(sim.totals.byStatus[200] == 37)
        let written = sim.totals.unansweredStreams
        #expect(written >= 1 && written <= 3)
        let drained = await transport.drainAndClose(before: .now + .milliseconds(300))
        let unanswered = drained.reduce(0) { sum, outcome in
            if case .timedOut(let n) = outcome { return sum + n }
            return sum
        }
        // The drain counts what was written and unanswered at its deadline: those above, and one that
        // waited in a queue may have been written while it ran. The gateway has (or soon has) read each.
        let settled = clock.now + .seconds(30)
        while sim.totals.unansweredStreams < unanswered, clock.now < settled { try await Task.sleep(for: .milliseconds(10)) }
        #expect(unanswered >= written && unanswered <= 3, "\(drained)")
        #expect(unanswered == sim.totals.unansweredStreams, "\(drained)")

        let answering = try await HTTP2Simulator.startedForTests(faults: HTTP2FaultScript(), tokens: false)
        let other = try Self.transport(answering.port, connections: 2, log: OutcomeLog()) { $0.requestTimeout = .seconds(3600) }
        try await other.send((0..<40).map { job($0, token: $0) })
        let all = await other.drainAndClose(before: .now + .seconds(120))
        #expect(all.allSatisfy { if case .allAnswered = $0 { true } else { false } }, "\(all)")
        try await sim.stop()
        try await answering.stop()
    }

    /// One stream never answered while the connection answers the others: the per-stream deadline
    /// notices it (reset and resent), not the connection's silence; the others are all delivered.
    @Test func aNeverAnsweredStreamIsDetectedWhileOthersAreAnswered() async throws {
        var faults = HTTP2FaultScript()
        faults.neverAnswerTokens = [testToken(0).hex]
        faults.responseDelayMillis = 5  // the other answers keep coming for a second or more
        let sim = try await HTTP2Simulator.startedForTests(faults: faults, tokens: false)
        let log = OutcomeLog()
        let transport = try Self.transport(sim.port, connections: 1, log: log) {
            $0.streamCap = 2
            $0.requestTimeout = .milliseconds(200)
            $0.giveUpAfter = .seconds(1)
        }
        // Job 0 goes out 20th: the connection has proved its credentials and answers the others.
        var jobs = (1..<200).map { job($0, token: $0) }
        jobs.insert(job(0, token: 0), at: 20)
        try await Self.send(jobs, through: transport)
        let outcomes = log.outcomes
        #expect(outcomes.count == 200)
        #expect(outcomes.filter { $0.kind == .accepted }.count == 199)
        let stuck = outcomes.first { $0.jobID == job(0, token: 0).jobID }
        #expect(stuck?.rejection == .transient(reason: "gateway-gave-up"))
        #expect(log.events.retriedBy[.streamTimeout] >= 1, "found by its own deadline")
        #expect(Set(sim.records.compactMap(\.jobID)).count == 199)
        try await sim.stop()
    }

    /// A host name resolving to two addresses (127.0.0.1 and 127.0.0.2, a simulator on each, same
    /// port): the app's connections spread over both.
    @Test func connectionsSpreadOverEveryAddressOfTheHost() async throws {
        let first = try await HTTP2Simulator.startedForTests(tokens: false)
        let port = first.port
        let second = try await HTTP2Simulator.startedForTests(tokens: false) {
            $0.host = "127.0.0.2"
            $0.port = port
        }
        let log = OutcomeLog()
        let transport = try Self.transport(port, host: "apns.test", connections: 4, log: log) {
            $0.resolver = FixedResolver(addresses: ["127.0.0.1", "127.0.0.2"])
        }
        try await Self.send((0..<400).map { job($0, token: $0) }, through: transport)
        #expect(log.outcomes.count == 400)
        #expect(log.outcomes.allSatisfy { $0.kind == .accepted })
        #expect(first.totals.connections == 2)
        #expect(second.totals.connections == 2)
        #expect(first.records.count + second.records.count == 400)
        #expect(!first.records.isEmpty && !second.records.isEmpty)
        try await first.stop()
        try await second.stop()
    }

    @Test func addressChoiceSpreadsSlotsAndMovesOnAfterFailures() throws {
        let addresses = try ["10.0.0.3", "10.0.0.1", "10.0.0.4", "10.0.0.2"].map { try SocketAddress(ipAddress: $0, port: 443) }
        let picked = (0..<8).map { HTTP2Connection.address(among: addresses, slot: $0, failures: 0)?.ipAddress }
        #expect(picked == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"])
        // The resolver's order does not matter; a failure moves the connection to the next address.
        #expect(HTTP2Connection.address(among: addresses.reversed(), slot: 1, failures: 0)?.ipAddress == "10.0.0.2")
        #expect(HTTP2Connection.address(among: addresses, slot: 1, failures: 1)?.ipAddress == "10.0.0.3")
        #expect(HTTP2Connection.address(among: [], slot: 0, failures: 0) == nil)
        // The system resolver, on a literal address.
        #expect(try SystemHostResolver.lookUp(host: "127.0.0.1", port: 443).map(\.ipAddress) == ["127.0.0.1"])
    }
}

/// A resolver with fixed answers (what a name with several A records gives).
struct FixedResolver: HostResolver {
    var addresses: [String]
    func resolve(host: String, port: Int, on eventLoop: any EventLoop) -> EventLoopFuture<[SocketAddress]> {
        eventLoop.makeCompletedFuture { try addresses.map { try SocketAddress(ipAddress: $0, port: port) } }
    }
}
#endif
