import GatewaySimulator
import Testing

@testable import Sender

/// The per-connection logic without sockets: events in, actions out, times chosen by the test.
@Suite struct HTTP2ConnectionStateMachineTests {
    typealias Machine = HTTP2ConnectionStateMachine<Int>

    static func machine(cap: Int = 100, configure: (inout Machine.Configuration) -> Void = { _ in }) -> Machine {
        var c = Machine.Configuration()
        c.streamCap = cap
        c.queueCapacity = 1000
        c.requestTimeout = 10
        c.pingInterval = 30
        c.maxAttempts = 3
        c.maxRateLimitedAttempts = 3
        c.authFailureDelay = 60
        configure(&c)
        return Machine(configuration: c, random: SplitMix64(seed: 42))
    }

    /// A connected machine that already had one authenticated answer, with `max` server streams.
    static func authenticated(cap: Int = 100, serverMax: Int = 1000) -> Machine {
        var m = machine(cap: cap)
        _ = m.enqueue([0], now: 0)
        let w = m.connected(now: 0).writes
        _ = m.settings(maxConcurrentStreams: serverMax, now: 0)
        _ = m.response(streamID: w[0].streamID, status: 200, reason: nil, timestamp: nil, now: 0)
        _ = m.takeEvents()
        return m
    }

    @Test func firstWorkConnectsAndOneStreamUntilAuthenticated() {
        var m = Self.machine()
        let a = m.enqueue(Array(1...5), now: 0)
        #expect(a.connect)
        #expect(a.writes.isEmpty)
        let c = m.connected(now: 0)
        #expect(c.writes.map(\.streamID) == [1])
        // A larger server limit does not open more streams before the credentials are proved.
        #expect(m.settings(maxConcurrentStreams: 1000, now: 0).writes.isEmpty)
        let r = m.response(streamID: 1, status: 200, reason: nil, timestamp: nil, now: 1)
        #expect(r.settled.map(\.request.job) == [1])
        #expect(r.settled.first?.delivery == .accepted)
        #expect(r.writes.map(\.streamID) == [3, 5, 7, 9])
        #expect(r.writes.map(\.request.job) == [2, 3, 4, 5])
    }

