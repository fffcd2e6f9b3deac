import GatewaySimulator
import NIOCore
import Testing

@testable import Sender

/// The per-connection logic without sockets: events in, actions out, times chosen by the test.
@Suite struct HTTP2ConnectionStateMachineTests {
    typealias Machine = HTTP2ConnectionStateMachine<Int>

    static func machine(
        cap: Int = 100, configure: (inout Machine.Configuration) -> Void = { _ in }
    ) -> Machine {
        var c = Machine.Configuration()
        c.streamCap = cap
        c.queueCapacity = 1000
        c.requestTimeout = .seconds(10)
        c.pingInterval = .seconds(30)
        c.budget.giveUpAfter = .seconds(60)
        c.authFailureDelay = .seconds(60)
        configure(&c)
        return Machine(configuration: c, random: SplitMix64(seed: 42))
    }

    /// A connected machine that already had one authenticated answer, with `max` server streams.
    static func authenticated(cap: Int = 100, serverMax: Int = 1000) -> Machine {
        var m = machine(cap: cap)
        _ = m.enqueue([0], now: .at(0))
        let w = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: serverMax, now: .at(0))
        _ = m.response(streamID: w[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(0))
        _ = m.takeEvents()
        return m
    }

    @Test func firstWorkConnectsAndOneStreamUntilAuthenticated() {
        var m = Self.machine()
        let a = m.enqueue(Array(1...5), now: .at(0))
        #expect(a.connect)
        #expect(a.writes.isEmpty)
        let c = m.connected(now: .at(0))
        #expect(c.writes.map(\.streamID) == [1])
        // A larger server limit does not open more streams before the credentials are proved.
        #expect(m.settings(maxConcurrentStreams: 1000, now: .at(0)).writes.isEmpty)
        let r = m.response(streamID: 1, status: 200, reason: nil, timestamp: nil, now: .at(1))
        #expect(r.settled.map(\.request.job) == [1])
        #expect(r.settled.first?.delivery == .accepted)
        #expect(r.writes.map(\.streamID) == [3, 5, 7, 9])
        #expect(r.writes.map(\.request.job) == [2, 3, 4, 5])
    }

    /// A queued request whose campaign is cancelled settles `cancelled` when its turn comes, without a
    /// stream; the rest are written in order.
    @Test func cancelledRequestsSettleWithoutAStream() {
        var c = Machine.Configuration()
        c.streamCap = 100
        c.queueCapacity = 1000
        var m = Machine(configuration: c, random: SplitMix64(seed: 42), instead: { $0 % 2 == 0 ? .cancelled : nil })
        _ = m.enqueue([1], now: .at(0))
        let first = m.connected(now: .at(0))
        _ = m.settings(maxConcurrentStreams: 1000, now: .at(0))
        _ = m.response(streamID: first.writes[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(0))
        let a = m.enqueue(Array(2...7), now: .at(1))
        #expect(a.writes.map(\.request.job) == [3, 5, 7])
        #expect(a.writes.map(\.streamID) == [3, 5, 7], "no stream id spent on a cancelled request")
        #expect(a.settled.map(\.request.job) == [2, 4, 6] && a.settled.allSatisfy { $0.delivery == .cancelled })
    }

    @Test func permitsAreTheSmallerOfServerLimitAndCap() {
        var m = Self.authenticated(cap: 3, serverMax: 1000)
        #expect(m.permits == 3)
        #expect(m.enqueue(Array(1...10), now: .at(1)).writes.count == 3)
        var n = Self.authenticated(cap: 100, serverMax: 2)
        #expect(n.permits == 2)
        #expect(n.enqueue(Array(1...10), now: .at(1)).writes.count == 2)
        // The server lowers its limit: no new stream until the open ones fall below it.
        _ = n.settings(maxConcurrentStreams: 1, now: .at(2))
        let r = n.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: .at(2))
        #expect(r.writes.isEmpty)
        #expect(n.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: .at(2)).writes.count == 1)
    }

    /// A read burst's answers settle as single answers would, and the freed streams are refilled in one
    /// action: in order, each request once, a stale answer ignored, the refused credential still stops
    /// the connection for the rest of the burst.
    @Test func aBurstOfAnswersSettlesEachAndRefillsOnce() {
        var m = Self.authenticated(cap: 3)
        #expect(m.enqueue(Array(1...8), now: .at(1)).writes.map(\.streamID) == [3, 5, 7])
        let burst = m.responses(
            [
                .init(streamID: 3, status: 200), .init(streamID: 5, status: 410, reason: "Unregistered", timestamp: 7000),
                .init(streamID: 3, status: 200),  // stale: already settled
                .init(streamID: 7, status: 200),
            ], now: .at(2))
        #expect(burst.settled.map(\.request.job) == [1, 2, 3])
        #expect(burst.settled[1].delivery == .rejected(.invalidToken(since: 7, reason: "unregistered")))
        #expect(burst.writes.map(\.streamID) == [9, 11, 13])
        #expect(burst.writes.map(\.request.job) == [4, 5, 6])

        let refused = m.responses(
            [
                .init(streamID: 9, status: 200), .init(streamID: 11, status: 403, reason: "InvalidProviderToken"),
                .init(streamID: 13, status: 200),
            ], now: .at(3))
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
        #expect(m.enqueue(Array(1...4), now: .at(1)).writes.map(\.streamID) == [3, 5])
        let last = m.responses([.init(streamID: 3, status: 200)], now: .at(2), refill: false)
        #expect(last.settled.map(\.request.job) == [1])
        #expect(last.writes.isEmpty)
        _ = m.closed(now: .at(2))
        #expect(m.takeEvents().ambiguous == 1)  // stream 5 only
        #expect(m.queue.count == 2 && m.delayed.count == 1)  // 3 and 4 queued, 2 (stream 5) backing off
    }

