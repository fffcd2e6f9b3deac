import GatewaySimulator
import Testing

@testable import Sender

/// The retry policy's pieces on their own: back-off and give-up time, AIMD, the circuit breaker,
/// the queue of due retries.
@Suite struct RetryPolicyTests {
    @Test func backOffGrowsAndTheBudgetEndsByTime() {
        var budget = RetryBudget()
        budget.giveUpAfter = 100
        var random = SplitMix64(seed: 7)
        let deadline = budget.deadline(firstFailureAt: 10, expiry: 0, wallNow: 1_700_000_000)
        #expect(deadline == RetryBudget.Deadline(at: 110, byExpiry: false))
        var now = 10.0
        var waits: [Double] = []
        var failures = 1
        while case .retry(let at) = budget.next(failures: failures, now: now, deadline: deadline, random: &random) {
            #expect(at > now && at <= 110)
            waits.append(at - now)
            now = at
            failures += 1
        }
        #expect(budget.next(failures: failures, now: now, deadline: deadline, random: &random) == .giveUp)
        #expect(now == 110, "the last wait is cut so one attempt is made at the give-up time")
        // Each wait lies within [½, 1] × 0.2 s × 2^n (capped at 60 s): it grows.
        for (n, w) in waits.dropLast().enumerated() {
            let base = min(60, 0.2 * Double(1 << n))
            #expect(w >= base / 2 && w <= base)
        }
        #expect(waits.count < 15)
    }

    @Test func anExpirationBeforeTheGiveUpTimeEndsItAsExpired() {
        let budget = RetryBudget()  // an hour
        var random = SplitMix64(seed: 1)
        // Expires 5 s after the first failure.
        let deadline = budget.deadline(firstFailureAt: 100, expiry: 1_700_000_005, wallNow: 1_700_000_000)
        #expect(deadline == RetryBudget.Deadline(at: 105, byExpiry: true))
        #expect(budget.next(failures: 1, now: 100, deadline: deadline, random: &random) != .expired)
        // A wait that would end after the expiration is not taken: expired now.
        #expect(budget.next(failures: 30, now: 101, deadline: deadline, random: &random) == .expired)
        #expect(budget.next(failures: 1, now: 105, deadline: deadline, random: &random) == .expired)
        // No expiration (0): the give-up time alone.
        #expect(budget.deadline(firstFailureAt: 0, expiry: 0, wallNow: 5).at == 3600)
        // An expiration already past: expired at the first failure.
        let past = budget.deadline(firstFailureAt: 0, expiry: 10, wallNow: 20)
        #expect(budget.next(failures: 1, now: 0, deadline: past, random: &random) == .expired)
    }

    @Test func aimdHalvesOncePerWindowAndGrowsBackToTheCap() {
        var w = AIMDWindow()
        #expect(w.limit(cap: 100) == 100)
        w.congestion(cap: 100)
        #expect(w.limit(cap: 100) == 50)
        for _ in 0..<50 { w.congestion(cap: 100) }  // the same burst (a window of answers): one decrease
        #expect(w.limit(cap: 100) == 50)
        w.congestion(cap: 100)
        #expect(w.limit(cap: 100) == 25)
        for _ in 0..<10 {
            w.congestion(cap: 100)
            for _ in 0..<30 { w.congestion(cap: 100) }
        }
        #expect(w.limit(cap: 100) == 1, "never below one stream")
        var answers = 0
        while w.limit(cap: 100) < 100 && answers < 100_000 {
            w.success(cap: 100)
            answers += 1
        }
        #expect(w.limit(cap: 100) == 100)
        #expect(answers > 1000, "additive: about one stream per window of answers")
        // A lower cap (the server's SETTINGS) bounds it too.
        #expect(w.limit(cap: 10) == 10)
    }

    @Test func breakerOpensOnMostly5xxProbesAndBacksOffItsWait() {
        var s = CircuitBreaker.Settings()
        s.window = 10
        s.threshold = 0.5
        s.openFor = 1
        s.maxOpenFor = 4
        var b = CircuitBreaker(settings: s)
        // 4 of 10: stays closed.
        for i in 0..<10 {
            let opened = b.record(serverError: i < 4, now: 0)
            #expect(!opened)
        }
        #expect(b.state == .closed)
        // 5 of 10: opens.
        var opened = false
        for i in 0..<10 { opened = b.record(serverError: i < 5, now: 0) || opened }
        #expect(opened && b.state == .open(until: 1))
        let early = b.tick(now: 0.5)
        #expect(!early)
        let due = b.tick(now: 1)
        #expect(due && b.state == .halfOpen)
        // A failed probe: open again, twice as long; then 4 s at most.
        let reopened = b.record(serverError: true, now: 1)
        #expect(reopened)
        #expect(b.state == .open(until: 3))
        _ = b.tick(now: 3)
        _ = b.record(serverError: true, now: 3)
        #expect(b.state == .open(until: 7))
        _ = b.tick(now: 7)
        _ = b.record(serverError: true, now: 7)
        #expect(b.state == .open(until: 11))
        _ = b.tick(now: 11)
        let afterGoodProbe = b.record(serverError: false, now: 11)
        #expect(!afterGoodProbe)
        #expect(b.state == .closed)
        // Closed again from a clean count.
        for i in 0..<9 {
            let opened = b.record(serverError: i < 5, now: 12)
            #expect(!opened)
        }
    }

    @Test func dueQueueTakesTheDueOnesEarliestFirst() {
        var q = DueQueue<Int>()
        var random = SplitMix64(seed: 3)
        var dues: [Double] = []
        for i in 0..<1000 {
            let due = Double(random.next() % 10_000) / 100
            dues.append(due)
            q.insert(i, due: due)
        }
        #expect(q.popDue(now: -1) == nil)
        var last = -1.0
        var taken = 0
        while let i = q.popDue(now: 50) {
            #expect(dues[i] >= last && dues[i] <= 50)
            last = dues[i]
            taken += 1
        }
        #expect(taken == dues.filter { $0 <= 50 }.count)
        #expect(q.count == 1000 - taken)
        #expect((q.nextDue ?? 0) > 50)
        #expect(q.removeAll().count == 1000 - taken && q.isEmpty)
        // Equal due times keep their order.
        q.insert(1, due: 5)
        q.insert(2, due: 5)
        q.insert(3, due: 5)
        #expect([q.popDue(now: 5), q.popDue(now: 5), q.popDue(now: 5)] == [1, 2, 3])
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
