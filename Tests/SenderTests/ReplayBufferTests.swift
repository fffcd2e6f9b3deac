import APNsProtocol
import NIOCore
import Testing

@testable import Sender

/// Plain numbers as items, kept as themselves once settled. (`public`: `@testable` shows the protocol
/// to this module as if it were, and `Int` is.)
extension Int: ReplayItem {
    public var settled: Int { self }
}

@Suite struct ReplayBufferTests {
    /// Ten notifications with identifiers `start`, `start+1`, … (wrapping), all written at time 100.
    func buffer(from start: UInt32 = 1, count: Int = 10) -> ReplayBuffer<Int> {
        var b = ReplayBuffer<Int>()
        for i in 0..<count { b.append(identifier: start &+ UInt32(i), item: i, bytes: 100) }
        b.assignUnflushed(to: 1)
        b.writeCompleted(1, at: .uptimeNanoseconds(100))
        return b
    }

    @Test func errorInTheMiddle() {
        var b = buffer()
        let r = b.resolve(ErrorResponse(status: .invalidToken, identifier: 4))
        #expect(r.accepted.map(\.item) == [0, 1, 2])
        #expect(r.failed?.item == 3)
        #expect(r.discarded.map(\.item) == [4, 5, 6, 7, 8, 9])
        #expect(!r.sequenceUnknown)
        #expect(b.isEmpty && b.bytes == 0)
    }

    @Test func shutdownNamesTheLastProcessed() {
        var b = buffer()
        let r = b.resolve(ErrorResponse(status: .shutdown, identifier: 4))
        #expect(r.accepted.map(\.item) == [0, 1, 2, 3])
        #expect(r.failed == nil)
        #expect(r.discarded.map(\.item) == [4, 5, 6, 7, 8, 9])
    }

    @Test func identifiersWrap() {
        // 0xFFFFFFFD, FE, FF, 0, 1, …: the error names 1, the 5th.
        var b = buffer(from: 0xFFFF_FFFD)
        let r = b.resolve(ErrorResponse(status: .processingError, identifier: 1))
        #expect(r.accepted.map(\.item) == [0, 1, 2, 3])
        #expect(r.failed?.item == 4)
        #expect(r.discarded.count == 5)
    }

    @Test func identifierAlreadyGoneIsSequenceUnknown() {
        var b = buffer(from: 100)
        // 99 settled earlier and left the buffer: all ten here follow it and must go again.
        let r = b.resolve(ErrorResponse(status: .invalidToken, identifier: 99))
        #expect(r.sequenceUnknown)
        #expect(r.accepted.isEmpty && r.failed == nil)
        #expect(r.discarded.map(\.item) == Array(0..<10))
        var empty = ReplayBuffer<Int>()
        #expect(empty.resolve(ErrorResponse(status: .invalidToken, identifier: 1)).sequenceUnknown)
    }

    @Test func settlementWaitsForTheWriteAndTheWindow() {
        var b = ReplayBuffer<Int>()
        for i in 0..<4 { b.append(identifier: UInt32(i + 1), item: i, bytes: 10) }
        b.assignUnflushed(to: 1)  // 0, 1 in write 1 … (all four, in fact)
        b.append(identifier: 5, item: 4, bytes: 10)  // not flushed
        #expect(b.settleExpired(now: .uptimeNanoseconds(1_000), settleAfter: .nanoseconds(10)).isEmpty)  // write 1 not completed yet
        b.writeCompleted(1, at: .uptimeNanoseconds(100))
        #expect(b.settleExpired(now: .uptimeNanoseconds(109), settleAfter: .nanoseconds(10)).isEmpty)
        #expect(b.settleExpired(now: .uptimeNanoseconds(110), settleAfter: .nanoseconds(10)).map(\.item) == [0, 1, 2, 3])
        #expect(b.count == 1 && b.bytes == 10)  // the unflushed one stays
        let (written, unwritten) = b.takeAll()
        #expect(written.isEmpty && unwritten.map(\.item) == [4])
    }

