import APNsProtocol
import Testing

@testable import Sender

@Suite struct ReplayBufferTests {
    /// Ten notifications with identifiers `start`, `start+1`, … (wrapping), all written at time 100.
    func buffer(from start: UInt32 = 1, count: Int = 10) -> ReplayBuffer<Int> {
        var b = ReplayBuffer<Int>()
        for i in 0..<count { b.append(identifier: start &+ UInt32(i), item: i, bytes: 100) }
        b.assignUnflushed(to: 1)
        b.writeCompleted(1, at: 100)
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
        #expect(b.settleExpired(now: 1_000, settleAfter: 10).isEmpty)  // write 1 not completed yet
        b.writeCompleted(1, at: 100)
        #expect(b.settleExpired(now: 109, settleAfter: 10).isEmpty)
        #expect(b.settleExpired(now: 110, settleAfter: 10).map(\.item) == [0, 1, 2, 3])
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
}
