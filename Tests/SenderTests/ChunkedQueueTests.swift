import GatewaySimulator
import Testing

@testable import Sender

/// The grace window's storage: a FIFO queue in fixed-size chunks.
@Suite struct ChunkedQueueTests {
    /// Random appends and removals from the front agree with an array at every step, across chunk
    /// boundaries, through emptying and refilling (the drained chunk's storage is reused).
    @Test func behavesAsAnArrayQueue() {
        var q = ChunkedQueue<Int>(chunkSize: 7)
        var model: [Int] = []
        var rng = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)  // seeded: a failure replays exactly
        var next = 0
        for step in 0..<20_000 {
            let roll = Int.random(in: 0..<100, using: &rng)
            if roll < 55 || model.isEmpty {
                q.append(next)
                model.append(next)
                next += 1
            } else if roll < 98 {
                #expect(q.removeFirst() == model.removeFirst())
            } else {
                q.removeAll()
                model.removeAll()
            }
            #expect(q.count == model.count && q.isEmpty == model.isEmpty && q.first == model.first, "step \(step)")
            if !model.isEmpty {
                let i = Int.random(in: 0..<model.count, using: &rng)
                #expect(q[offset: i] == model[i], "step \(step), offset \(i)")
            }
        }
    }

    /// A removed entry's references go when its chunk drains: no later than a chunk's worth after it.
    @Test func releasesWhatItsEntriesReferToByTheChunk() {
        final class Box {}
        var q = ChunkedQueue<Box>(chunkSize: 4)
        weak var firstBox: Box?
        do {
            let box = Box()
            firstBox = box
            q.append(box)
        }
        for _ in 0..<8 { q.append(Box()) }
        q.removeFirst()
        #expect(firstBox != nil, "kept until its chunk drains")
        for _ in 0..<3 { q.removeFirst() }
        #expect(firstBox == nil, "released with its chunk")
        #expect(q.count == 5)
    }
}
