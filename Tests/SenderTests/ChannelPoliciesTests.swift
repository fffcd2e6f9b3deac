import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import Logging
import NIOPosix
import Synchronization
import TestSupport
import Testing

@testable import Sender

/// What the sender knows of broadcast channels' storage policies (`ChannelPolicies`, design §5.5): a
/// channel is read once and kept (Apple: the policy "can't be modified later"); failed reads are not
/// repeated within their window; concurrent askers share one read; memory is bounded. Pure with a
/// scripted reader and clock; then the reader over TLS against the HTTP/2 simulator's channel management.
@Suite struct ChannelPoliciesTests {
    /// A reader that answers from a script and counts its reads per channel.
    final class Script: Sendable {
        let answers: Mutex<[String: ChannelPolicies.ReadResult]>
        let reads = Mutex<[String: Int]>([:])
        /// Reads wait until this many have started (to see that concurrent askers share one).
        let gate = Mutex<(opened: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

        init(_ answers: [String: ChannelPolicies.ReadResult]) { self.answers = Mutex(answers) }

        func read(_ app: String, _ channel: String) async -> ChannelPolicies.ReadResult {
            reads.withLock { $0[channel, default: 0] += 1 }
            await withCheckedContinuation { c in
                let go = gate.withLock { g -> Bool in
                    if g.opened { return true }
                    g.waiting.append(c)
                    return false
                }
                if go { c.resume() }
            }
            return answers.withLock { $0[channel] } ?? .channelUnknown("ChannelNotRegistered")
        }

        func open() {
            let waiting = gate.withLock { g -> [CheckedContinuation<Void, Never>] in
                g.opened = true
                defer { g.waiting = [] }
                return g.waiting
            }
            for c in waiting { c.resume() }
        }

        func count(_ channel: String) -> Int { reads.withLock { $0[channel] ?? 0 } }
    }

    final class Clock: Sendable {
        let now = Mutex(ContinuousClock.now)
        func advance(_ d: Duration) { now.withLock { $0 += d } }
    }

    func policies(_ script: Script, clock: Clock = Clock(), capacity: Int = 100) -> ChannelPolicies {
        ChannelPolicies(
            capacity: capacity, retryAfter: .seconds(60), logger: Logger(label: "test"), clock: { clock.now.withLock { $0 } },
            read: { await script.read($0, $1) })
    }

    @Test func aChannelIsReadOnceAndKept() async {
        let script = Script(["bm9uZQ==": .policy(.noStorage), "bW9zdA==": .policy(.mostRecent)])
        script.open()
        let p = policies(script)
        #expect(p.known(app: "a", channelID: "bm9uZQ==") == nil)
        #expect(await p.policy(app: "a", channelID: "bm9uZQ==") == .noStorage)
        #expect(await p.policy(app: "a", channelID: "bm9uZQ==") == .noStorage)
        #expect(await p.policy(app: "a", channelID: "bW9zdA==") == .mostRecent)
        #expect(p.known(app: "a", channelID: "bm9uZQ==") == .noStorage)
        #expect(script.count("bm9uZQ==") == 1 && script.count("bW9zdA==") == 1 && p.readsMade == 2)
        // Channels belong to an app: the same id of another app is its own channel.
        #expect(p.known(app: "b", channelID: "bm9uZQ==") == nil)
    }

    /// Waits (yielding) until `condition` holds, at most a generous bound of the test's own.
    func eventually(_ condition: () -> Bool) async -> Bool {
        let end = ContinuousClock.now + .seconds(60)
        while !condition() {
            if ContinuousClock.now > end { return false }
            await Task.yield()
        }
        return true
    }

    @Test func askersOfAChannelBeingReadShareTheRead() async {
        let script = Script(["c2hhcmVk": .policy(.mostRecent)])
        let p = policies(script)
        async let first = p.policy(app: "a", channelID: "c2hhcmVk")
        // The first read is under way (held); the second asker comes meanwhile.
        #expect(await eventually { script.count("c2hhcmVk") == 1 })
        async let second = p.policy(app: "a", channelID: "c2hhcmVk")
        for _ in 0..<1000 { await Task.yield() }
        script.open()
        let (a, b) = await (first, second)
        #expect(a == .mostRecent && b == .mostRecent)
        #expect(script.count("c2hhcmVk") == 1)
    }

    @Test func aBatchLearnsItsChannelsTogether() async {
        let script = Script(["YQ==": .policy(.noStorage), "Yg==": .policy(.mostRecent)])
        let p = policies(script)
        async let learned: Void = p.learn([("a", "YQ=="), ("a", "Yg=="), ("a", "YQ==")])
        // Both reads start before either may answer: they run together.
        #expect(await eventually { script.count("YQ==") + script.count("Yg==") == 2 })
        script.open()
        await learned
        #expect(p.known(app: "a", channelID: "YQ==") == .noStorage && p.known(app: "a", channelID: "Yg==") == .mostRecent)
        #expect(p.readsMade == 2)
    }