    @Test func dropSplitsWrittenFromUnwritten() {
        var b = ReplayBuffer<Int>()
        for i in 0..<3 { b.append(identifier: UInt32(i + 1), item: i, bytes: 1) }
        b.assignUnflushed(to: 7)
        for i in 3..<5 { b.append(identifier: UInt32(i + 1), item: i, bytes: 1) }
        let (written, unwritten) = b.takeAll()
        #expect(written.map(\.item) == [0, 1, 2])
        #expect(unwritten.map(\.item) == [3, 4])
    }

    // MARK: the grace window (issue 10, item 4)

    /// Settled entries leave the window (`count`, `bytes`) but stay kept, marked settled, for the grace
    /// window; `forgetSettled` lets them go after it, or earlier beyond the byte bound.
    @Test func settledStayForTheGraceWindow() {
        var b = buffer()  // 10 × 100 bytes written at 100
        let settled = b.settleExpired(now: .uptimeNanoseconds(200), settleAfter: .nanoseconds(100))
        #expect(settled.map(\.item) == Array(0..<10) && settled.map(\.identifier) == Array(1...10))
        #expect(b.count == 0 && b.bytes == 0 && !b.hasUnsettled)
        #expect(b.keptCount == 10 && b.keptBytes == 1_000 && !b.isEmpty)
        #expect(b.settleExpired(now: .uptimeNanoseconds(10_000), settleAfter: .nanoseconds(100)).isEmpty, "settled once")
        b.forgetSettled(now: .uptimeNanoseconds(299), grace: .nanoseconds(100), maxBytes: 1_000)
        #expect(b.keptCount == 10)
        b.forgetSettled(now: .uptimeNanoseconds(299), grace: .nanoseconds(100), maxBytes: 650)
        #expect(b.keptCount == 6 && b.keptBytes == 600, "the oldest go first beyond the byte bound")
        #expect(b.oldestIdentifier == 5)
        b.forgetSettled(now: .uptimeNanoseconds(300), grace: .nanoseconds(100), maxBytes: 1_000)
        #expect(b.isEmpty && Array(b.forgotten) == Array(0..<10))
    }

    /// Entries settled at different ticks leave the grace window tick by tick, each `grace` after its
    /// own settle time (the window keeps one time per tick, not per entry), across more entries than a
    /// chunk of its storage holds.
    @Test func eachTicksEntriesLeaveAfterTheirOwnGrace() {
        var b = ReplayBuffer<Int>()
        // Three writes of 1000 frames, completing at 0, 100 and 200, each settled at its own tick.
        for tick in 0..<3 {
            for i in 0..<1000 { b.append(identifier: UInt32(tick * 1000 + i + 1), item: tick * 1000 + i, bytes: 10) }
            b.assignUnflushed(to: UInt64(tick + 1))
            b.writeCompleted(UInt64(tick + 1), at: .uptimeNanoseconds(UInt64(tick) * 100))
            #expect(b.settleExpired(now: .uptimeNanoseconds(UInt64(tick) * 100 + 50), settleAfter: .nanoseconds(50)).count == 1000)
        }
        #expect(b.settledCount == 3000 && b.keptBytes == 30_000)
        b.forgetSettled(now: .uptimeNanoseconds(1049), grace: .nanoseconds(1000), maxBytes: 1 << 20)
        #expect(b.settledCount == 3000)
        b.forgetSettled(now: .uptimeNanoseconds(1050), grace: .nanoseconds(1000), maxBytes: 1 << 20)
        #expect(b.settledCount == 2000 && b.oldestIdentifier == 1001 && b.keptBytes == 20_000)
        // An error naming one of the second tick's replays what followed it, in order, across chunks.
        var copy = b
        let r = copy.resolve(ErrorResponse(status: .invalidToken, identifier: 1500))
        #expect(r.failedSettled == 1499 && r.discardedSettled == Array(1500..<3000))
        b.forgetSettled(now: .uptimeNanoseconds(1149), grace: .nanoseconds(1000), maxBytes: 1 << 20)
        #expect(b.settledCount == 2000)
        // Beyond the byte bound the oldest go first, whatever their tick; the rest still wait for theirs.
        b.forgetSettled(now: .uptimeNanoseconds(1149), grace: .nanoseconds(1000), maxBytes: 15_000)
        #expect(b.settledCount == 1500 && b.oldestIdentifier == 1501)
        b.forgetSettled(now: .uptimeNanoseconds(1150), grace: .nanoseconds(1000), maxBytes: 1 << 20)
        #expect(b.settledCount == 1000 && b.oldestIdentifier == 2001)
        b.forgetSettled(now: .uptimeNanoseconds(1250), grace: .nanoseconds(1000), maxBytes: 1 << 20)
        #expect(b.isEmpty && b.forgottenTotal == 3000 && Array(b.forgotten) == Array(0..<3000))
    }

