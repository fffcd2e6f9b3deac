import GatewaySimulator
import NIOCore
import Testing

@testable import Sender

/// The retry policy's pieces on their own: back-off and give-up time, AIMD, the circuit breaker,
/// the queue of due retries.
@Suite struct RetryPolicyTests {
    @Test func backOffGrowsAndTheBudgetEndsByTime() {
        var budget = RetryBudget()
        budget.giveUpAfter = .seconds(100)
        var random = SplitMix64(seed: 7)
        let deadline = budget.deadline(firstFailureAt: .at(10), expiry: 0, wallNow: .seconds(1_700_000_000))
        #expect(deadline == RetryBudget.Deadline(at: .at(110), byExpiry: false))
        var now = NIODeadline.at(10)
        var waits: [TimeAmount] = []
        var failures = 1
        while case .retry(let at) = budget.next(failures: failures, now: now, deadline: deadline, random: &random) {
            #expect(at > now && at <= .at(110))
            waits.append(at - now)
            now = at
            failures += 1
        }
        #expect(budget.next(failures: failures, now: now, deadline: deadline, random: &random) == .giveUp)
        #expect(now == .at(110), "the last wait is cut so one attempt is made at the give-up time")
        // Each wait lies within [½, 1] × 0.2 s × 2^n (capped at 60 s): it grows.
        for (n, w) in waits.dropLast().enumerated() {
            let base: TimeAmount = min(.seconds(60), .milliseconds(200) * (1 << n))
            #expect(w.nanoseconds >= base.nanoseconds / 2 && w <= base)
        }
        #expect(waits.count < 15)
    }

    @Test func anExpirationBeforeTheGiveUpTimeEndsItAsExpired() {
        let budget = RetryBudget()  // an hour
        var random = SplitMix64(seed: 1)
        // Expires 5 s after the first failure.
        let deadline = budget.deadline(firstFailureAt: .at(100), expiry: 1_700_000_005, wallNow: .seconds(1_700_000_000))
        #expect(deadline == RetryBudget.Deadline(at: .at(105), byExpiry: true))
        #expect(budget.next(failures: 1, now: .at(100), deadline: deadline, random: &random) != .expired)
        // A wait that would end after the expiration is not taken: expired now.
        #expect(budget.next(failures: 30, now: .at(101), deadline: deadline, random: &random) == .expired)
        #expect(budget.next(failures: 1, now: .at(105), deadline: deadline, random: &random) == .expired)
        // No expiration (0): the give-up time alone.
        #expect(budget.deadline(firstFailureAt: .at(0), expiry: 0, wallNow: .seconds(5)).at == .at(3600))
        // An expiration already past: expired at the first failure.
        let past = budget.deadline(firstFailureAt: .at(0), expiry: 10, wallNow: .seconds(20))
        #expect(budget.next(failures: 1, now: .at(0), deadline: past, random: &random) == .expired)
    }

    /// A resend whose time is chosen by the caller (a refused stream: at once) keeps the budget's rules:
    /// not at or past the expiration, not past the give-up time but for one attempt there.
    @Test func aResendAtAChosenTimeKeepsTheDeadline() {
        let budget = RetryBudget()
        let byTime = RetryBudget.Deadline(at: .at(100), byExpiry: false)
        let byExpiry = RetryBudget.Deadline(at: .at(100), byExpiry: true)
        #expect(budget.resend(at: .at(50), now: .at(50), deadline: byTime) == .retry(at: .at(50)))
        #expect(budget.resend(at: .at(120), now: .at(90), deadline: byTime) == .retry(at: .at(100)))
        #expect(budget.resend(at: .at(100), now: .at(100), deadline: byTime) == .giveUp)
        #expect(budget.resend(at: .at(99), now: .at(90), deadline: byExpiry) == .retry(at: .at(99)))
        #expect(budget.resend(at: .at(100), now: .at(90), deadline: byExpiry) == .expired)
        #expect(budget.resend(at: .at(100), now: .at(100), deadline: byExpiry) == .expired)
    }

    /// Answers with a 5xx share drawn at random (`share` of them), whatever the window: the window is
    /// at its cap for nearly every answer (one probe at the start, an occasional one by chance).
    static func answers(_ w: inout AIMDWindow, share: (Int) -> Double, count: Int, cap: Int, seed: UInt64) -> [Int] {
        var random = SplitMix64(seed: seed)
        var limits: [Int] = []
        for _ in 0..<count {
            let limit = w.limit(cap: cap)
            limits.append(limit)
            if Double.random(in: 0..<1, using: &random) < share(limit) { w.serverError(cap: cap) } else { w.success(cap: cap) }
        }
        return limits
    }

