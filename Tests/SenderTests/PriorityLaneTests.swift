#if canImport(HTTP2Simulator)
import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import HTTP2Simulator
import NIOCore
import NIOPosix
import Testing
import TestSupport

@testable import Sender

/// The priority lane in the transports (`docs/design.md §1.4`): a priority notification queued behind
/// bulk ones on one connection is written first, each lane keeps its order, and a priority batch never
/// waits for room in a full bulk queue.
@Suite struct PriorityLaneTests {
    static func notification(_ n: Int, lane: Lane, app: String = "com.example.shop") -> PushNotification {
        var bytes = [UInt8](repeating: 0x22, count: 32)
        bytes[30] = UInt8(n >> 8)
        bytes[31] = UInt8(n & 0xff)
        let id = "\(lane == .priority ? "urgent" : "bulk")-\(n)"
        return PushNotification(
            jobID: id, app: app, token: try! DeviceToken(bytes: bytes),
            payload: Array(#"{"aps":{"alert":"hello there"},"jid":"\#(id)"}"#.utf8), expiry: 0, priority: .immediate,
            position: SourcePosition(partition: 0, offset: Int64(n), lane: lane))
    }

    /// The binary shard's decisions: with the unsettled window full of bulk frames, priority ones
    /// submitted later are the next written; a lost connection puts each back at its lane's head.
    @Test func binaryWritesThePriorityQueueFirst() {
        let frame = FrameEncoder.command2Size(payloadCount: Self.notification(0, lane: .bulk).payload.count)
        var c = BinaryConnectionStateMachine.Configuration()
        c.unsettledByteLimit = 5 * frame
        c.settleAfter = .seconds(1)
        var m = BinaryConnectionStateMachine(connection: 0, app: "com.example.shop", configuration: c)
        let bulk = m.submitted((0..<20).map { Self.notification($0, lane: .bulk) })
        #expect(bulk)
        let firstWrite = m.writeEverythingAllowed(flush: 1, completedAt: .at(0))
        #expect(firstWrite == 5)
        let urgentIsBulk = m.submitted((0..<3).map { Self.notification($0, lane: .priority) })
        #expect(!urgentIsBulk, "no bulk: the caller need not wait")
        #expect(m.queuedCount == 18)
        // The window settles: the priority frames go first, then the bulk ones in order.
        _ = m.settleTick(now: .at(1))
        _ = m.takeBatch()
        let secondWrite = m.writeEverythingAllowed(flush: 2, completedAt: .at(1))
        #expect(secondWrite == 5)
        // Lost before they settled: back at the head of their own lanes, in order.
        let lost = m.connectionLost()
        #expect(lost == 5)
        #expect(m.priorityQueue.map(\.notification.jobID) == ["urgent-0", "urgent-1", "urgent-2"])
        #expect(Array(m.queue.map(\.notification.jobID).prefix(3)) == ["bulk-5", "bulk-6", "bulk-7"])
        // Written again, in the same order, and answered by the drain probe: outcomes in write order.
        let thirdWrite = m.writeEverythingAllowed(flush: 3, completedAt: .at(2))
        #expect(thirdWrite == 5)
        m.probeAnswered()
        let answered = m.takeBatch()?.outcomes.map(\.jobID)
        #expect(answered == ["urgent-0", "urgent-1", "urgent-2", "bulk-5", "bulk-6"])
    }

    /// The HTTP/2 connection's decisions: streams freed while bulk requests wait go to the priority
    /// requests enqueued after them; a priority request put back keeps its lane.
    @Test func http2OpensStreamsForThePriorityQueueFirst() {
        typealias Machine = HTTP2ConnectionStateMachine<Int>
        var c = Machine.Configuration()
        c.streamCap = 2
        c.queueCapacity = 10
        c.requestTimeout = .seconds(10)
        c.pingInterval = .seconds(30)
        var m = Machine(configuration: c, random: SplitMix64(seed: 7), lane: { $0 >= 100 ? .priority : .bulk })
        _ = m.enqueue([0], now: .at(0))
        let first = m.connected(now: .at(0)).writes
        _ = m.settings(maxConcurrentStreams: 1000, now: .at(0))
        let opened = m.response(streamID: first[0].streamID, status: 200, reason: nil, timestamp: nil, now: .at(0)).writes
        #expect(opened.isEmpty)
        let bulk = m.enqueue(Array(1...20), now: .at(1)).writes
        #expect(bulk.map(\.request.job) == [1, 2])
        #expect(!m.hasRoom, "twenty queued bulk requests: the caller waits")
        let urgentWrites = m.enqueue([100, 101, 102], lane: .priority, now: .at(1)).writes
        #expect(urgentWrites.isEmpty, "no stream free yet")
        var order: [Int] = []
        var open = bulk.map(\.streamID)
        while !open.isEmpty {
            let id = open.removeFirst()
            let w = m.response(streamID: id, status: 200, reason: nil, timestamp: nil, now: .at(2)).writes
            order += w.map(\.request.job)
            open += w.map(\.streamID)
        }
        #expect(Array(order.prefix(5)) == [100, 101, 102, 3, 4])
        #expect(order.filter { $0 < 100 } == Array(3...20), "the bulk lane in its order")
    }

    /// Over TLS against the HTTP/2 simulator, one connection: one hand-off of 100 bulk notifications and
    /// 5 priority ones (the bulk ones first in it); Apple's stand-in records every priority one before
    /// any bulk one, each lane in its order. Order only, from the simulator's records: no timing. (The
    /// socket-free test above has the priority work arrive after the bulk work is queued.)
    @Test func http2TransportWritesPriorityBeforeQueuedBulk() async throws {
        let sim = try await HTTP2Simulator.startedForTests(tokens: false)
        let log = OutcomeLog()
        var c = HTTP2TransportConfiguration(
            app: shop, authentication: .certificate(.test(app: shop, in: TestCertificates.directory)),
            hosts: [GatewayAddress(host: "127.0.0.1", port: sim.port)])
        c.connections = 1
        c.serverHostname = "localhost"
        c.linger = .milliseconds(1)
        let transport = try HTTP2Transport(configuration: c, group: MultiThreadedEventLoopGroup.singleton, onOutcomes: log.handler)
        try await transport.send(
            (0..<100).map { Self.notification($0, lane: .bulk, app: shop) }
                + (0..<5).map { Self.notification($0, lane: .priority, app: shop) })
        _ = await transport.drainAndClose()
        try await sim.stop()
        let order = sim.records.compactMap(\.jobID)
        #expect(log.outcomes.count == 105 && log.outcomes.allSatisfy { $0.kind == .accepted })
        #expect(order == (0..<5).map { "urgent-\($0)" } + (0..<100).map { "bulk-\($0)" })
    }
}
#endif
