import GatewaySimulator
import Testing

@testable import Sender

/// The caller's back-pressure on an HTTP/2 connection: `send` waits once the connection holds a few
/// windows of streams' worth of bulk work (at least the floor, at most `queue_capacity`). The pipeline
/// marks a batch "written" right before it hands the batch over (design §2.4), so this bound is what a
/// crash may count `ambiguous` beyond what was written.
@Suite struct HTTP2RoomTests {
    typealias Machine = HTTP2ConnectionStateMachine<Int>

    /// Enqueues bulk jobs one at a time until the machine has no room; returns how many it held then.
    static func queuedWhenFull(_ m: inout Machine) -> Int {
        var next = 1_000_000
        while m.hasRoom {
            _ = m.enqueue([next], now: .at(0))
            next += 1
        }
        return m.queue.bulk.count
    }

    @Test func beforeTheConnectionIsUpTheFloorBounds() {
        var m = HTTP2ConnectionStateMachineTests.machine(cap: 100)
        #expect(m.permits == 1)
        #expect(Self.queuedWhenFull(&m) == Machine.roomFloor + 1, "room while at most the floor is queued")
    }

    @Test func aFullWindowLetsRoomLeadWindowsWait() {
        var m = HTTP2ConnectionStateMachineTests.authenticated(cap: 100, serverMax: 1000)
        let permits = m.permits
        #expect(permits > 1)
        // What is queued beyond the open streams waits; the bound counts the queue only.
        let bound = max(Machine.roomFloor, Machine.roomLead * permits)
        #expect(Self.queuedWhenFull(&m) == bound + 1)
        #expect(!m.hasRoom)
        // The open streams answered, the next ones are written from the queue: room again.
        for id in Array(m.inFlight.keys) {
            _ = m.response(streamID: id, status: 200, reason: nil, timestamp: nil, now: .at(1))
        }
        #expect(m.hasRoom)
        #expect(m.queue.bulk.count <= bound)
    }

    @Test func queueCapacityStaysTheUpperBound() {
        var m = HTTP2ConnectionStateMachineTests.machine(cap: 100) { $0.queueCapacity = 40 }
        #expect(Self.queuedWhenFull(&m) == 41)
    }

    @Test func thePriorityLaneNeverWaitsForRoom() {
        var m = HTTP2ConnectionStateMachineTests.machine(cap: 100)
        _ = Self.queuedWhenFull(&m)
        _ = m.enqueue(Array(0..<1000), lane: .priority, now: .at(0))
        #expect(m.queue.priority.count == 1000)
        #expect(m.queue.bulk.count == Machine.roomFloor + 1, "the bound is the bulk lane's")
    }
}
