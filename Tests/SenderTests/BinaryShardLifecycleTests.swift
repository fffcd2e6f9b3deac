import APNsProtocol
import GatewaySimulator
import NIOCore
import Testing

@testable import Sender

/// The binary shard's connection and drain decisions without sockets (issue 12's seam): back-off and
/// its reset, gateway rotation, epochs, and the drain with its probe, driven here as `Shard` drives
/// them, together with the `BinaryConnectionStateMachine` that decides about the notifications.
@Suite struct BinaryShardLifecycleTests {
    let gateways = [
        GatewayAddress(host: "a.example", port: 2195), GatewayAddress(host: "b.example", port: 2195),
        GatewayAddress(host: "c.example", port: 2195),
    ]

    func policy(jitter: Double = 0) -> ReconnectPolicy {
        var p = ReconnectPolicy()
        p.initialDelay = .milliseconds(50)
        p.multiplier = 2
        p.maximumDelay = .seconds(30)
        p.jitter = jitter
        return p
    }

    func machine() -> BinaryConnectionStateMachine {
        var c = BinaryConnectionStateMachine.Configuration()
        c.settleAfter = .seconds(1)
        c.settleGrace = .seconds(2)
        return BinaryConnectionStateMachine(connection: 0, app: "com.example.shop", configuration: c)
    }

    /// Starts the decided connection and reports it up; returns its epoch.
    @discardableResult
    func connect(_ l: inout BinaryShardLifecycle, _ decision: BinaryShardLifecycle.Connect?) -> Int {
        let started = l.connectStarting(to: decision!.gateway)!
        let up = l.connected(epoch: started.epoch)
        #expect(up)
        return started.epoch
    }

    /// Writes every frame the machine may take, as `Shard.pump` does while the lifecycle allows it.
    func write(_ m: inout BinaryConnectionStateMachine, _ l: BinaryShardLifecycle, flush: UInt64, at: NIODeadline) {
        guard l.mayWrite else { return }
        m.writeEverythingAllowed(flush: flush, completedAt: at)
    }

