import Kafka
import Testing

@Suite struct OffsetTrackerTests {
    @Test func inOrderSettlementAdvancesThePosition() {
        var t = PartitionOffsetTracker(committed: 10)
        #expect(t.commitPosition == 10)
        for o in Int64(10)..<15 {
            let r1 = t.received(o)
            #expect(r1 == .inOrder)
        }
        #expect(t.commitPosition == 10)
        let r2 = t.settle(10)
        #expect(r2)
        #expect(t.commitPosition == 11)
        for o in Int64(11)..<15 {
            let r3 = t.settle(o)
            #expect(r3)
        }
        #expect(t.commitPosition == 15)
        #expect(t.unsettledCount == 0)
    }

    @Test func outOfOrderSettlementHoldsAtFirstUnsettled() {
        var t = PartitionOffsetTracker()
        for o in Int64(100)..<200 { t.received(o) }
        #expect(t.commitPosition == 100)
        // Settle everything but 150, backwards.
        for o in (Int64(100)..<200).reversed() where o != 150 {
            let r4 = t.settle(o)
            #expect(r4)
        }
        #expect(t.commitPosition == 150)
        #expect(t.unsettledCount == 1)
        let r5 = t.settle(150)
        #expect(r5)
        #expect(t.commitPosition == 200)
    }

    @Test func doubleOrUnknownSettlementIsRefused() {
        var t = PartitionOffsetTracker(committed: 0)
        t.received(0)
        t.received(1)
        let r6 = t.settle(1)
        #expect(r6)
        let r101 = t.settle(1)
        #expect(!r101, "already settled")
        let r102 = t.settle(2)
        #expect(!r102, "never received")
        let r7 = t.settle(0)
        #expect(r7)
        let r103 = t.settle(0)
        #expect(!r103, "below the position")
        #expect(t.commitPosition == 2)
    }

    @Test func gapsAreReportedAndDoNotHoldThePositionBack() {
        var t = PartitionOffsetTracker(committed: 5)
        let r8 = t.received(8)
        #expect(r8 == .gap(expected: 5))
        let r9 = t.received(9)
        #expect(r9 == .inOrder)
        let r10 = t.received(20)
        #expect(r10 == .gap(expected: 10))
        #expect(t.commitPosition == 8)
        let r11 = t.settle(8)
        #expect(r11)
        let r12 = t.settle(9)
        #expect(r12)
        // 10...19 were never received: nothing to wait for.
        #expect(t.commitPosition == 20)
        let r104 = t.settle(15)
        #expect(!r104)
        let r13 = t.settle(20)
        #expect(r13)
        #expect(t.commitPosition == 21)
    }

    @Test func backwardsOffsetsAreReportedAndNotTracked() {
        var t = PartitionOffsetTracker()
        t.received(0)
        t.received(1)
        let r14 = t.received(1)
        #expect(r14 == .backwards(expected: 2))
        let r15 = t.received(0)
        #expect(r15 == .backwards(expected: 2))
        #expect(t.unsettledCount == 2)
    }

    @Test func hugeGapWithNothingPendingCostsNoMemory() {
        var t = PartitionOffsetTracker(committed: 0)
        t.received(0)
        t.settle(0)
        let r16 = t.received(10_000_000_000)
        #expect(r16 == .gap(expected: 1))
        #expect(t.bitmapBytes <= 8)
        #expect(t.commitPosition == 10_000_000_000)
    }

    @Test func memoryStaysBoundedByTheInFlightWindow() {
        var t = PartitionOffsetTracker(committed: 0)
        var maxBytes = 0
        // 1M messages, settled out of order within a sliding window of 1000 in flight.
        let window: Int64 = 1000
        for o in Int64(0)..<1_000_000 {
            t.received(o)
            if o >= window {
                // settle in a scrambled order: the one `window` behind, reversed in blocks of 10
                let base = (o - window) / 10 * 10
                if (o - window) % 10 == 9 {
                    for s in (base..<base + 10).reversed() {
                        let r17 = t.settle(s)
                        #expect(r17)
                    }
                }
            }
            maxBytes = max(maxBytes, t.bitmapBytes)
        }
        #expect(t.commitPosition == 1_000_000 - window)
        #expect(maxBytes < 16 * 1024, "bitmap should track the window, not the history: \(maxBytes)")
    }