    @Test(arguments: [0.01, 0.1, 0.3, 0.5])
    func aRandom5xxShareKeepsTheWindow(_ share: Double) {
        var w = AIMDWindow()
        let limits = Self.answers(&w, share: { _ in share }, count: 200_000, cap: 100, seed: 11)
        let full = limits.filter { $0 == 100 }.count
        #expect(Double(full) / Double(limits.count) > 0.98, "at the cap for \(full) of \(limits.count) answers")
        #expect(limits.min()! >= 50, "a probe halves it once, never more")
        #expect(w.limit(cap: 100) == 100)
        #expect(abs(w.reference - share) < 0.05, "the share it learned: \(w.reference)")
    }

    /// A server that can take 30 streams: a request beyond them is answered 503 (so the share grows with
    /// the window). The window finds its way below the cap and stays around the server's capacity,
    /// and the 5xx share falls with it.
    @Test func aShareRisingWithTheWindowHalvesIt() {
        var w = AIMDWindow()
        let capacity = 30.0
        let limits = Self.answers(&w, share: { max(0, (Double($0) - capacity) / Double($0)) }, count: 100_000, cap: 100, seed: 12)
        let late = limits.suffix(50_000)
        let mean = Double(late.reduce(0, +)) / Double(late.count)
        #expect(mean >= 10 && mean <= 60, "mean window \(mean)")
        #expect(late.max()! < 100, "it never went back to the cap")
        let lateShare = late.map { max(0, (Double($0) - capacity) / Double($0)) }.reduce(0, +) / Double(late.count)
        #expect(lateShare < 0.35, "the 5xx share fell from 70 % at the cap to \(lateShare)")
    }

    /// A share that appears at once (0 → 40 %) and does not depend on the window: one probe (half the
    /// window for one sample), then the window is back at the cap.
    @Test func aShareAppearingAtOnceIsProbedOnceThenKept() {
        var settings = AIMDWindow.Settings()
        settings.sampleAnswers = 100
        var w = AIMDWindow(settings: settings)
        for _ in 0..<1000 { w.success(cap: 64) }
        #expect(w.isFull)
        var random = SplitMix64(seed: 5)
        var probes = 0
        var wasProbing = false
        for _ in 0..<400 {
            if Double.random(in: 0..<1, using: &random) < 0.4 { w.serverError(cap: 64) } else { w.success(cap: 64) }
            if w.isProbing && !wasProbing {
                probes += 1
                #expect(w.limit(cap: 64) == 32)
            }
            wasProbing = w.isProbing
        }
        #expect(probes == 1)
        #expect(w.limit(cap: 64) == 64)
        // The 5xx stop: after a sample without any, it stops counting (the answer path's fast case).
        for _ in 0..<200 { w.success(cap: 64) }
        #expect(w.isFull)
    }

    /// Timeouts halve the window (a burst of them, within a window of answers, once); other answers
    /// grow it back by about one stream per window of answers, up to the cap.
    @Test func timeoutsHalveOncePerWindowAndSuccessGrowsBack() {
        var w = AIMDWindow()
        #expect(w.limit(cap: 100) == 100)
        w.timeout(cap: 100)
        #expect(w.limit(cap: 100) == 50)
        for _ in 0..<20 { w.timeout(cap: 100) }  // the same burst: one decrease
        #expect(w.limit(cap: 100) == 50)
        for _ in 0..<50 { w.success(cap: 100) }
        w.timeout(cap: 100)
        #expect(w.limit(cap: 100) == 25)
        // A timeout every 30 answers: the window settles where 30 answers grow it back by as much as a
        // halving takes away (about 8 streams).
        for _ in 0..<10 {
            w.timeout(cap: 100)
            for _ in 0..<30 { w.success(cap: 100) }
        }
        #expect(w.limit(cap: 100) < 16)
        var answers = 0
        while w.limit(cap: 100) < 100 && answers < 100_000 {
            w.success(cap: 100)
            answers += 1
        }
        #expect(w.limit(cap: 100) == 100 && w.isFull)
        #expect(answers > 1000, "additive: about one stream per window of answers")
        // A lower cap (the server's SETTINGS) bounds it too.
        #expect(w.limit(cap: 10) == 10)
    }

