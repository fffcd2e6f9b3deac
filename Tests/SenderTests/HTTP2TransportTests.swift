// Compiled once the HTTP/2 simulator (branch h2sim) is merged and SenderTests depends on it: until
// then this file is empty, so the branch builds on its own.
#if canImport(HTTP2Simulator)
import APNsProtocol
import APNsTransport
import Crypto
import Foundation
import GatewaySimulator
import HTTP2Simulator
import NIOPosix
import Synchronization
import Testing
import TestSupport

@testable import Sender

/// The HTTP/2 transport against the HTTP/2 simulator over real TLS (ALPN h2): exact outcome counts for
/// every class of answer, GOAWAY and drops without loss, token authentication and renewal.
@Suite(.serialized) struct HTTP2TransportTests {
    static func simulator(
        faults: HTTP2FaultScript = HTTP2FaultScript(), tokens: Bool = false,
        configure: (inout HTTP2SimulatorConfiguration) -> Void = { _ in }
    ) async throws -> HTTP2Simulator {
        try await HTTP2Simulator.startedForTests(faults: faults, tokens: tokens, configure: configure)
    }

    static func transport(
        _ sim: HTTP2Simulator, connections: Int = 4, auth: HTTP2Authentication? = nil, log: OutcomeLog,
        configure: (inout HTTP2TransportConfiguration) -> Void = { _ in }
    ) throws -> HTTP2Transport {
        var c = HTTP2TransportConfiguration(
            app: shop, authentication: auth ?? .certificate(.test(app: shop, in: TestCertificates.directory)),
            hosts: [GatewayAddress(host: "127.0.0.1", port: sim.port)])
        c.connections = connections
        c.serverHostname = "localhost"
        // A stream unanswered this long counts as stuck and is resent (ambiguous): a deadline a loaded
        // machine can miss, so the tests that are not about it wait longer (see docs/testing.md §3.1).
        c.requestTimeout = slowMachineRequestTimeout
        c.linger = .milliseconds(1)
        c.reconnect.initialDelay = .milliseconds(5)
        c.reconnect.maximumDelay = .milliseconds(200)
        c.reconnect.attemptsPerSecondPerGateway = 2000
        c.retry.initialDelay = .milliseconds(5)
        c.retry.maximumDelay = .milliseconds(50)
        configure(&c)
        return try HTTP2Transport(configuration: c, group: MultiThreadedEventLoopGroup.singleton, onOutcomes: log.handler)
    }

    static func send(_ jobs: [PushNotification], through transport: HTTP2Transport) async throws {
        var i = 0
        while i < jobs.count {
            try await transport.send(Array(jobs[i..<min(i + 500, jobs.count)]))
            i += 500
        }
        _ = await transport.drainAndClose()
    }

    static func kinds(_ log: OutcomeLog) -> [OutcomeKind: Int] {
        log.outcomes.reduce(into: [:]) { $0[$1.kind, default: 0] += 1 }
    }

    @Test func everyJobAcceptedOnceWithinTheStreamLimit() async throws {
        let sim = try await Self.simulator()
        let log = OutcomeLog()
        let transport = try Self.transport(sim, log: log)
        let jobs = (0..<3000).map { job($0, token: $0) }
        try await Self.send(jobs, through: transport)
        #expect(Self.kinds(log) == [.accepted: 3000])
        #expect(Set(log.outcomes.map(\.jobID)).count == 3000)
        let records = sim.records
        #expect(records.count == 3000)
        #expect(Set(records.compactMap(\.jobID)).count == 3000)
        // The apns-id is the job's own, so a resend would be recognisable.
        #expect(records.allSatisfy { $0.apnsID == HTTP2Request.apnsID(jobID: $0.jobID ?? "") })
        let totals = sim.totals
        #expect(totals.refusedStreams == 0)
        #expect(log.events.ambiguous == 0 && log.events.replayed == 0)
        try await sim.stop()
    }

