import APNsProtocol
import APNsTransport
import Feedback
import Foundation
import GatewaySimulator
import Redis
import TestSupport
import Testing

@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct FeedbackPollerTests {
    @Test func tuplesBecomeSuppressionsAndTheListIsCleared() async throws {
        try await withSimulator { simulator in
            try await withStore { store, _ in
                let times: [UInt32] = [1_700_000_000, 1_700_000_100, 1_700_000_200]
                for (n, time) in times.enumerated() { simulator.queueFeedback(app: shop, token: token(n), time: time) }
                simulator.queueFeedback(app: news, token: token(100), time: 1_700_000_300)
                simulator.queueFeedback(app: news, token: token(101), time: 1_700_000_400)

                let poller = FeedbackPoller(store: store, logger: quietLogger())
                let summary = try await poller.poll(feedbackApp(shop, port: simulator.ports.feedback))

                #expect(summary.tuplesRead == 3)
                #expect(summary.suppressed == 3)
                #expect(summary.malformed == 0)
                #expect(!summary.endedMidTuple)
                #expect(summary.oldestTimestamp == 1_700_000_000)
                #expect(summary.newestTimestamp == 1_700_000_200)

                var expected: [String: String] = [:]
                for (n, time) in times.enumerated() { expected[token(n).hex] = "\(time):feedback" }
                #expect(try await store.client.suppressions(shop) == expected)
                // The service cleared the shop's list; the news list is untouched and nothing of it was written.
                #expect(simulator.pendingFeedback(app: shop).isEmpty)
                #expect(simulator.pendingFeedback(app: news).map(\.timestamp) == [1_700_000_300, 1_700_000_400])
                #expect(try await store.client.suppressions(news).isEmpty)

                // A second poll finds the list empty and changes nothing.
                let again = try await poller.poll(feedbackApp(shop, port: simulator.ports.feedback))
                #expect(again.tuplesRead == 0)
                #expect(try await store.client.suppressions(shop) == expected)
            }
        }
    }

    @Test func connectingByAddressVerifiesTheCertificateIP() async throws {
        try await withSimulator { simulator in
            try await withStore(prefix: "p2") { store, _ in
                simulator.queueFeedback(app: news, token: token(7), time: 1_700_000_007)
                let poller = FeedbackPoller(store: store, logger: quietLogger())
                let summary = try await poller.poll(feedbackApp(news, port: simulator.ports.feedback, serverHostname: nil))
                #expect(summary.suppressed == 1)
                #expect(try await store.client.suppressions(news, prefix: "p2") == [token(7).hex: "1700000007:feedback"])
            }
        }
    }

    @Test func aTokenRegisteredAfterItsFeedbackTimeIsNotSuppressed() async throws {
        try await withSimulator { simulator in
            try await withStore { store, _ in
                let feedbackTime: Int64 = 1_700_000_000
                let reregistered = token(1)
                let stale = token(2)
                let neverRegistered = token(3)
                let untouched = token(4)
                for t in [reregistered, stale, neverRegistered] {
                    simulator.queueFeedback(app: shop, token: t, time: UInt32(feedbackTime))
                }
                try await store.applyRegistrations([
                    Registration(app: shop, tokenHex: reregistered.hex, registeredAt: feedbackTime + 60, language: "fr"),
                    Registration(app: shop, tokenHex: stale.hex, registeredAt: feedbackTime - 60),
                ])

                let poller = FeedbackPoller(store: store, logger: quietLogger())
                let summary = try await poller.poll(feedbackApp(shop, port: simulator.ports.feedback))
                #expect(summary.suppressed == 3)

                let decisions = try await store.gate([
                    GateRequest(jobID: "j1", app: shop, tokenHex: reregistered.hex),
                    GateRequest(jobID: "j2", app: shop, tokenHex: stale.hex),
                    GateRequest(jobID: "j3", app: shop, tokenHex: neverRegistered.hex),
                    GateRequest(jobID: "j4", app: shop, tokenHex: untouched.hex),
                    // Feedback is per app: the same token in another app is not suppressed.
                    GateRequest(jobID: "j5", app: news, tokenHex: stale.hex),
                ])
                #expect(
                    decisions == [.admitted(language: "fr"), .suppressed, .suppressed, .admitted(language: nil), .admitted(language: nil)])
            }
        }
    }

    /// The service clears its list as it sends it, so a poller that stops mid-stream must already have
    /// written everything it read. The poll is cancelled from its progress callback after the first
    /// batches (a deterministic point, no timing involved); everything reported read must be in Redis,
    /// in the service's order, and nothing more.
    @Test func stoppingMidReadLosesNothingAlreadyRead() async throws {
        try await withSimulator { simulator in
            try await withStore { store, _ in
                let total = 10_000
                for n in 0..<total { simulator.queueFeedback(app: shop, token: token(n), time: 1_600_000_000 + UInt32(n)) }

                var configuration = FeedbackPollerConfiguration()
                configuration.batchSize = 100
                // Let the poller's socket side take the whole stream while it writes, so the service's
                // write completes and it clears its list whatever the kernel's socket buffer sizes are
                // (otherwise closing early fails the service's write and the simulator restores the list).
                configuration.readAhead = 1000
                let poller = FeedbackPoller(store: store, configuration: configuration, logger: quietLogger())
                let app = feedbackApp(shop, port: simulator.ports.feedback)
                let task = Task {
                    try await poller.poll(app) { progress in
                        if progress.suppressed >= 1000 { withUnsafeCurrentTask { $0?.cancel() } }
                    }
                }
                let result = await task.result
                guard case .failure(let failure) = result, let error = failure as? FeedbackPollError else {
                    Issue.record("the poll was expected to stop early, got \(result)")
                    return
                }
                #expect(error.stage == .cancelled)
                let read = error.summary.tuplesRead
                #expect(read >= 1000)
                #expect(read < total, "the poll must have stopped mid-stream")
                #expect(error.summary.suppressed == read)

                let stored = try await store.client.suppressions(shop)
                var expected: [String: String] = [:]
                for n in 0..<read { expected[token(n).hex] = "\(1_600_000_000 + n):feedback" }
                #expect(stored.count == read)
                #expect(stored == expected)
                // The service cleared its list when it sent it: the unread rest is gone, as the spec says.
                #expect(simulator.pendingFeedback(app: shop).isEmpty)
                #expect(simulator.totals.feedbackTuplesServed == total)
            }
        }
    }

    /// The connection is cut (TCP closed without a TLS close, in the middle of a tuple): every complete
    /// tuple before the cut is written, the partial one is reported.
    @Test func aCutConnectionKeepsEveryCompleteTuple() async throws {
        var bytes: [UInt8] = []
        let complete = 2000
        for n in 0..<complete { bytes += tupleBytes(time: 1_650_000_000 + UInt32(n), token: token(n).bytes) }
        bytes += Array(tupleBytes(time: 1_650_009_999, token: token(9999).bytes).prefix(20))
        let service = try await ScriptedFeedbackService(bytes: bytes, ending: .abrupt)
        try await withStore { store, _ in
            let poller = FeedbackPoller(store: store, logger: quietLogger())
            let summary = try await poller.poll(feedbackApp(shop, port: service.port))
            #expect(summary.tuplesRead == complete)
            #expect(summary.suppressed == complete)
            #expect(summary.endedMidTuple)
            let stored = try await store.client.suppressions(shop)
            #expect(stored.count == complete)
            #expect(stored[token(complete - 1).hex] == "\(1_650_000_000 + complete - 1):feedback")
            #expect(stored[token(9999).hex] == nil)
        }
        try await service.stop()
    }

    @Test func malformedTuplesAreCountedAndSkipped() async throws {
        var bytes: [UInt8] = []
        bytes += tupleBytes(time: 1_700_000_001, token: token(1).bytes)
        bytes += tupleBytes(time: 1_700_000_002, token: [UInt8](repeating: 0xEE, count: 16))  // short token
        bytes += tupleBytes(time: 1_700_000_003, token: [])  // empty token
        bytes += tupleBytes(time: 1_700_000_004, token: [UInt8](repeating: 0xDD, count: 100))  // long token
        bytes += tupleBytes(time: 1_700_000_005, token: token(5).bytes)
        bytes += [0x65, 0x00, 0x00]  // half a header at the end
        let service = try await ScriptedFeedbackService(bytes: bytes, ending: .clean)
        try await withStore { store, _ in
            let poller = FeedbackPoller(store: store, logger: quietLogger())
            let summary = try await poller.poll(feedbackApp(shop, port: service.port))
            #expect(summary.tuplesRead == 5)
            #expect(summary.malformed == 3)
            #expect(summary.suppressed == 2)
            #expect(summary.endedMidTuple)
            #expect(
                try await store.client.suppressions(shop) == [
                    token(1).hex: "1700000001:feedback", token(5).hex: "1700000005:feedback",
                ])
        }
        try await service.stop()
    }

    @Test func aSilentServiceTimesOutKeepingWhatWasRead() async throws {
        let bytes = tupleBytes(time: 1_700_000_001, token: token(1).bytes)
        let service = try await ScriptedFeedbackService(bytes: bytes, ending: .never)
        try await withStore { (store: PipelineStore, _: RedisServer) async throws in
            var configuration = FeedbackPollerConfiguration()
            configuration.readTimeout = .milliseconds(300)
            let poller = FeedbackPoller(store: store, configuration: configuration, logger: quietLogger())
            var caught: FeedbackPollError?
            do throws(FeedbackPollError) {
                let summary = try await poller.poll(feedbackApp(shop, port: service.port))
                Issue.record("expected a read timeout, got \(summary)")
            } catch {
                caught = error
            }
            #expect(caught?.stage == .stream)
            #expect(caught?.summary.suppressed == 1)
            #expect(caught?.underlying.contains("no data") == true, "\(String(describing: caught))")
            #expect(try await store.client.suppressions(shop) == [token(1).hex: "1700000001:feedback"])
        }
        try await service.stop()
    }

    @Test func aCertificateForAnotherTopicIsRefusedBeforeReading() async throws {
        try await withSimulator { simulator in
            try await withStore { store, _ in
                simulator.queueFeedback(app: shop, token: token(1), time: 1_700_000_000)
                let poller = FeedbackPoller(store: store, logger: quietLogger())
                // The shop's certificate, configured as the news app.
                var app = feedbackApp(shop, port: simulator.ports.feedback)
                app.credentials.app = news
                await #expect {
                    _ = try await poller.poll(app)
                } throws: { ($0 as? FeedbackPollError)?.stage == .configuration }
                #expect(simulator.pendingFeedback(app: shop).count == 1)
                #expect(simulator.totals.feedbackConnections == 0)
            }
        }
    }

    @Test func redisDownMeansTheServiceIsNotRead() async throws {
        try await withSimulator { simulator in
            let server = try await RedisServer()
            let client = try server.client(maximumWait: .milliseconds(200), logLevel: .critical)
            server.stop()  // nothing listens on its port any more
            simulator.queueFeedback(app: shop, token: token(1), time: 1_700_000_000)
            let poller = FeedbackPoller(store: PipelineStore(client: client), logger: quietLogger())
            await #expect {
                _ = try await poller.poll(feedbackApp(shop, port: simulator.ports.feedback))
            } throws: { ($0 as? FeedbackPollError)?.stage == .redisUnavailable }
            #expect(simulator.pendingFeedback(app: shop).count == 1)
            #expect(simulator.totals.feedbackConnections == 0)
        }
    }

    /// The schedule polls every app each round, logs a failing app and carries on, and keeps polling
    /// at its interval until cancelled.
    @Test func theSchedulePollsEveryAppAndSurvivesFailures() async throws {
        try await withSimulator { simulator in
            try await withStore { store, _ in
                let poller = FeedbackPoller(store: store, logger: quietLogger())
                let port = simulator.ports.feedback
                let schedule = FeedbackSchedule(
                    apps: [
                        FeedbackApp(
                            credentials: TestCertificates.credentials(shop),
                            endpoint: FeedbackEndpoint(host: "127.0.0.1", port: 1, serverHostname: "localhost")),
                        feedbackApp(shop, port: port),
                        feedbackApp(news, port: port),
                    ],
                    poller: poller, interval: .milliseconds(50), logger: quietLogger("apns.feedback.schedule.test"))

                let round = await schedule.pollAll()
                #expect(round.count == 3)
                if case .failure(let error) = round[0] { #expect(error.stage == .connect) } else { Issue.record("port 1 should refuse") }
                if case .success = round[1] {} else { Issue.record("shop poll failed: \(round[1])") }

                let running = Task { await schedule.run() }
                simulator.queueFeedback(app: shop, token: token(1), time: 1_700_000_001)
                simulator.queueFeedback(app: news, token: token(2), time: 1_700_000_002)
                try await eventually("first round's tuples in Redis") {
                    let shops = try await store.client.suppressions(shop).count
                    let newses = try await store.client.suppressions(news).count
                    return shops == 1 && newses == 1
                }
                simulator.queueFeedback(app: shop, token: token(3), time: 1_700_000_003)
                try await eventually("a later round's tuple in Redis") {
                    try await store.client.suppressions(shop).count == 2
                }
                running.cancel()
                await running.value
                #expect(simulator.totals.feedbackConnections >= 4)
            }
        }
    }
}