    @Test func permitsAreTheSmallerOfServerLimitAndCap() {
        var m = Self.authenticated(cap: 3, serverMax: 1000)
        #expect(m.permits == 3)
        #expect(m.enqueue(Array(1...10), now: 1).writes.count == 3)
        var n = Self.authenticated(cap: 100, serverMax: 2)
        #expect(n.permits == 2)
        #expect(n.enqueue(Array(1...10), now: 1).writes.count == 2)
        // The server lowers its limit: no new stream until the open ones fall below it.
        _ = n.settings(maxConcurrentStreams: 1, now: 2)
        let r = n.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: 2)
        #expect(r.writes.isEmpty)
        #expect(n.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: 2).writes.count == 1)
    }

    /// A read burst's answers settle as single answers would, and the freed streams are refilled in one
    /// action: in order, each request once, a stale answer ignored, the refused credential still stops
    /// the connection for the rest of the burst.
    @Test func aBurstOfAnswersSettlesEachAndRefillsOnce() {
        var m = Self.authenticated(cap: 3)
        #expect(m.enqueue(Array(1...8), now: 1).writes.map(\.streamID) == [3, 5, 7])
        let burst = m.responses(
            [
                .init(streamID: 3, status: 200), .init(streamID: 5, status: 410, reason: "Unregistered", timestamp: 7000),
                .init(streamID: 3, status: 200),  // stale: already settled
                .init(streamID: 7, status: 200),
            ], now: 2)
        #expect(burst.settled.map(\.request.job) == [1, 2, 3])
        #expect(burst.settled[1].delivery == .rejected(.invalidToken(since: 7, reason: "unregistered")))
        #expect(burst.writes.map(\.streamID) == [9, 11, 13])
        #expect(burst.writes.map(\.request.job) == [4, 5, 6])

        let refused = m.responses(
            [
                .init(streamID: 9, status: 200), .init(streamID: 11, status: 403, reason: "InvalidProviderToken"),
                .init(streamID: 13, status: 200),
            ], now: 3)
        #expect(refused.settled.map(\.request.job) == [4, 6])
        #expect(refused.credentialsRefused == "InvalidProviderToken")
        #expect(refused.writes.isEmpty)
        // The refused request and the queue go to another connection; nothing is open, so it closes.
        #expect(refused.reroute.map(\.job) == [5, 7, 8])
        #expect(refused.close)
    }

    /// Answers read just before the connection closed settle their requests without opening streams on
    /// the dead channel: only the streams really left unanswered come back as ambiguous.
    @Test func answersAtTheCloseSettleWithoutRefilling() {
        var m = Self.authenticated(cap: 2)
        #expect(m.enqueue(Array(1...4), now: 1).writes.map(\.streamID) == [3, 5])
        let last = m.responses([.init(streamID: 3, status: 200)], now: 2, refill: false)
        #expect(last.settled.map(\.request.job) == [1])
        #expect(last.writes.isEmpty)
        _ = m.closed(now: 2)
        #expect(m.takeEvents().ambiguous == 1)  // stream 5 only
        #expect(m.queue.count == 3)
    }

    @Test func goAwayResendsOnlyStreamsAboveLastStreamID() {
        var m = Self.authenticated()
        let w = m.enqueue(Array(1...4), now: 1).writes.map(\.streamID)  // 3, 5, 7, 9
        #expect(w == [3, 5, 7, 9])
        let g = m.goAway(lastStreamID: 5, now: 2)
        #expect(g.writes.isEmpty && !g.close)
        #expect(m.takeEvents().replayed == 2)
        // New work waits; the processed streams still settle; then the connection closes.
        #expect(m.enqueue([5], now: 2).writes.isEmpty)
        _ = m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: 2)
        let last = m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: 2)
        #expect(last.close)
        let closed = m.closed(now: 3)
        #expect(m.takeEvents().ambiguous == 0)
        #expect(!closed.connect)
        // Not at once: after a back-off of at least half the initial delay (the rest is jitter).
        guard case .waitingToReconnect(let at) = m.phase else {
            Issue.record("expected a back-off, got \(m.phase)")
            return
        }
        #expect(at >= 3 + m.configuration.reconnect.initialDelay * 0.5 && at <= 3 + m.configuration.reconnect.initialDelay)
        #expect(!m.tick(now: 3).connect)
        #expect(m.tick(now: 100).connect)
        let again = m.connected(now: 100).writes
        // The resent ones go first, in their order, on a fresh stream 1.
        #expect(again.map(\.request.job) == [3])
        #expect(again.map(\.streamID) == [1])
        #expect(again[0].request.attempts == 2)
    }

    @Test func droppedConnectionResendsUnansweredAsAmbiguous() {
        var m = Self.authenticated()
        _ = m.enqueue(Array(1...3), now: 1)
        _ = m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: 1)
        _ = m.closed(now: 2)
        let e = m.takeEvents()
        #expect(e.ambiguous == 2)
        #expect(e.replayed == 0)
        #expect(m.queue.count == 2)
        // A late answer for a stream of the dead connection is not settled twice.
        #expect(m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: 2).settled.isEmpty)
        // The resends carry it (to their outcomes, where the pipeline counts it per campaign).
        #expect(m.tick(now: 100).connect)
        // (One stream until the new connection is authenticated.)
        #expect(m.connected(now: 100).writes.map(\.request.ambiguousResends) == [1])
    }

    /// `reconnects` counts connections after the first (the demo showed one per connection before).
    @Test func onlyConnectionsAfterTheFirstAreReconnects() {
        var m = Self.machine()
        #expect(m.enqueue([1, 2], now: 0).connect)
        _ = m.connected(now: 0)
        #expect(m.takeEvents().reconnects == 0)
        _ = m.closed(now: 1)
        var reconnected = false
        for t in stride(from: 1.0, through: 120.0, by: 0.25) where !reconnected { reconnected = m.tick(now: t).connect }
        #expect(reconnected)
        #expect(m.takeEvents().reconnects == 1)
    }

    @Test func refusedStreamIsReplayedOtherResetsAreAmbiguous() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2], now: 1)
        let r = m.reset(streamID: 3, refused: true, now: 1)
        #expect(r.writes.map(\.request.job) == [1])
        #expect(r.writes.first?.streamID == 7)
        let ambiguous = m.reset(streamID: 5, refused: false, now: 1)
        let e = m.takeEvents()
        #expect(e.replayed == 1 && e.ambiguous == 1)
        #expect(r.writes.map(\.request.ambiguousResends) == [0], "a refused stream was not processed")
        #expect(ambiguous.writes.map(\.request.ambiguousResends) == [1])
    }

    @Test func expiredProviderTokenRenewsOnceThenStops() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: 1)
        let first = m.response(streamID: 3, status: 403, reason: "ExpiredProviderToken", timestamp: nil, now: 1)
        #expect(first.renewToken)
        #expect(first.writes.map(\.request.job) == [1])
        #expect(first.settled.isEmpty)
        let second = m.response(streamID: 5, status: 403, reason: "ExpiredProviderToken", timestamp: nil, now: 1)
        #expect(!second.renewToken)
        #expect(second.credentialsRefused == "ExpiredProviderToken")
        #expect(second.reroute.map(\.job) == [1])
        #expect(second.close)
        #expect(!m.acceptsWork)
    }

    @Test func refusedCredentialsStopSendingAndReroute() {
        var m = Self.authenticated(cap: 2)
        _ = m.enqueue([1, 2, 3, 4], now: 1)  // 1, 2 on streams 3, 5; 3, 4 queued
        let a = m.response(streamID: 3, status: 403, reason: "InvalidProviderToken", timestamp: nil, now: 1)
        #expect(a.credentialsRefused == "InvalidProviderToken")
        #expect(Set(a.reroute.map(\.job)) == [1, 3, 4])
        #expect(a.writes.isEmpty && !a.close)  // stream 5 is still open: wait for its answer
        let b = m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: 1)
        #expect(b.settled.map(\.request.job) == [2])
        #expect(b.close)
        _ = m.closed(now: 2)
        #expect(m.phase == .waitingToReconnect(at: 62))
        // Nothing lost: everything is either settled or rerouted; after the delay it may try again.
        #expect(!m.acceptsWork)
        _ = m.tick(now: 62)
        #expect(m.acceptsWork)
    }

    @Test func suspendedWhileDrainingKeepsItsJobs() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: 1)
        _ = m.drain(now: 1)
        let a = m.response(streamID: 3, status: 429, reason: "TooManyProviderTokenUpdates", timestamp: nil, now: 1)
        #expect(a.reroute.isEmpty)
        #expect(m.queue.count == 1)
        #expect(!a.drained)
    }

    @Test func tooManyRequestsBacksOffThenGivesUp() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: 1)
        var stream: UInt32 = 3
        for attempt in 1...2 {
            let a = m.response(streamID: stream, status: 429, reason: "TooManyRequests", timestamp: nil, now: 10)
            #expect(a.writes.isEmpty && a.settled.isEmpty)
            #expect(m.tick(now: 10).writes.isEmpty)  // not due yet (delay > 0)
            let w = m.tick(now: 1000).writes
            #expect(w.map(\.request.job) == [1])
            #expect(w.first?.request.attempts == attempt + 1)
            stream = w[0].streamID
        }
        let last = m.response(streamID: stream, status: 429, reason: "TooManyRequests", timestamp: nil, now: 1000)
        #expect(last.settled.first?.delivery == .rejected(.transient(reason: "TooManyRequests")))
        #expect(last.settled.first?.code == "TooManyRequests")
        #expect(m.takeEvents().retried == 2)
    }

    @Test func serverErrorsRetryElsewhereBoundedThenTransient() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: 1)
        let a = m.response(streamID: 3, status: 503, reason: "ServiceUnavailable", timestamp: nil, now: 1)
        #expect(a.settled.isEmpty && a.reroute.isEmpty)
        let due = m.tick(now: 1000)
        #expect(due.reroute.map(\.job) == [1])
        #expect(due.reroute.first?.failures == 1)
        // Another connection adopts it with its history: the third failure ends it.
        var other = Self.authenticated()
        var r = due.reroute[0]
        r.failures = 2
        let w = other.adopt([r], now: 1000).writes
        let end = other.response(streamID: w[0].streamID, status: 500, reason: "InternalServerError", timestamp: nil, now: 1000)
        #expect(end.settled.first?.delivery == .rejected(.transient(reason: "InternalServerError")))
    }

    @Test func finalAnswersSettleWithMeaningAndCode() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2, 3], now: 1)
        let a = m.response(streamID: 3, status: 410, reason: "Unregistered", timestamp: 1_700_000_000_999, now: 1)
        #expect(a.settled.first?.delivery == .rejected(.invalidToken(since: 1_700_000_000, reason: "unregistered")))
        #expect(a.settled.first?.code == "Unregistered")
        let b = m.response(streamID: 5, status: 400, reason: "BadDeviceToken", timestamp: nil, now: 1)
        #expect(b.settled.first?.delivery == .rejected(.invalidToken(since: nil, reason: "invalid-token")))
        let c = m.response(streamID: 7, status: 413, reason: "PayloadTooLarge", timestamp: nil, now: 1)
        #expect(c.settled.first?.delivery == .rejected(.badRequest(reason: "PayloadTooLarge")))
    }

    @Test func stuckRequestClosesTheConnectionAndResendsAsAmbiguous() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: 100)
        #expect(!m.tick(now: 105).close)
        let t = m.tick(now: 110)
        #expect(t.close)
        _ = m.closed(now: 110)
        #expect(m.takeEvents().ambiguous == 1)
        #expect(m.queue.count == 1)
    }

    @Test func aSlowButAnsweringConnectionIsNotStuck() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2], now: 100)
        _ = m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: 108)
        // Stream 5 is 15 s old, but the connection answered 7 s ago: it is working, only slowly.
        #expect(!m.tick(now: 115).close)
        #expect(m.tick(now: 118).close)
    }

    @Test func idleConnectionPingsAndAnUnansweredPingCloses() {
        var m = Self.authenticated()
        #expect(!m.tick(now: 29).ping)
        #expect(m.tick(now: 30).ping)
        #expect(!m.tick(now: 31).ping)  // one outstanding at a time
        m.pingAnswered(now: 32)
        #expect(!m.tick(now: 33).close)
        #expect(m.tick(now: 62).ping)
        #expect(m.tick(now: 72).close)
    }

    @Test func drainWaitsForEveryAnswer() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2], now: 1)
        #expect(!m.drain(now: 1).close)
        #expect(!m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: 1).close)
        #expect(m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: 1).close)
        #expect(m.closed(now: 2).drained)
        #expect(m.phase == .closed)
    }

    @Test func drainOfAnIdleConnectionIsImmediate() {
        var m = Self.machine()
        #expect(m.drain(now: 0).drained)
    }

    @Test func streamIDsRunningOutRetireTheConnection() {
        var m = Self.authenticated()
        m.nextStreamID = Machine.lastUsableStreamID
        let a = m.enqueue([1, 2], now: 1)
        #expect(a.writes.map(\.streamID) == [Machine.lastUsableStreamID])
        #expect(!a.close)
        // The last id is used; the next request waits for a new connection, which opens at once.
        let b = m.response(streamID: Machine.lastUsableStreamID, status: 200, reason: nil, timestamp: nil, now: 1)
        #expect(b.close && b.writes.isEmpty)
        _ = m.closed(now: 1)
        #expect(m.takeEvents().ambiguous == 0)
        #expect(m.tick(now: 2).connect)
        #expect(m.connected(now: 2).writes.map(\.streamID) == [1])
    }

    /// The answer-latency value: each latency lands in the first bucket whose bound it does not
    /// exceed (bounds inclusive, as Prometheus' `le`), above every bound in the last one; values add
    /// up bucket by bucket with `+=`, as `SenderEvents` of several batches do.
    @Test func answerLatencyBucketsAndSums() {
        var a = GatewayAnswerLatency()
        #expect(a.isEmpty && GatewayAnswerLatency.bucketCount == GatewayAnswerLatency.upperBounds.count + 1)
        a.record(seconds: 0.0004)  // ≤ 1 ms: bucket 0
        a.record(seconds: 0.001)  // exactly 1 ms: still bucket 0
        a.record(seconds: 0.003)  // ≤ 5 ms: bucket 2
        a.record(seconds: 30)  // above 10 s: the last bucket
        a.record(seconds: -1)  // a clock step back counts as 0
        #expect(a.counts[0] == 3 && a.counts[2] == 1 && a.counts[13] == 1 && a.count == 5)
        #expect(a.nanoseconds[0] == 1_400_000 && a.nanoseconds[2] == 3_000_000 && a.nanoseconds[13] == 30_000_000_000)
        var b = GatewayAnswerLatency()
        b.record(seconds: 0.003)
        b.record(seconds: 0.2)  // ≤ 250 ms: bucket 7
        var events = SenderEvents()
        events.answerLatency = a
        var other = SenderEvents()
        other.answerLatency = b
        #expect(!other.isEmpty, "latencies alone make a batch's events worth reporting")
        events += other
        #expect(events.answerLatency.count == 7)
        #expect(events.answerLatency.counts[2] == 2 && events.answerLatency.nanoseconds[2] == 6_000_000)
        #expect(events.answerLatency.counts[7] == 1 && events.answerLatency.nanoseconds[7] == 200_000_000)
        #expect(events.answerLatency != a)
    }

    /// Every answer (whatever its status) records the time since its stream was written; a reset
    /// stream or an answer for a stream given up on records nothing.
    @Test func answersRecordTheirLatencyFromTheWrite() {
        var m = Self.authenticated()
        let w = m.enqueue(Array(1...3), now: 10).writes.map(\.streamID)
        _ = m.response(streamID: w[0], status: 200, reason: nil, timestamp: nil, now: 10.004)
        _ = m.response(streamID: w[1], status: 400, reason: "BadDeviceToken", timestamp: nil, now: 10.3)
        _ = m.reset(streamID: w[2], refused: true, now: 10.4)
        _ = m.response(streamID: w[2], status: 200, reason: nil, timestamp: nil, now: 10.5)
        let latency = m.takeEvents().answerLatency
        #expect(latency.count == 2)
        #expect(latency.counts[2] == 1, "4 ms: the ≤ 5 ms bucket")
        #expect(latency.counts[8] == 1, "300 ms: the ≤ 500 ms bucket")
        #expect(m.takeEvents().answerLatency.isEmpty, "taken once")
    }

    @Test func fifoKeepsOrderAndTakesItemsBackAtTheHead() {
        var q = FIFO<Int>()
        for i in 0..<10_000 { q.append(i) }
        for i in 0..<5_000 { #expect(q.popFirst() == i) }
        q.prepend(4_999)
        #expect(q.count == 5_001)
        #expect(q.popFirst() == 4_999)
        #expect(q.popFirst() == 5_000)
        #expect(q.removeAll().count == 4_999)
        #expect(q.isEmpty)
        q.prepend(1)
        #expect(q.popFirst() == 1)
    }
}