    /// A server with tight flow control (1000-byte stream windows, the connection's 65,535 returned in
    /// halves): each ~2 KB payload cannot go in one piece, and 100 streams' worth cannot go at once, so
    /// the DATA waits for WINDOW_UPDATE in the codec; NIO's server would end the connection with
    /// FLOW_CONTROL_ERROR at the first byte over a window. Every job is answered, each body intact
    /// (the simulator reads the job id from the payload's last bytes), on the first two connections.
    @Test func dataWaitsForTheServersWindowsAndEverythingIsAnswered() async throws {
        var faults = HTTP2FaultScript()
        faults.flowControlWindow = 1000
        let sim = try await Self.simulator(faults: faults)
        let log = OutcomeLog()
        let transport = try Self.transport(sim, connections: 2, log: log)
        let filler = String(repeating: "x", count: 1900)
        let jobs = (0..<2000).map { n in
            var j = job(n, token: n)
            j.payload = Array(#"{"aps":{"alert":"\#(filler)"},"jid":"job-\#(n)"}"#.utf8)
            return j
        }
        try await Self.send(jobs, through: transport)
        #expect(Self.kinds(log) == [.accepted: 2000])
        let records = sim.records
        #expect(records.count == 2000)
        #expect(Set(records.compactMap(\.jobID)) == Set(jobs.map(\.jobID)))
        let totals = sim.totals
        #expect(totals.connections == 2 && totals.abruptCloses == 0 && totals.refusedStreams == 0)
        #expect(log.events.ambiguous == 0 && log.events.replayed == 0)
        try await sim.stop()
    }

    @Test func everyAnswerClassWithExactCounts() async throws {
        var faults = HTTP2FaultScript()
        // Tokens 0..<10 invalid, 10..<20 unregistered at a known time, 20..<25 registered for another topic.
        faults.invalidTokens = Set((0..<10).map { testToken($0).hex })
        faults.unregisteredTokens = Dictionary(uniqueKeysWithValues: (10..<20).map { (testToken($0).hex, Int64(1_700_000_000_500)) })
        faults.tokenTopics = Dictionary(uniqueKeysWithValues: (20..<25).map { (testToken($0).hex, "com.example.news") })
        let sim = try await Self.simulator(faults: faults)
        let log = OutcomeLog()
        let transport = try Self.transport(sim, log: log)
        var jobs = (0..<200).map { job($0, token: $0) }
        // A payload over the limit is refused before sending, with APNs' own reason.
        var big = job(200, token: 200)
        big.payload = Array((#"{"aps":{"alert":""# + String(repeating: "x", count: 4100) + #""}}"#).utf8)
        jobs.append(big)
        try await Self.send(jobs, through: transport)
        let byJob = Dictionary(uniqueKeysWithValues: log.outcomes.map { ($0.jobID, $0) })
        #expect(byJob.count == 201)
        #expect(Self.kinds(log) == [.accepted: 175, .rejected: 25, .deadLettered: 1])
        for n in 0..<10 {
            #expect(byJob["job-\(n)"]?.rejection == .invalidToken(since: nil, reason: "invalid-token"))
            #expect(byJob["job-\(n)"]?.code == "BadDeviceToken")
        }
        for n in 10..<20 {
            #expect(byJob["job-\(n)"]?.rejection == .invalidToken(since: 1_700_000_000, reason: "unregistered"))
            #expect(byJob["job-\(n)"]?.code == "Unregistered")
        }
        for n in 20..<25 { #expect(byJob["job-\(n)"]?.code == "DeviceTokenNotForTopic") }
        #expect(byJob["job-200"]?.rejection == .badRequest(reason: "PayloadTooLarge"))
        #expect(byJob["job-200"]?.attempts == 0)
        #expect(sim.records.count == 175)
        try await sim.stop()
    }

    @Test func serverErrorsAreRetriedBoundedAndNothingIsLost() async throws {
        var faults = HTTP2FaultScript()
        faults.internalServerErrorRate = 0.2
        faults.serviceUnavailableRate = 0.1
        faults.tooManyRequestsRate = 0.1
        let sim = try await Self.simulator(faults: faults)
        let log = OutcomeLog()
        let transport = try Self.transport(sim, log: log)
        try await Self.send((0..<1000).map { job($0, token: $0) }, through: transport)
        let outcomes = log.outcomes
        #expect(Set(outcomes.map(\.jobID)).count == 1000)
        #expect(outcomes.count == 1000)
        let accepted = outcomes.filter { $0.kind == .accepted }
        let gaveUp = outcomes.filter { $0.kind == .deadLettered }
        #expect(accepted.count + gaveUp.count == 1000)
        #expect(gaveUp.allSatisfy { if case .transient = $0.rejection { true } else { false } })
        // Every accepted job reached the simulator exactly once (a 5xx or 429 answer is not processed).
        #expect(sim.records.count == accepted.count)
        #expect(Set(sim.records.compactMap(\.jobID)).count == accepted.count)
        #expect(log.events.retried > 0)
        #expect(log.events.ambiguous == 0)
        try await sim.stop()
    }

    @Test func goAwayAndDropsLoseNothingAndDuplicateOnlyAmbiguousOnes() async throws {
        var faults = HTTP2FaultScript()
        faults.shutdownEvery = 700
        faults.dropEvery = 1100
        let sim = try await Self.simulator(faults: faults)
        let log = OutcomeLog()
        let transport = try Self.transport(sim, log: log)
        try await Self.send((0..<5000).map { job($0, token: $0) }, through: transport)
        let outcomes = log.outcomes
        #expect(outcomes.count == 5000)
        #expect(Set(outcomes.map(\.jobID)).count == 5000)
        #expect(outcomes.allSatisfy { $0.kind == .accepted })
        let records = sim.records
        let recordedJobs = Set(records.compactMap(\.jobID))
        #expect(recordedJobs.count == 5000)
        let duplicates = records.count - recordedJobs.count
        let events = log.events
        #expect(duplicates <= events.ambiguous)
        // Each ambiguous resend shows on the outcome of the request resent (what the pipeline counts
        // per campaign); GOAWAY replays do not.
        #expect(events.ambiguous > 0, "the drops left requests unanswered")
        #expect(outcomes.reduce(0) { $0 + Int($1.ambiguousResends) } == events.ambiguous)
        #expect(events.replayed > 0 || sim.totals.goAways > 0)
        #expect(events.reconnects > 4)
        try await sim.stop()
    }

    @Test func tokenAuthenticationAndRenewalOfAnExpiredToken() async throws {
        let sim = try await Self.simulator(tokens: true)
        let log = OutcomeLog()
        // The first token is signed two hours in the past: the simulator answers 403
        // ExpiredProviderToken, the transport renews it once and every job goes through, without 429.
        let calls = Atomic<Int>(0)
        let signer = try ProviderTokenSigner(
            keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID)
        // Renewed only on APNs' word (no renewal by age), so the first requests surely carry the old
        // token: otherwise a second `current()` before any request was answered (a connection dropped
        // and reopened on a loaded machine) renewed it by age and no 403 ever came.
        let cache = ProviderTokenCache(signer: signer, renewAfter: 10 * 3600) {
            let now = Int64(Date().timeIntervalSince1970)
            return calls.add(1, ordering: .relaxed).newValue == 1 ? now - 7200 : now
        }
        let transport = try Self.transport(
            sim, connections: 2, auth: .token(cache, trustRootsPath: TestCertificates.pem("ca")), log: log)
        try await Self.send((0..<500).map { job($0, token: $0) }, through: transport)
        #expect(Self.kinds(log) == [.accepted: 500])
        let totals = sim.totals
        #expect(totals.byReason["TooManyProviderTokenUpdates"] == nil)
        #expect((totals.byReason["ExpiredProviderToken"] ?? 0) >= 1)
        #expect(sim.records.allSatisfy { $0.auth == "token:\(TestCertificates.tokenTeamID)/\(TestCertificates.tokenKeyID)" })
        try await sim.stop()
    }

    @Test func refusedCredentialsStopTheConnectionButLoseNothing() async throws {
        // A key the simulator does not know: every connection is refused (403 InvalidProviderToken).
        let sim = try await Self.simulator(tokens: true)
        let log = OutcomeLog()
        let signer = try ProviderTokenSigner(
            pem: P256.Signing.PrivateKey().pemRepresentation, keyID: "UNKNOWNKEY", teamID: TestCertificates.tokenTeamID)
        let transport = try Self.transport(
            sim, connections: 2, auth: .token(ProviderTokenCache(signer: signer), trustRootsPath: TestCertificates.pem("ca")),
            log: log
        ) { $0.authFailureDelay = .seconds(3600) }
        try await transport.send((0..<50).map { job($0, token: $0) })
        try await waitUntil("both connections stopped") {
            await transport.statistics().allSatisfy { $0.state == "stopped" }
        }
        // Nothing settled, nothing dropped: the jobs wait for credentials that work.
        #expect(log.count == 0)
        let held = await transport.statistics().reduce(0) { $0 + $1.queueDepth }
        #expect(held == 50)
        #expect(sim.records.isEmpty)
        try await sim.stop()
    }
}
#endif