    /// An error naming a settled (reported) notification still replays exactly what followed it: the
    /// settled ones among them come back marked settled (resent, not reported again), the unsettled
    /// ones plainly; nothing before it is reported twice.
    @Test func errorNamingASettledOneReplaysWhatFollowed() {
        var b = ReplayBuffer<Int>()
        for i in 0..<6 { b.append(identifier: UInt32(i + 1), item: i, bytes: 10) }
        b.assignUnflushed(to: 1)
        b.writeCompleted(1, at: .uptimeNanoseconds(100))
        for i in 6..<10 { b.append(identifier: UInt32(i + 1), item: i, bytes: 10) }
        b.assignUnflushed(to: 2)
        b.writeCompleted(2, at: .uptimeNanoseconds(150))
        #expect(b.settleExpired(now: .uptimeNanoseconds(160), settleAfter: .nanoseconds(60)).map(\.item) == Array(0..<6))
        let r = b.resolve(ErrorResponse(status: .invalidToken, identifier: 3))  // item 2, settled
        #expect(!r.sequenceUnknown && r.lostAfterSettle == 0)
        #expect(r.accepted.isEmpty, "0 and 1 were reported when they settled")
        #expect(r.failed == nil && r.failedSettled == 2)
        #expect(r.discardedSettled == [3, 4, 5], "settled, resent")
        #expect(r.discarded.map(\.item) == [6, 7, 8, 9] && r.discarded.map(\.identifier) == [7, 8, 9, 10])
        #expect(b.isEmpty && b.keptBytes == 0 && b.bytes == 0)
    }

    /// Status 10 naming a settled one: it and those before it were processed (and reported); the rest,
    /// settled or not, are resent.
    @Test func shutdownNamingASettledOne() {
        var b = buffer()
        _ = b.settleExpired(now: .uptimeNanoseconds(200), settleAfter: .nanoseconds(100))
        b.append(identifier: 11, item: 10, bytes: 100)
        let r = b.resolve(ErrorResponse(status: .shutdown, identifier: 5))
        #expect(r.accepted.isEmpty && r.failed == nil && r.failedSettled == nil)
        #expect(r.discardedSettled == [5, 6, 7, 8, 9] && r.discarded.map(\.item) == [10])
    }