    @Test func matchesANaiveModelUnderRandomSettlement() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            var t = PartitionOffsetTracker(committed: Int64.random(in: 0..<1000, using: &rng))
            var received: [Int64] = []
            var settled = Set<Int64>()
            var next = t.nextExpected!
            for _ in 0..<500 {
                if Bool.random(using: &rng) || received.isEmpty {
                    next += Bool.random(using: &rng) ? 1 : Int64.random(in: 1...200, using: &rng)
                    t.received(next - 1)
                    received.append(next - 1)
                } else {
                    let o = received.randomElement(using: &rng)!
                    let r18 = t.settle(o)
                    #expect(r18 == !settled.contains(o))
                    settled.insert(o)
                }
                let expected = received.first { !settled.contains($0) } ?? next
                #expect(t.commitPosition == expected)
            }
        }
    }

    @Test func revokedPartitionsRefuseSettlement() {
        var tracker = OffsetTracker()
        let p0 = TopicPartition(topic: "jobs", partition: 0)
        let p1 = TopicPartition(topic: "jobs", partition: 1)
        tracker.startTracking(p0, committed: nil)
        tracker.startTracking(p1, committed: 7)
        let r19 = tracker.received(MessageRef(topic: "jobs", partition: 0, offset: 0))
        #expect(r19 == .inOrder)
        let r20 = tracker.received(MessageRef(topic: "jobs", partition: 1, offset: 7))
        #expect(r20 == .inOrder)
        let r21 = tracker.received(MessageRef(topic: "jobs", partition: 2, offset: 0))
        #expect(r21 == nil, "not assigned")
        let r22 = tracker.settle(MessageRef(topic: "jobs", partition: 0, offset: 0))
        #expect(r22)
        #expect(tracker.commitPositions == [p0: 1, p1: 7])
        let r23 = tracker.stopTracking(p1)
        #expect(r23 == 7)
        let r105 = tracker.settle(MessageRef(topic: "jobs", partition: 1, offset: 7))
        #expect(!r105)
        #expect(tracker.commitPositions == [p0: 1])
        // Re-assigned later from a newer committed offset: old offsets stay refused.
        tracker.startTracking(p1, committed: 9)
        let r106 = tracker.settle(MessageRef(topic: "jobs", partition: 1, offset: 7))
        #expect(!r106)
    }

    /// The tracker finds a partition by the last one it looked at or by a table of places, which a
    /// revocation rearranges: every partition must keep its own offsets through that, and one revoked
    /// between two calls of a run must not be found through the last look-up.
    @Test func partitionsKeepTheirOwnOffsetsAcrossRevocationsAndRuns() {
        var tracker = OffsetTracker()
        let parts = (0..<4).map { TopicPartition(topic: "jobs", partition: $0) }
        for (i, p) in parts.enumerated() { tracker.startTracking(p, committed: Int64(i * 100)) }
        for (i, p) in parts.enumerated() {
            for k in 0..<3 {
                let reception = tracker.received(MessageRef(topic: p.topic, partition: p.partition, offset: Int64(i * 100 + k)))
                #expect(reception == .inOrder)
            }
        }
        // A run on partition 0, then partition 0 revoked: the run's next settle is refused.
        let r1 = tracker.settle(MessageRef(topic: "jobs", partition: 0, offset: 0))
        #expect(r1)
        let r2 = tracker.stopTracking(parts[0])
        #expect(r2 == 1)
        let afterRevoke = tracker.settle(MessageRef(topic: "jobs", partition: 0, offset: 1))
        #expect(!afterRevoke)
        // The others (one of them moved to the freed place) kept theirs.
        let r3 = tracker.settle(MessageRef(topic: "jobs", partition: 3, offset: 300))
        #expect(r3)
        let r4 = tracker.settle(MessageRef(topic: "jobs", partition: 1, offset: 100))
        #expect(r4)
        let r5 = tracker.settle(MessageRef(topic: "jobs", partition: 1, offset: 101))
        #expect(r5)
        #expect(tracker.commitPositions == [parts[1]: 102, parts[2]: 200, parts[3]: 301])
        // Another topic with the same partition number is another partition.
        let r6 = tracker.settle(MessageRef(topic: "other", partition: 1, offset: 102))
        #expect(r6 == false)
        let r7 = tracker.stopTracking(parts[3])
        #expect(r7 == 301)
        let r8 = tracker.stopTracking(parts[1])
        #expect(r8 == 102)
        #expect(tracker.commitPositions == [parts[2]: 200])
        tracker.startTracking(parts[0], committed: 5)
        let r9 = tracker.received(MessageRef(topic: "jobs", partition: 0, offset: 5))
        #expect(r9 == .inOrder)
        let r10 = tracker.settle(MessageRef(topic: "jobs", partition: 0, offset: 5))
        #expect(r10)
        #expect(tracker.commitPositions == [parts[0]: 6, parts[2]: 200])
    }
}