    @Test func goAwayResendsOnlyStreamsAboveLastStreamID() {
        var m = Self.authenticated()
        let w = m.enqueue(Array(1...4), now: .at(1)).writes.map(\.streamID)  // 3, 5, 7, 9
        #expect(w == [3, 5, 7, 9])
        let g = m.goAway(lastStreamID: 5, now: .at(2))
        #expect(g.writes.isEmpty && !g.close)
        #expect(m.takeEvents().replayed == 2)
        // New work waits; the processed streams still settle; then the connection closes.
        #expect(m.enqueue([5], now: .at(2)).writes.isEmpty)
        _ = m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: .at(2))
        let last = m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: .at(2))
        #expect(last.close)
        let closed = m.closed(now: .at(3))
        #expect(m.takeEvents().ambiguous == 0)
        #expect(!closed.connect)
        // Not at once: after a back-off of at least half the initial delay (the rest is jitter).
        guard case .waitingToReconnect(let at) = m.phase else {
            Issue.record("expected a back-off, got \(m.phase)")
            return
        }
        let initialDelay = TimeAmount(m.configuration.reconnect.initialDelay)
        #expect(at >= .at(3) + .nanoseconds(initialDelay.nanoseconds / 2) && at <= .at(3) + initialDelay)
        #expect(!m.tick(now: .at(3)).connect)
        #expect(m.tick(now: .at(100)).connect)
        let again = m.connected(now: .at(100)).writes
        // The resent ones go first, in their order, on a fresh stream 1.
        #expect(again.map(\.request.job) == [3])
        #expect(again.map(\.streamID) == [1])
        #expect(again[0].request.attempts == 2)
    }

    @Test func droppedConnectionResendsUnansweredAsAmbiguous() {
        var m = Self.authenticated()
        _ = m.enqueue(Array(1...3), now: .at(1))
        _ = m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: .at(1))
        _ = m.closed(now: .at(2))
        let e = m.takeEvents()
        #expect(e.ambiguous == 2)
        #expect(e.replayed == 0)
        #expect(e.retriedBy[.connectionLost] == 2)
        // They wait for their back-off, holding no place in the queue.
        #expect(m.queue.isEmpty && m.delayed.count == 2)
        // A late answer for a stream of the dead connection is not settled twice.
        #expect(m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: .at(2)).settled.isEmpty)
        // The resends carry it (to their outcomes, where the pipeline counts it per campaign).
        #expect(m.tick(now: .at(100)).connect)
        // (One stream until the new connection is authenticated.)
        #expect(m.connected(now: .at(100)).writes.map(\.request.ambiguousResends) == [1])
    }

    /// `reconnects` counts connections after the first (the demo showed one per connection before).
    @Test func onlyConnectionsAfterTheFirstAreReconnects() {
        var m = Self.machine()
        #expect(m.enqueue([1, 2], now: .at(0)).connect)
        _ = m.connected(now: .at(0))
        #expect(m.takeEvents().reconnects == 0)
        _ = m.closed(now: .at(1))
        var reconnected = false
        for t in stride(from: 1.0, through: 120.0, by: 0.25) where !reconnected { reconnected = m.tick(now: .at(t)).connect }
        #expect(reconnected)
        #expect(m.takeEvents().reconnects == 1)
    }

    @Test func refusedStreamIsReplayedOtherResetsAreAmbiguous() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2], now: .at(1))
        let r = m.reset(streamID: 3, refused: true, now: .at(1))
        #expect(r.writes.map(\.request.job) == [1])
        #expect(r.writes.first?.streamID == 7)
        let ambiguous = m.reset(streamID: 5, refused: false, now: .at(1))
        let e = m.takeEvents()
        #expect(e.replayed == 1 && e.ambiguous == 1)
        #expect(e.retriedBy[.refusedStream] == 1 && e.retriedBy[.reset] == 1)
        #expect(r.writes.map(\.request.ambiguousResends) == [0], "a refused stream was not processed")
        // A reset that may have been processed is not resent at once (the hot loop of issue 28)…
        #expect(ambiguous.writes.isEmpty)
        #expect(m.tick(now: .at(1.01)).writes.isEmpty)
        // …but after its back-off.
        let later = m.tick(now: .at(2)).writes
        #expect(later.map(\.request.job) == [2])
        #expect(later.map(\.request.ambiguousResends) == [1])
    }

    /// A server that resets every stream: each resend of the job waits longer than the one before,
    /// and after `give_up_after_s` the job is dead-lettered `gateway-gave-up`: bounded attempts.
    @Test func resetEveryStreamBacksOffThenGivesUpByTime() {
        var m = Self.machine { $0.budget.giveUpAfter = .seconds(30) }
        _ = m.enqueue([1], now: .at(0))
        var w = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: 100, now: .at(0))
        var now = 0.0
        var sentAt: [Double] = [0]
        var settled: [Machine.Settled] = []
        while settled.isEmpty && now < 1000 {
            let r = m.reset(streamID: w[0].streamID, refused: false, now: .at(now))
            settled = r.settled
            w = []
            while w.isEmpty && settled.isEmpty && now < 1000 {
                now += 0.01
                w = m.tick(now: .at(now)).writes
            }
            if !w.isEmpty { sentAt.append(now) }
        }
        #expect(settled.first?.delivery == .rejected(.transient(reason: "gateway-gave-up")))
        #expect(settled.first?.code == "gateway-gave-up")
        let gaps = zip(sentAt.dropFirst(), sentAt).map { $0 - $1 }
        // Bounded by time: 30 s of exponential back-off from 0.2 s is a handful of attempts.
        #expect(sentAt.count < 15)
        #expect(gaps.count > 4)
        // Each wait is at least the half of its base that is not random, which doubles.
        for (i, g) in gaps.prefix(5).enumerated() { #expect(g >= 0.1 * Double(1 << i)) }
        #expect(now >= 30)
        let e = m.takeEvents()
        #expect(e.gaveUp == 1)
        #expect(e.retriedBy[.reset] == sentAt.count - 1)
    }

    /// REFUSED_STREAM (and GOAWAY) resends go again at once the first time, then back off.
    @Test func repeatedRefusedStreamsBackOff() {
        var m = Self.authenticated()
        let w = m.enqueue([1], now: .at(1)).writes
        let first = m.reset(streamID: w[0].streamID, refused: true, now: .at(1))
        #expect(first.writes.map(\.request.job) == [1])
        let second = m.reset(streamID: first.writes[0].streamID, refused: true, now: .at(1))
        #expect(second.writes.isEmpty && second.settled.isEmpty)
        #expect(m.delayed.count == 1)
        #expect(m.tick(now: .at(2)).writes.map(\.request.job) == [1])
    }

    /// A server refusing every stream (REFUSED_STREAM) for longer than `give_up_after_s`: the job is
    /// resent with a growing back-off, then dead-lettered `gateway-gave-up` like a 5xx retry.
    @Test func refusedStreamsForeverGiveUpByTime() {
        var m = Self.machine { $0.budget.giveUpAfter = .seconds(30) }
        _ = m.enqueue([1], now: .at(0))
        var w = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: 100, now: .at(0))
        var now = 0.0
        var attempts = 1
        var settled: [Machine.Settled] = []
        while settled.isEmpty && now < 1000 {
            let r = m.reset(streamID: w[0].streamID, refused: true, now: .at(now))
            settled = r.settled
            w = r.writes
            while w.isEmpty && settled.isEmpty && now < 1000 {
                now += 0.05
                let t = m.tick(now: .at(now))
                w = t.writes
                settled = t.settled
            }
            if !w.isEmpty { attempts += 1 }
        }
        #expect(settled.first?.delivery == .rejected(.transient(reason: "gateway-gave-up")))
        #expect(now >= 30 && now < 31)
        #expect(attempts < 16, "a back-off, not a hot loop: \(attempts) attempts")
        let e = m.takeEvents()
        #expect(e.gaveUp == 1 && e.retriedBy[.refusedStream] == attempts - 1)
    }

    /// A job above a GOAWAY's last stream id is resent on the next connection; when that connection
    /// comes only after the job's `apns-expiration`, it is dead-lettered `expired`, not written.
    @Test func aGoAwayResendPastItsExpirationIsNotWritten() {
        var c = Machine.Configuration()
        c.streamCap = 10
        c.reconnect.initialDelay = .seconds(5)
        c.reconnect.jitter = 0
        var m = Machine(configuration: c, random: SplitMix64(seed: 1), expiry: { $0 >= 1_000_000 ? UInt32($0) : 0 })
        m.wallClockOffset = .seconds(1_000_000)
        _ = m.enqueue([0], now: .at(0))
        let w0 = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: 100, now: .at(0))
        _ = m.response(streamID: w0[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(0))
        // Job 1_000_002 expires 2 s from now, job 7 never.
        let w = m.enqueue([1_000_002, 7], now: .at(0)).writes
        #expect(w.count == 2)
        let g = m.goAway(lastStreamID: w0[0].streamID, now: .at(0.5))
        #expect(g.settled.isEmpty && g.close)
        _ = m.closed(now: .at(0.5))
        // The reconnect comes 5 s later: past the first job's expiration.
        var writes: [Machine.Write] = []
        var settled: [Machine.Settled] = []
        for t in stride(from: 0.5, through: 10, by: 0.1) {
            let a = m.tick(now: .at(t))
            settled += a.settled
            if a.connect {
                let c = m.connected(now: .at(t))
                writes += c.writes
                settled += c.settled
            }
        }
        #expect(settled.map(\.request.job) == [1_000_002])
        #expect(settled.first?.delivery == .rejected(.transient(reason: "expired")))
        #expect(writes.map(\.request.job) == [7])
        #expect(m.takeEvents().gaveUp == 1)
    }

    /// A job whose `apns-expiration` comes before the give-up time is dead-lettered `expired`
    /// rather than sent after it.
    @Test func aJobExpiringWhileItWaitsIsDeadLetteredExpired() {
        var c = Machine.Configuration()
        c.budget.giveUpAfter = .seconds(3600)
        var m = Machine(configuration: c, random: SplitMix64(seed: 1), expiry: { UInt32($0) })
        m.wallClockOffset = .seconds(1_000_000)
        _ = m.enqueue([1_000_003], now: .at(0))  // expires 3 s after the start
        let w = m.connected(now: .at(0)).writes
        _ = m.reset(streamID: w[0].streamID, refused: false, now: .at(0))
        var settled: [Machine.Settled] = []
        var now = 0.0
        while settled.isEmpty && now < 10 {
            now += 0.05
            let t = m.tick(now: .at(now))
            settled = t.settled
            for x in t.writes { settled += m.reset(streamID: x.streamID, refused: false, now: .at(now)).settled }
        }
        #expect(settled.first?.delivery == .rejected(.transient(reason: "expired")))
        #expect(now <= 3.1)
    }

    @Test func expiredProviderTokenRenewsOnceThenStops() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: .at(1))
        let first = m.response(streamID: 3, status: 403, reason: "ExpiredProviderToken", timestamp: nil, now: .at(1))
        #expect(first.renewToken)
        #expect(first.writes.map(\.request.job) == [1])
        #expect(first.settled.isEmpty)
        let second = m.response(streamID: 5, status: 403, reason: "ExpiredProviderToken", timestamp: nil, now: .at(1))
        #expect(!second.renewToken)
        #expect(second.credentialsRefused == "ExpiredProviderToken")
        #expect(second.reroute.map(\.job) == [1])
        #expect(second.close)
        #expect(!m.acceptsWork)
    }

    @Test func refusedCredentialsStopSendingAndReroute() {
        var m = Self.authenticated(cap: 2)
        _ = m.enqueue([1, 2, 3, 4], now: .at(1))  // 1, 2 on streams 3, 5; 3, 4 queued
        let a = m.response(streamID: 3, status: 403, reason: "InvalidProviderToken", timestamp: nil, now: .at(1))
        #expect(a.credentialsRefused == "InvalidProviderToken")
        #expect(Set(a.reroute.map(\.job)) == [1, 3, 4])
        #expect(a.writes.isEmpty && !a.close)  // stream 5 is still open: wait for its answer
        let b = m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: .at(1))
        #expect(b.settled.map(\.request.job) == [2])
        #expect(b.close)
        _ = m.closed(now: .at(2))
        #expect(m.phase == .waitingToReconnect(at: .at(62)))
        // Nothing lost: everything is either settled or rerouted; after the delay it may try again.
        #expect(!m.acceptsWork)
        _ = m.tick(now: .at(62))
        #expect(m.acceptsWork)
    }

    /// A connect refused for good (a proxy refusing our credentials, a server without h2, a certificate
    /// that does not verify): the queue goes to the other connections, the connection waits
    /// `authFailureDelay` (not its reconnect back-off), and it does not count as up until a connect
    /// succeeds, even idle. While draining its queue stays with it.
    @Test func aRefusedConnectStopsTheConnectionForTheAuthFailureDelay() {
        var m = Self.machine()  // authFailureDelay 60
        #expect(m.enqueue([1, 2, 3], now: .at(0)).connect)
        let r = m.connectRefused(now: .at(0))
        #expect(r.connectRefused)
        #expect(Set(r.reroute.map(\.job)) == [1, 2, 3])
        #expect(!m.acceptsWork && m.refused)
        _ = m.connectFailed(now: .at(0))
        #expect(m.phase == .waitingToReconnect(at: .at(60)))
        #expect(!m.tick(now: .at(59)).connect)
        _ = m.tick(now: .at(60))
        #expect(m.acceptsWork && m.refused, "it takes work again, but is not up")
        #expect(m.enqueue([4], now: .at(61)).connect)
        _ = m.connected(now: .at(61))
        #expect(!m.refused)

        var d = Self.machine()
        _ = d.enqueue([1], now: .at(0))
        _ = d.drain(now: .at(0))
        let dr = d.connectRefused(now: .at(0))
        #expect(dr.reroute.isEmpty && d.queue.count == 1)
        _ = d.connectFailed(now: .at(0))
        #expect(d.phase == .waitingToReconnect(at: .at(60)))
    }

    @Test func suspendedWhileDrainingKeepsItsJobs() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: .at(1))
        _ = m.drain(now: .at(1))
        let a = m.response(streamID: 3, status: 429, reason: "TooManyProviderTokenUpdates", timestamp: nil, now: .at(1))
        #expect(a.reroute.isEmpty)
        #expect(m.queue.count == 1)
        #expect(!a.drained)
    }

    @Test func tooManyRequestsBacksOffUntilTheGiveUpTime() {
        var m = Self.authenticated()  // give up after 60 s
        _ = m.enqueue([1], now: .at(10))
        var stream: UInt32 = 3
        for attempt in 1...3 {
            let a = m.response(streamID: stream, status: 429, reason: "TooManyRequests", timestamp: nil, now: .at(10 + Double(attempt)))
            #expect(a.writes.isEmpty && a.settled.isEmpty)
            #expect(m.tick(now: .at(10 + Double(attempt))).writes.isEmpty)  // not due yet (delay > 0)
            let w = m.tick(now: .at(11 + Double(attempt))).writes
            #expect(w.map(\.request.job) == [1])
            #expect(w.first?.request.attempts == attempt + 1)
            stream = w[0].streamID
        }
        // Past the give-up time (60 s after the first failure at 11): dead-lettered.
        let last = m.response(streamID: stream, status: 429, reason: "TooManyRequests", timestamp: nil, now: .at(72))
        #expect(last.settled.first?.delivery == .rejected(.transient(reason: "gateway-gave-up")))
        let e = m.takeEvents()
        #expect(e.retried == 3 && e.retriedBy[.tooManyRequests] == 3 && e.gaveUp == 1)
    }

    @Test func serverErrorsRetryElsewhereUntilTheGiveUpTime() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: .at(1))
        let a = m.response(streamID: 3, status: 503, reason: "ServiceUnavailable", timestamp: nil, now: .at(1))
        #expect(a.settled.isEmpty && a.reroute.isEmpty)
        let due = m.tick(now: .at(30))
        #expect(due.reroute.map(\.job) == [1])
        #expect(due.reroute.first?.failures == 1)
        // Another connection adopts it with its history (and its deadline: 60 s after 1).
        var other = Self.authenticated()
        let w = other.adopt(due.reroute, now: .at(30)).writes
        let again = other.response(streamID: w[0].streamID, status: 500, reason: "InternalServerError", timestamp: nil, now: .at(30))
        #expect(again.settled.isEmpty, "within its budget: retried, not dead-lettered")
        let w2 = other.tick(now: .at(59)).reroute
        #expect(w2.map(\.job) == [1])
        var third = Self.authenticated()
        let w3 = third.adopt(w2, now: .at(61)).writes
        let end = third.response(streamID: w3[0].streamID, status: 500, reason: "InternalServerError", timestamp: nil, now: .at(61))
        #expect(end.settled.first?.delivery == .rejected(.transient(reason: "gateway-gave-up")))
    }

    /// Answers every open stream, oldest first, with `status(job, streams open when it was written)`,
    /// feeding new jobs as streams free up, for `answers` answers; returns the permits before each.
    static func serve(
        _ m: inout Machine, answers: Int, from start: Int = 1_000, status: (Int, Int) -> Int
    ) -> [Int] {
        var open: [(stream: UInt32, job: Int, load: Int)] = []
        var permits: [Int] = []
        var next = start
        func take(_ a: Machine.Action) {
            for w in a.writes { open.append((w.streamID, w.request.job, open.count + 1)) }
        }
        take(m.enqueue(Array(next..<next + 200), now: .at(1)))
        next += 200
        for _ in 0..<answers {
            permits.append(m.permits)
            guard !open.isEmpty else { break }
            let x = open.removeFirst()
            let code = status(x.job, x.load)
            take(
                m.response(streamID: x.stream, status: code, reason: code == 200 ? nil : "ServiceUnavailable", timestamp: nil, now: .at(1)))
            if m.queue.count < 100 {
                take(m.enqueue(Array(next..<next + 200), now: .at(1)))
                next += 200
            }
        }
        return permits
    }

    /// A random 30 % of 503 (not depending on the streams open): the connection keeps its streams (one
    /// probe at half of them, then back), retries each job, and is never paused.
    @Test func aRandomShareOf503KeepsTheStreams() {
        var m = Self.authenticated(cap: 16)
        var random = SplitMix64(seed: 4)
        let permits = Self.serve(&m, answers: 20_000) { _, _ in Double.random(in: 0..<1, using: &random) < 0.3 ? 503 : 200 }
        #expect(permits.filter { $0 == 16 }.count > permits.count * 95 / 100)
        #expect(permits.min() == 8, "one halving: the probe")
        #expect(m.permits == 16)
        #expect(m.breaker.state == .closed)
        #expect(m.takeEvents().retriedBy[.serverError] > 5_000)
    }

    /// A server overloaded past 6 open streams (a request that finds `n` open, counting itself, is
    /// answered 503 with a chance of (n - 6) / n): the share rises with the streams, so they shrink,
    /// and the share falls.
    @Test func a503ShareRisingWithTheStreamsShrinksThem() {
        var m = Self.machine(cap: 16) { $0.window.sampleAnswers = 100 }
        _ = m.enqueue([0], now: .at(0))
        let w = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: 1000, now: .at(0))
        _ = m.response(streamID: w[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(0))
        var statuses: [Int] = []
        var random = SplitMix64(seed: 8)
        let permits = Self.serve(&m, answers: 20_000) { _, load in
            statuses.append(Double.random(in: 0..<1, using: &random) < Double(max(0, load - 6)) / Double(load) ? 503 : 200)
            return statuses.last!
        }
        let late = permits.suffix(10_000)
        let mean = Double(late.reduce(0, +)) / Double(late.count)
        #expect(mean < 12, "mean streams \(mean) of 16")
        let share = { (s: ArraySlice<Int>) in Double(s.filter { $0 == 503 }.count) / Double(s.count) }
        #expect(share(statuses.prefix(100)) > 0.4)
        #expect(share(statuses.suffix(10_000)) < 0.35, "503 share now \(share(statuses.suffix(10_000)))")
    }

    /// Streams unanswered past their deadline halve the window (load: the server or the path cannot
    /// answer so many in time).
    @Test func aTimeoutShrinksTheStreams() {
        var m = Self.authenticated(cap: 16)
        _ = m.enqueue(Array(1...16), now: .at(100))
        _ = m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: .at(105))
        #expect(m.permits == 16)
        let t = m.tick(now: .at(111))
        #expect(t.cancel.count == 15)
        #expect(m.permits == 8)
    }

    /// Four streams, a 1 s back-off without jitter; jobs 100…199 are token 1, 200…299 token 2. Connected
    /// at 0, and job 100 (token 1) answered 429 TooManyRequests: token 1 is held until 1 s.
    static func tokenOneAnswered429() -> (Machine, Machine.Action) {
        var c = Machine.Configuration()
        c.streamCap = 4
        c.budget.backoff.initialDelay = .seconds(1)
        c.budget.backoff.jitter = 0
        var m = Machine(configuration: c, random: SplitMix64(seed: 1), token: { UInt64($0 / 100) })
        _ = m.enqueue([100], now: .at(0))
        let first = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: 100, now: .at(0))
        let a = m.response(streamID: first[0].streamID, status: 429, reason: "TooManyRequests", timestamp: nil, now: .at(0))
        return (m, a)
    }

    /// 429 TooManyRequests is about one device token: that token's later jobs wait out its back-off
    /// with it, every other token's go on, and the connection keeps all its streams.
    @Test func tooManyRequestsHoldsItsTokenOnly() {
        var (m, a) = Self.tokenOneAnswered429()
        #expect(a.settled.isEmpty && a.writes.isEmpty)
        #expect(m.tokenHolds.count == 1)
        // (A 429 proves the credentials: all four streams.) Another token's job goes at once.
        let b = m.enqueue([200], now: .at(0.1))
        #expect(b.writes.map(\.request.job) == [200])
        _ = m.response(streamID: b.writes[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(0.1))
        #expect(m.permits == 4, "the 429 did not shrink the window")
        // Token 1's next jobs wait for its hold (with the job that got the 429); token 2's go.
        let c2 = m.enqueue([101, 201, 102, 202], now: .at(0.2))
        #expect(c2.writes.map(\.request.job) == [201, 202])
        for w in c2.writes { _ = m.response(streamID: w.streamID, status: 200, reason: nil, timestamp: nil, now: .at(0.3)) }
        #expect(m.tick(now: .at(0.9)).writes.isEmpty)
        let due = m.tick(now: .at(1.0)).writes
        #expect(due.map(\.request.job) == [100, 101, 102])
        #expect(due.map(\.request.attempts) == [2, 1, 1])
        let e = m.takeEvents()
        #expect(e.retriedBy[.tooManyRequests] == 1)
        // The holds are forgotten once passed.
        _ = m.tick(now: .at(3))
        #expect(m.tokenHolds.isEmpty)
    }

    /// Work handed to a connection with less to do leaves behind the jobs of a token held after a 429:
    /// the hold is this connection's, and elsewhere they would be written at once.
    @Test func aHandOverKeepsTheJobsOfAHeldToken() {
        var (m, _) = Self.tokenOneAnswered429()
        #expect(m.tokenHolds.count == 1)
        // Four streams busy, then four jobs queued: two of the held token, two of the other.
        #expect(m.enqueue([201, 202, 203, 204], now: .at(0.1)).writes.count == 4)
        #expect(m.enqueue([101, 205, 102, 206], now: .at(0.1)).writes.isEmpty)
        let handed = m.handOver(count: 4, now: .at(0.2))
        #expect(handed.map(\.job) == [205, 206])
        #expect(m.queue.bulk.count == 2, "token 1's jobs stay, held")
        // Past the hold, they are written here.
        for id in Array(m.inFlight.keys) { _ = m.response(streamID: id, status: 200, reason: nil, timestamp: nil, now: .at(0.5)) }
        let due = m.tick(now: .at(1.0)).writes.map(\.request.job)
        #expect(due.contains(101) && due.contains(102))
    }

    /// A connection whose breaker judges every 4 answers and pauses 5 s, `queued` waiting, connected at
    /// 0 with the server's 100 streams; and what it wrote first.
    static func breakerMachine(cap: Int, queued: [Int]) -> (Machine, [Machine.Write]) {
        var m = machine(cap: cap) {
            $0.breaker.window = 4
            $0.breaker.openFor = .seconds(5)
        }
        _ = m.enqueue(queued, now: .at(0))
        let writes = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: 100, now: .at(0))
        return (m, writes)
    }

    /// Mostly 5xx: the connection stops taking work and hands its queue to the others, then one
    /// probe; a good answer to it opens it up again.
    @Test func mostly5xxOpensTheBreakerThenAProbeClosesIt() {
        var (m, w) = Self.breakerMachine(cap: 2, queued: Array(1...10))
        var opened: Machine.Action?
        var t = 0.0
        while opened == nil, let x = w.first {
            t += 0.001
            let a = m.response(streamID: x.streamID, status: 503, reason: "ServiceUnavailable", timestamp: nil, now: .at(t))
            w = Array(w.dropFirst()) + a.writes
            if a.breakerOpened { opened = a }
        }
        #expect(opened != nil)
        #expect(!m.acceptsWork)
        #expect(!(opened?.reroute.isEmpty ?? true), "its queue goes to the other connections")
        #expect(m.enqueue([11], now: .at(t)).writes.isEmpty, "nothing is written while it is open")
        for x in w { _ = m.response(streamID: x.streamID, status: 200, reason: nil, timestamp: nil, now: .at(t)) }
        let probe = m.tick(now: .at(t + 5)).writes
        #expect(probe.count == 1, "one probe")
        #expect(m.acceptsWork)
        let good = m.response(streamID: probe[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(t + 5))
        #expect(m.breaker.state == .closed)
        #expect(good.hostRecovered, "the other connections to the host are told")
        // The host is back: the whole window at once, whatever the 503s did to it.
        #expect(m.window.isFull)
        #expect(m.enqueue([12, 13], now: .at(t + 5)).writes.count == 2)
    }

    /// Another connection's probe found the host answering: a pause under way ends at once, and the
    /// next request is this connection's probe (one stream until it is answered).
    @Test func anotherConnectionsGoodProbeEndsThePause() {
        var (m, w) = Self.breakerMachine(cap: 4, queued: Array(1...20))
        while !m.breaker.isOpen, let x = w.first {
            w = Array(w.dropFirst()) + m.response(streamID: x.streamID, status: 503, reason: nil, timestamp: nil, now: .at(1)).writes
        }
        for x in w { _ = m.response(streamID: x.streamID, status: 503, reason: nil, timestamp: nil, now: .at(1)) }
        #expect(m.breaker.isOpen)
        _ = m.enqueue([21, 22], now: .at(1.5))  // its own queue went to the others when it opened; new work came
        let a = m.hostAnswers(now: .at(2))  // long before its own 5 s were up
        #expect(m.breaker.state == .halfOpen)
        #expect(a.writes.map(\.request.job) == [21], "one probe")
        _ = m.response(streamID: a.writes[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(2))
        #expect(m.breaker.state == .closed && m.permits == 4)
    }

    /// Another connection's good probe comes while this one's probe is in flight, and the 503 to it
    /// (sent before the host came back) arrives after: one more probe at once, not a doubled pause
    /// while the other connection carries all the work; a second 503 opens the breaker again.
    @Test func aProbeAnswered503AfterTheHostCameBackIsTriedAgain() {
        var (m, w) = Self.breakerMachine(cap: 4, queued: Array(1...20))
        while !m.breaker.isOpen, let x = w.first {
            w = Array(w.dropFirst()) + m.response(streamID: x.streamID, status: 503, reason: nil, timestamp: nil, now: .at(1)).writes
        }
        for x in w { _ = m.response(streamID: x.streamID, status: 503, reason: nil, timestamp: nil, now: .at(1)) }
        _ = m.enqueue([21, 22, 23], now: .at(1.2))
        let probe = m.tick(now: .at(6.5)).writes
        #expect(probe.map(\.request.job) == [21] && m.breaker.state == .halfOpen)
        #expect(m.hostAnswers(now: .at(6.6)).writes.isEmpty, "its probe is still in flight")
        let late = m.response(streamID: probe[0].streamID, status: 503, reason: nil, timestamp: nil, now: .at(6.7))
        #expect(!late.breakerOpened && m.breaker.state == .halfOpen)
        #expect(late.writes.map(\.request.job) == [22], "the next probe at once")
        let again = m.response(streamID: late.writes[0].streamID, status: 503, reason: nil, timestamp: nil, now: .at(6.8))
        #expect(again.breakerOpened && m.breaker.isOpen, "a host that still fails it pauses it again")
    }

    /// A connection with more queued than its share hands the newest of its bulk queue over, in
    /// order; the priority lane's stay; nothing while draining.
    @Test func handOverGivesTheNewestBulkRequests() {
        var m = Self.machine(cap: 1)
        _ = m.enqueue(Array(1...10), now: .at(0))
        _ = m.enqueue([100], lane: .priority, now: .at(0))
        #expect(m.handOver(count: 4, now: .at(0)).map(\.job) == [7, 8, 9, 10])
        #expect(m.queue.count == 7 && m.queue.priority.count == 1)
        #expect(m.handOver(count: 50, now: .at(0)).map(\.job) == Array(1...6))
        var d = Self.machine()
        _ = d.enqueue([1, 2], now: .at(0))
        _ = d.drain(now: .at(0))
        #expect(d.handOver(count: 1, now: .at(0)).isEmpty)
    }

    @Test func finalAnswersSettleWithMeaningAndCode() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2, 3], now: .at(1))
        let a = m.response(streamID: 3, status: 410, reason: "Unregistered", timestamp: 1_700_000_000_999, now: .at(1))
        #expect(a.settled.first?.delivery == .rejected(.invalidToken(since: 1_700_000_000, reason: "unregistered")))
        #expect(a.settled.first?.code == "Unregistered")
        let b = m.response(streamID: 5, status: 400, reason: "BadDeviceToken", timestamp: nil, now: .at(1))
        #expect(b.settled.first?.delivery == .rejected(.invalidToken(since: nil, reason: "invalid-token")))
        let c = m.response(streamID: 7, status: 413, reason: "PayloadTooLarge", timestamp: nil, now: .at(1))
        #expect(c.settled.first?.delivery == .rejected(.badRequest(reason: "PayloadTooLarge")))
    }

    @Test func stuckRequestClosesTheConnectionAndResendsAsAmbiguous() {
        var m = Self.authenticated()
        _ = m.enqueue([1], now: .at(100))
        #expect(!m.tick(now: .at(105)).close)
        let t = m.tick(now: .at(110))
        #expect(t.close)
        _ = m.closed(now: .at(110))
        #expect(m.takeEvents().ambiguous == 1)
        #expect(m.delayed.count == 1)
    }

    /// One stream never answered while the connection answers others: that stream alone is reset
    /// and resent after its back-off; the connection stays.
    @Test func aStreamUnansweredPastItsDeadlineIsResetAlone() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2], now: .at(100))
        _ = m.enqueue([3], now: .at(105))
        _ = m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: .at(108))
        #expect(m.tick(now: .at(109)).cancel.isEmpty)
        // Stream 5 is past 10 s, but the connection answered since: only the stream is given up on
        // (the open streams are looked at every quarter of the timeout: here at 109, then 111.5).
        #expect(m.tick(now: .at(110)).cancel.isEmpty)
        let t = m.tick(now: .at(111.5))
        #expect(!t.close)
        #expect(t.cancel == [5])
        #expect(m.inFlight.keys.sorted() == [7])
        let e = m.takeEvents()
        #expect(e.ambiguous == 1 && e.retriedBy[.streamTimeout] == 1)
        // The late answer of the reset stream is ignored; the resend goes out after its back-off.
        #expect(m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: .at(111.51)).settled.isEmpty)
        let again = m.tick(now: .at(112)).writes
        #expect(again.map(\.request.job) == [2])
        #expect(again.first?.request.ambiguousResends == 1)
        #expect(m.tick(now: .at(114)).cancel.isEmpty)
    }

    @Test func idleConnectionPingsAndAnUnansweredPingCloses() {
        var m = Self.authenticated()
        #expect(!m.tick(now: .at(29)).ping)
        #expect(m.tick(now: .at(30)).ping)
        #expect(!m.tick(now: .at(31)).ping)  // one outstanding at a time
        m.pingAnswered(now: .at(32))
        #expect(!m.tick(now: .at(33)).close)
        #expect(m.tick(now: .at(62)).ping)
        #expect(m.tick(now: .at(72)).close)
    }

    @Test func drainWaitsForEveryAnswer() {
        var m = Self.authenticated()
        _ = m.enqueue([1, 2], now: .at(1))
        #expect(!m.drain(now: .at(1)).close)
        #expect(!m.response(streamID: 3, status: 200, reason: nil, timestamp: nil, now: .at(1)).close)
        #expect(m.response(streamID: 5, status: 200, reason: nil, timestamp: nil, now: .at(1)).close)
        #expect(m.closed(now: .at(2)).drained)
        #expect(m.phase == .closed)
    }

    @Test func drainOfAnIdleConnectionIsImmediate() {
        var m = Self.machine()
        #expect(m.drain(now: .at(0)).drained)
    }

    @Test func streamIDsRunningOutRetireTheConnection() {
        var m = Self.authenticated()
        m.nextStreamID = Machine.lastUsableStreamID
        let a = m.enqueue([1, 2], now: .at(1))
        #expect(a.writes.map(\.streamID) == [Machine.lastUsableStreamID])
        #expect(!a.close)
        // The last id is used; the next request waits for a new connection, which opens at once.
        let b = m.response(streamID: Machine.lastUsableStreamID, status: 200, reason: nil, timestamp: nil, now: .at(1))
        #expect(b.close && b.writes.isEmpty)
        _ = m.closed(now: .at(1))
        #expect(m.takeEvents().ambiguous == 0)
        #expect(m.tick(now: .at(2)).connect)
        #expect(m.connected(now: .at(2)).writes.map(\.streamID) == [1])
    }

    /// The answer-latency value: each latency lands in the first bucket whose bound it does not
    /// exceed (bounds inclusive, as Prometheus' `le`), above every bound in the last one; values add
    /// up bucket by bucket with `+=`, as `SenderEvents` of several batches do.
    @Test func answerLatencyBucketsAndSums() {
        var a = GatewayAnswerLatency()
        #expect(a.isEmpty && GatewayAnswerLatency.bucketCount == GatewayAnswerLatency.upperBounds.count + 1)
        a.record(.microseconds(400))  // ≤ 1 ms: bucket 0
        a.record(.milliseconds(1))  // exactly 1 ms: still bucket 0
        a.record(.milliseconds(3))  // ≤ 5 ms: bucket 2
        a.record(.seconds(30))  // above 10 s: the last bucket
        a.record(.seconds(-1))  // a clock step back counts as 0
        #expect(a.counts[0] == 3 && a.counts[2] == 1 && a.counts[13] == 1 && a.count == 5)
        #expect(a.nanoseconds[0] == 1_400_000 && a.nanoseconds[2] == 3_000_000 && a.nanoseconds[13] == 30_000_000_000)
        var b = GatewayAnswerLatency()
        b.record(.milliseconds(3))
        b.record(.milliseconds(200))  // ≤ 250 ms: bucket 7
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
        let w = m.enqueue(Array(1...3), now: .at(10)).writes.map(\.streamID)
        _ = m.response(streamID: w[0], status: 200, reason: nil, timestamp: nil, now: .at(10.004))
        _ = m.response(streamID: w[1], status: 400, reason: "BadDeviceToken", timestamp: nil, now: .at(10.3))
        _ = m.reset(streamID: w[2], refused: true, now: .at(10.4))
        _ = m.response(streamID: w[2], status: 200, reason: nil, timestamp: nil, now: .at(10.5))
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