    /// An error naming a notification already forgotten proves the forgotten ones after it discarded:
    /// counted exactly (identifiers are consecutive) and named by label while remembered.
    @Test func errorNamingAForgottenOneCountsTheLoss() {
        var b = buffer()  // identifiers 1…10
        _ = b.settleExpired(now: .uptimeNanoseconds(200), settleAfter: .nanoseconds(100))
        b.forgottenMemory = 4
        b.forgetSettled(now: .uptimeNanoseconds(200), grace: .nanoseconds(100), maxBytes: 300)  // 1…7 forgotten
        #expect(b.keptCount == 3 && Array(b.forgotten) == [3, 4, 5, 6])
        let r = b.resolve(ErrorResponse(status: .invalidToken, identifier: 5))  // item 4, forgotten
        #expect(r.sequenceUnknown)
        #expect(r.lostAfterSettle == 2, "items 5 and 6: settled, forgotten, discarded")
        #expect(r.lost == [5, 6])
        #expect(r.forgottenNamedFailed && r.forgottenNamed == 4)
        #expect(r.discardedSettled == [7, 8, 9] && r.discarded.isEmpty, "the kept ones are resent")

        // With everything forgotten, the buffer still knows where it stands; a shutdown naming the newest
        // forgotten one loses nothing.
        var c = buffer()
        _ = c.settleExpired(now: .uptimeNanoseconds(200), settleAfter: .nanoseconds(100))
        c.forgetSettled(now: .uptimeNanoseconds(300), grace: .nanoseconds(100), maxBytes: 1_000)
        var d = c
        let s = c.resolve(ErrorResponse(status: .shutdown, identifier: 10))
        #expect(s.lostAfterSettle == 0 && !s.forgottenNamedFailed && s.discarded.isEmpty)
        let e = d.resolve(ErrorResponse(status: .shutdown, identifier: 7))
        #expect(e.lostAfterSettle == 3 && e.lost == [7, 8, 9])
        // An identifier never sent on this connection is not a loss that can be counted.
        var f = buffer()
        let u = f.resolve(ErrorResponse(status: .invalidToken, identifier: 500))
        #expect(u.sequenceUnknown && u.lostAfterSettle == 0 && u.discarded.count == 10)
    }

    /// A drop resends only the unsettled (the settled ones stay accepted); a drain probe reports only
    /// the unsettled.
    @Test func dropAndProbeLeaveTheSettledAlone() {
        var b = buffer()
        _ = b.settleExpired(now: .uptimeNanoseconds(200), settleAfter: .nanoseconds(100))
        b.append(identifier: 11, item: 10, bytes: 1)
        b.assignUnflushed(to: 2)
        b.append(identifier: 12, item: 11, bytes: 1)
        var c = b
        let (written, unwritten) = b.takeAll()
        #expect(written.map(\.item) == [10] && unwritten.map(\.item) == [11])
        #expect(c.acceptAll().map(\.item) == [10, 11])
    }

    /// Settled entries keep only the item's settled form, and identifiers follow from positions across
    /// settling, forgetting and a buffer emptied by the grace window.
    @Test func settledEntriesKeepTheSettledForm() {
        struct Numbered: ReplayItem {
            var n: Int
            var settled: String { "settled-\(n)" }
        }
        var b = ReplayBuffer<Numbered>()
        for i in 0..<4 { b.append(identifier: UInt32(i + 1), item: Numbered(n: i), bytes: 10) }
        b.assignUnflushed(to: 1)
        b.writeCompleted(1, at: .uptimeNanoseconds(100))
        #expect(b.settleExpired(now: .uptimeNanoseconds(200), settleAfter: .nanoseconds(100)).map(\.item.n) == [0, 1, 2, 3])
        b.forgetSettled(now: .uptimeNanoseconds(300), grace: .nanoseconds(100), maxBytes: 1_000)
        #expect(b.isEmpty && Array(b.forgotten) == ["settled-0", "settled-1", "settled-2", "settled-3"])
        for i in 4..<8 { b.append(identifier: UInt32(i + 1), item: Numbered(n: i), bytes: 10) }
        b.assignUnflushed(to: 2)
        b.writeCompleted(2, at: .uptimeNanoseconds(300))
        _ = b.settleExpired(now: .uptimeNanoseconds(400), settleAfter: .nanoseconds(100))
        b.append(identifier: 9, item: Numbered(n: 8), bytes: 10)
        #expect(b.oldestIdentifier == 5 && b.keptCount == 5 && b.settledCount == 4)
        let r = b.resolve(ErrorResponse(status: .invalidToken, identifier: 6))
        #expect(r.failedSettled == "settled-5" && r.discardedSettled == ["settled-6", "settled-7"])
        #expect(r.discarded.map(\.item.n) == [8] && r.discarded.map(\.identifier) == [9])
    }
}