    @Test func failedReadsWaitForTheirWindow() async {
        let clock = Clock()
        let script = Script(["Z2hvc3Q=": .channelUnknown("ChannelNotRegistered"), "ZG93bg==": .appUnavailable("no answer")])
        script.open()
        let p = policies(script, clock: clock)
        #expect(await p.policy(app: "a", channelID: "Z2hvc3Q=") == nil)
        #expect(await p.policy(app: "a", channelID: "Z2hvc3Q=") == nil)
        #expect(script.count("Z2hvc3Q=") == 1)
        // The app's reads fail: no other channel of the app is read in the window; another app's is.
        #expect(await p.policy(app: "a", channelID: "ZG93bg==") == nil)
        #expect(await p.policy(app: "a", channelID: "bmV3") == nil)
        #expect(script.count("bmV3") == 0)
        #expect(await p.policy(app: "b", channelID: "bmV3") == nil)
        #expect(script.count("bmV3") == 1)
        // Past the window, read again (the channel may exist by now).
        clock.advance(.seconds(61))
        script.answers.withLock { $0["Z2hvc3Q="] = .policy(.mostRecent) }
        #expect(await p.policy(app: "a", channelID: "Z2hvc3Q=") == .mostRecent)
        #expect(script.count("Z2hvc3Q=") == 2)
    }

    @Test func memoryIsBounded() async {
        let script = Script([:])
        script.open()
        let p = policies(script, capacity: 3)
        for i in 0..<10 {
            script.answers.withLock { $0["c\(i)"] = .policy(.noStorage) }
            _ = await p.policy(app: "a", channelID: "c\(i)")
        }
        // The newest three are kept, the oldest dropped (read again if asked for).
        #expect(
            (0..<10).map { p.known(app: "a", channelID: "c\($0)") != nil } == [
                false, false, false, false, false, false, false, true, true, true,
            ])
        _ = await p.policy(app: "a", channelID: "c0")
        #expect(script.count("c0") == 2 && p.known(app: "a", channelID: "c0") == .noStorage)
    }

    @Test func whatAReadSays() {
        #expect(
            ChannelPolicies.readResult(.channel(channelID: "a", policy: .mostRecent, policyValue: 1, pushType: nil)) == .policy(.mostRecent)
        )
        if case .channelUnknown = ChannelPolicies.readResult(.channel(channelID: "a", policy: nil, policyValue: 7, pushType: nil)) {
        } else {
            Issue.record("an unknown policy value was taken")
        }
        func error(_ kind: ChannelManagementError.Kind) -> ChannelManagementError {
            ChannelManagementError(
                kind: kind, operation: .get(channelID: "a"), app: "a", environment: .production,
                host: ChannelManagementConfiguration.appleHost(.production), keyID: "K", requestID: nil)
        }
        #expect(
            ChannelPolicies.readResult(error(.refused(status: 400, reason: "ChannelNotRegistered")))
                == .channelUnknown("ChannelNotRegistered"))
        if case .appUnavailable = ChannelPolicies.readResult(error(.refused(status: 400, reason: "FeatureNotEnabled"))) {
        } else {
            Issue.record("FeatureNotEnabled is the app's")
        }
        if case .appUnavailable = ChannelPolicies.readResult(error(.unreachable("connection refused"))) {
        } else {
            Issue.record("an unreachable host is the app's")
        }
    }

    /// The reader `run` uses, over TLS against the simulator's channel management.
    @Test func readsAChannelsPolicyFromTheSimulator() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let c = try ChannelManagementClientTests().configuration(port: sim.port)
        var ids: [APNsChannelStoragePolicy: String] = [:]
        for policy in APNsChannelStoragePolicy.allCases {
            let (created, _) = try await ChannelManagementClient.perform(.create(policy), configuration: c, group: group)
            if case .created(let id, _) = created { ids[policy] = id }
        }
        let p = ChannelPolicies(
            logger: Logger(label: "test"), read: ChannelPolicies.apnsReader(group: group, logger: Logger(label: "test")) { _ in c })
        #expect(await p.policy(app: ChannelManagementClientTests.shop, channelID: ids[.noStorage] ?? "") == .noStorage)
        #expect(await p.policy(app: ChannelManagementClientTests.shop, channelID: ids[.mostRecent] ?? "") == .mostRecent)
        #expect(await p.policy(app: ChannelManagementClientTests.shop, channelID: "bm90LWEtY2hhbm5lbA==") == nil)
        #expect(p.readsMade == 3)
        #expect(sim.totals.channelAnswers["get 200"] == 2 && sim.totals.channelAnswers["get ChannelNotRegistered"] == 1)
        try await group.shutdownGracefully()
        try await sim.stop()
    }
}