    /// Failed attempts double the back-off; a connection that proved useful resets it, so the next
    /// reconnect is immediate; one that closed without being useful lengthens it again.
    @Test func reconnectBackOffGrowsAndResetsAfterAUsefulConnection() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 0, gateways: gateways, reconnect: policy())
        var decision = l.connectIfNeeded(random: &random)
        #expect(decision?.backOff == .zero, "the first connection is not delayed")
        var backOffs: [TimeAmount] = []
        for _ in 0..<3 {
            let epoch = l.connectStarting(to: decision!.gateway)!.epoch
            decision = l.connectFailed(epoch: epoch, hasQueued: true, random: &random).connect
            backOffs.append(decision!.backOff)
        }
        #expect(backOffs == [.milliseconds(50), .milliseconds(100), .milliseconds(200)])
        #expect(l.stateName == "backing-off")

        connect(&l, decision)
        l.connectionProvedUseful()
        guard case .idle(let afterUseful) = l.connectionClosed(hasQueued: true, random: &random) else {
            Issue.record("not stopped")
            return
        }
        #expect(afterUseful?.backOff == .zero, "a useful connection resets the back-off")

        connect(&l, afterUseful)
        guard case .idle(let afterUseless) = l.connectionClosed(hasQueued: true, random: &random) else {
            Issue.record("not stopped")
            return
        }
        #expect(afterUseless?.backOff == .milliseconds(50), "a connection that closed before it was useful backs off again")
    }

    /// The jitter draws part of the delay at random: at 50 % jitter, between half of it and all of it.
    @Test func theJitterTakesUpToItsFractionOffTheDelay() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 0, gateways: gateways, reconnect: policy(jitter: 0.5))
        let first = l.connectIfNeeded(random: &random)
        let epoch = l.connectStarting(to: first!.gateway)!.epoch
        let second = l.connectFailed(epoch: epoch, hasQueued: true, random: &random).connect
        #expect((TimeAmount.milliseconds(25)...TimeAmount.milliseconds(50)).contains(second!.backOff))
    }

    /// Shards start on different gateways; a failed connect moves to the next one, wrapping around;
    /// a connection that was made and closed reconnects to the same gateway.
    @Test func aFailedConnectRotatesToTheNextGateway() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 1, gateways: gateways, reconnect: policy())
        var decision = l.connectIfNeeded(random: &random)
        var tried: [String] = [decision!.gateway.host]
        for _ in 0..<3 {
            let epoch = l.connectStarting(to: decision!.gateway)!.epoch
            decision = l.connectFailed(epoch: epoch, hasQueued: true, random: &random).connect
            tried.append(decision!.gateway.host)
        }
        #expect(tried == ["b.example", "c.example", "a.example", "b.example"])

        connect(&l, decision)
        guard case .idle(let again) = l.connectionClosed(hasQueued: true, random: &random) else {
            Issue.record("not stopped")
            return
        }
        #expect(again?.gateway.host == "b.example")

        // Nothing to send: a failure is counted but no new attempt is decided.
        let epoch = l.connectStarting(to: again!.gateway)!.epoch
        let (ignored, next) = l.connectFailed(epoch: epoch, hasQueued: false, random: &random)
        #expect(!ignored && next == nil && l.state == .idle)
    }

    /// Events from an older connection are ignored: a late connect result is closed, a late failure
    /// decides nothing.
    @Test func eventsFromAnOlderConnectionAreIgnored() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 0, gateways: gateways, reconnect: policy())
        let old = connect(&l, l.connectIfNeeded(random: &random))
        let closing = l.closeRequested()
        #expect(closing && l.isClosing)
        _ = l.connectionClosed(hasQueued: true, random: &random)
        #expect(!l.isCurrent(old))
        let lateUp = l.connected(epoch: old)
        #expect(!lateUp, "a late success is not wanted: the driver closes it")
        let late = l.connectFailed(epoch: old, hasQueued: true, random: &random)
        #expect(late.ignored)
    }

    /// Nothing queued or kept: the drain finishes at once; a second drain finds the shard stopped.
    @Test func aDrainWithNothingToDrainFinishesAtOnce() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 0, gateways: gateways, reconnect: policy())
        let start = l.drainRequested(somethingKept: false, random: &random)
        #expect(start == .finish(.nothingToDrain))
        let closeChannel = l.stop()
        #expect(!closeChannel, "never connected: no channel to close")
        #expect(l.isStopped)
        let again = l.drainRequested(somethingKept: false, random: &random)
        #expect(again == .alreadyStopped)
    }

    /// The probe goes out once the queue is empty, nothing is written after it, and its answer proves
    /// every notification before it processed: the drain finishes proved by probe.
    @Test func aDrainIsProvedByTheProbe() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 0, gateways: gateways, reconnect: policy())
        var m = machine()
        m.submitted((0..<3).map(notification))
        connect(&l, l.connectIfNeeded(random: &random))
        let start = l.drainRequested(somethingKept: true, random: &random)
        #expect(start == .proceed(nil), "already connected")
        #expect(!l.shouldSendProbe(queueIsEmpty: m.queue.isEmpty), "not before the queue is sent")
        write(&m, l, flush: 1, at: .at(0))
        #expect(l.shouldSendProbe(queueIsEmpty: m.queue.isEmpty))
        let probe = m.takeProbeIdentifier()
        l.probeSent(probe)
        #expect(!l.mayWrite && !l.shouldSendProbe(queueIsEmpty: true), "nothing goes after the probe")
        #expect(l.finishDrainIfSettled(queueIsEmpty: true, hasUnsettled: m.replay.hasUnsettled) == nil)

        let answersProbe = l.errorResponse(identifier: probe)
        #expect(answersProbe, "the answer names the probe")
        m.probeAnswered()
        let close = l.closeRequested()
        #expect(close)
        #expect(l.finishDrainIfSettled(queueIsEmpty: true, hasUnsettled: m.replay.hasUnsettled) == .provedByProbe)
        let batch = m.takeBatch()
        #expect(batch?.outcomes.map(\.delivery) == Array(repeating: .accepted, count: 3))
        _ = l.stop()
        #expect(l.finishDrainIfSettled(queueIsEmpty: true, hasUnsettled: false) == nil, "finished once")
    }

    /// The probe goes unanswered: after its timeout the drain waits for everything to settle by time,
    /// and finishes settled by time.
    @Test func anUnansweredProbeSettlesTheDrainByTime() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 0, gateways: gateways, reconnect: policy())
        var m = machine()
        m.submitted((0..<3).map(notification))
        guard case .proceed(let decision) = l.drainRequested(somethingKept: true, random: &random) else {
            Issue.record("the drain did not proceed")
            return
        }
        connect(&l, decision)
        write(&m, l, flush: 1, at: .at(0))
        l.probeSent(m.takeProbeIdentifier())
        l.probeTimedOut()
        #expect(l.finishDrainIfSettled(queueIsEmpty: true, hasUnsettled: m.replay.hasUnsettled) == nil, "still unsettled")
        let settled = m.settleTick(now: .at(1))
        #expect(settled)
        #expect(l.finishDrainIfSettled(queueIsEmpty: true, hasUnsettled: m.replay.hasUnsettled) == .settledByTime)
        let closeChannel = l.stop()
        #expect(closeChannel, "connected: the driver closes the channel")
        let closed = l.connectionClosed(hasQueued: false, random: &random)
        #expect(closed == .stopped)
    }

    /// The connection drops mid-drain, probe unanswered: what was unsettled is resent on a new
    /// connection (counted ambiguous), the probe is sent again with a new identifier, and its answer
    /// finishes the drain.
    @Test func aConnectionLostMidDrainResendsAndProbesAgain() {
        var random = SplitMix64(seed: 0x9E37_79B9_7F4A_7C15)
        var l = BinaryShardLifecycle(shard: 0, gateways: gateways, reconnect: policy())
        var m = machine()
        m.submitted((0..<3).map(notification))
        connect(&l, l.connectIfNeeded(random: &random))
        _ = l.drainRequested(somethingKept: true, random: &random)
        write(&m, l, flush: 1, at: .at(0))
        let first = m.takeProbeIdentifier()
        l.probeSent(first)

        let ambiguous = m.connectionLost()
        #expect(ambiguous == 3)
        guard case .idle(let reconnect) = l.connectionClosed(hasQueued: !m.queue.isEmpty, random: &random) else {
            Issue.record("stopped")
            return
        }
        #expect(reconnect != nil, "a drain with notifications to resend reconnects")
        #expect(l.finishDrainIfSettled(queueIsEmpty: m.queue.isEmpty, hasUnsettled: m.replay.hasUnsettled) == nil)
        connect(&l, reconnect)
        #expect(l.mayWrite, "the unanswered probe went with the connection")
        #expect(!l.shouldSendProbe(queueIsEmpty: m.queue.isEmpty), "resend first")
        write(&m, l, flush: 2, at: .at(1))
        #expect(l.shouldSendProbe(queueIsEmpty: m.queue.isEmpty))
        let second = m.takeProbeIdentifier()
        #expect(second != first)
        l.probeSent(second)
        let answersProbe = l.errorResponse(identifier: second)
        #expect(answersProbe)
        m.probeAnswered()
        #expect(l.finishDrainIfSettled(queueIsEmpty: m.queue.isEmpty, hasUnsettled: m.replay.hasUnsettled) == .provedByProbe)
        let batch = m.takeBatch()
        #expect(batch?.events.ambiguous == 3)
        #expect(batch?.outcomes.map(\.jobID) == ["job-0", "job-1", "job-2"], "each reported once")
    }

    func notification(_ n: Int) -> PushNotification {
        var bytes = [UInt8](repeating: 0x22, count: 32)
        bytes[31] = UInt8(n)
        return PushNotification(
            jobID: "job-\(n)", app: "com.example.shop", token: try! DeviceToken(bytes: bytes),
            payload: Array(#"{"aps":{"alert":"hello there"},"x":1}"#.utf8), expiry: 0, priority: .immediate)
    }
}