    /// The default breaker: a random 30 % (even 50 %) of 5xx never opens it; a host answering only 5xx
    /// opens it within its window of 40 answers.
    @Test func theBreakerStopsADownHostNotAFailingShare() {
        var random = SplitMix64(seed: 9)
        for share in [0.3, 0.5] {
            var b = CircuitBreaker()
            var opened = 0
            for _ in 0..<200_000 where b.record(serverError: Double.random(in: 0..<1, using: &random) < share, now: .at(0)) { opened += 1 }
            #expect(opened == 0, "\(share): opened \(opened) times")
        }
        var b = CircuitBreaker()
        var answers = 0
        while !b.isOpen {
            _ = b.record(serverError: true, now: .at(0))
            answers += 1
        }
        #expect(answers == 40)
    }

    @Test func breakerOpensOnMostly5xxProbesAndBacksOffItsWait() {
        var s = CircuitBreaker.Settings()
        s.window = 10
        s.threshold = 0.5
        s.openFor = .seconds(1)
        s.maxOpenFor = .seconds(4)
        var b = CircuitBreaker(settings: s)
        // 4 of 10: stays closed.
        for i in 0..<10 {
            let opened = b.record(serverError: i < 4, now: .at(0))
            #expect(!opened)
        }
        #expect(b.state == .closed)
        // 5 of 10: opens.
        var opened = false
        for i in 0..<10 { opened = b.record(serverError: i < 5, now: .at(0)) || opened }
        #expect(opened && b.state == .open(until: .at(1)))
        let early = b.tick(now: .at(0.5))
        #expect(!early)
        let due = b.tick(now: .at(1))
        #expect(due && b.state == .halfOpen)
        // A failed probe: open again, twice as long; then 4 s at most.
        let reopened = b.record(serverError: true, now: .at(1))
        #expect(reopened)
        #expect(b.state == .open(until: .at(3)))
        _ = b.tick(now: .at(3))
        _ = b.record(serverError: true, now: .at(3))
        #expect(b.state == .open(until: .at(7)))
        _ = b.tick(now: .at(7))
        _ = b.record(serverError: true, now: .at(7))
        #expect(b.state == .open(until: .at(11)))
        _ = b.tick(now: .at(11))
        let afterGoodProbe = b.record(serverError: false, now: .at(11))
        #expect(!afterGoodProbe)
        #expect(b.state == .closed)
        // Closed again from a clean count.
        for i in 0..<9 {
            let opened = b.record(serverError: i < 5, now: .at(12))
            #expect(!opened)
        }
    }

    @Test func dueQueueTakesTheDueOnesEarliestFirst() {
        var q = DueQueue<Int>()
        var random = SplitMix64(seed: 3)
        var dues: [NIODeadline] = []
        for i in 0..<1000 {
            // 1 s + 0…99.99 s, so that a time before all of them is still a time.
            let due = NIODeadline.at(1 + Double(random.next() % 10_000) / 100)
            dues.append(due)
            q.insert(i, due: due)
        }
        #expect(q.popDue(now: .at(0)) == nil)
        var last = NIODeadline.distantPast
        var taken = 0
        while let i = q.popDue(now: .at(51)) {
            #expect(dues[i] >= last && dues[i] <= .at(51))
            last = dues[i]
            taken += 1
        }
        #expect(taken == dues.filter { $0 <= .at(51) }.count)
        #expect(q.count == 1000 - taken)
        #expect((q.nextDue ?? .distantPast) > .at(51))
        #expect(q.removeAll().count == 1000 - taken && q.isEmpty)
        // Equal due times keep their order.
        q.insert(1, due: .at(5))
        q.insert(2, due: .at(5))
        q.insert(3, due: .at(5))
        #expect([q.popDue(now: .at(5)), q.popDue(now: .at(5)), q.popDue(now: .at(5))] == [1, 2, 3])
    }

    @Test func retryCountsAddUpPerReason() {
        var a = RetryCounts()
        a[.reset] += 2
        var b = RetryCounts()
        b[.reset] += 1
        b[.serverError] += 5
        a += b
        #expect(a[.reset] == 3 && a[.serverError] == 5 && a.total == 8)
        #expect(Set(RetryReason.allCases.map(\.label)).count == RetryReason.allCases.count)
        #expect(RetryReason.allCases.count == RetryCounts.reasonCount)
    }
}
