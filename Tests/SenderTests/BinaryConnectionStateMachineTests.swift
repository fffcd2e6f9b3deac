import APNsProtocol
import NIOCore
import Testing

@testable import Sender

/// The binary shard's decisions without sockets (issue 10 item 4, issue 12's seam): the unsettled
/// window, settlement with its grace window, and what each answer means for outcomes and resends.
@Suite struct BinaryConnectionStateMachineTests {

    func machine(window: Int = 1 << 20, graceBytes: Int = 1 << 20) -> BinaryConnectionStateMachine {
        var c = BinaryConnectionStateMachine.Configuration()
        c.unsettledByteLimit = window
        c.graceMaxBytes = graceBytes
        c.settleAfter = .seconds(1)
        c.settleGrace = .seconds(2)
        return BinaryConnectionStateMachine(connection: 0, app: "com.example.shop", configuration: c)
    }

    @discardableResult
    func write(_ m: inout BinaryConnectionStateMachine, flush: UInt64, at: NIODeadline) -> Int {
        m.writeEverythingAllowed(flush: flush, completedAt: at)
    }

    func drain(_ m: inout BinaryConnectionStateMachine) -> (outcomes: [Outcome], events: SenderEvents) {
        m.takeBatch() ?? ([], SenderEvents())
    }

    /// The window stops taking frames at `unsettledByteLimit`; settling frees it again.
    @Test func theUnsettledWindowBoundsWhatIsWritten() {
        let frame = FrameEncoder.command2Size(payloadCount: notification(0).payload.count)
        var m = machine(window: 10 * frame)
        m.submitted((0..<30).map(notification))
        #expect(write(&m, flush: 1, at: .at(0)) == 10, "ten frames fill the window")
        #expect(!m.mayTakeFrame && m.queue.count == 20)
        _ = m.settleTick(now: .at(1))
        #expect(write(&m, flush: 2, at: .at(1)) == 10, "settling made room for ten more")
        #expect(drain(&m).outcomes.map(\.jobID) == (0..<10).map { "job-\($0)" })
    }

    /// Errors that discard frames halve the window down to its minimum; clean settlement grows it back
    /// by what settled, up to the cap; a status 10 is not an error and leaves it alone.
    @Test func errorsShrinkTheWindowAndCleanSettlementGrowsIt() {
        let frame = FrameEncoder.command2Size(payloadCount: notification(0).payload.count)
        var c = BinaryConnectionStateMachine.Configuration()
        c.unsettledByteLimit = 40 * frame
        c.minimumWindow = 5 * frame
        c.settleAfter = .seconds(1)
        var m = BinaryConnectionStateMachine(connection: 0, app: "com.example.shop", configuration: c)
        m.submitted((0..<200).map(notification))
        #expect(write(&m, flush: 1, at: .at(0)) == 40)
        _ = m.errorResponse(ErrorResponse(status: .shutdown, identifier: 10))
        #expect(m.window == 40 * frame, "a shutdown is not an error")
        _ = m.connectionLost()
        for flush in UInt64(2)...5 {
            write(&m, flush: flush, at: .at(0))
            _ = m.errorResponse(ErrorResponse(status: .invalidToken, identifier: m.replay.oldestIdentifier! &+ 1))
            _ = m.connectionLost()
        }
        #expect(m.window == 5 * frame, "40 → 20 → 10 → 5 → 5 frames")
        #expect(write(&m, flush: 6, at: .at(0)) == 5)
        _ = m.settleTick(now: .at(1))
        #expect(m.window == 10 * frame, "grown by what settled")
        #expect(write(&m, flush: 7, at: .at(1)) == 10)
    }

    /// A job reported accepted by time, then proved discarded by an error naming an older one, is
    /// resent, and its second acceptance is not reported again.
    @Test func aSettledJobDiscardedLaterIsResentNotReportedTwice() {
        var m = machine()
        m.submitted((0..<3).map(notification))
        write(&m, flush: 1, at: .at(0))
        m.submitted((3..<6).map(notification))
        write(&m, flush: 2, at: .at(0.5))
        _ = m.settleTick(now: .at(1))  // 0, 1, 2 settle and are reported accepted
        #expect(drain(&m).outcomes.map(\.jobID) == ["job-0", "job-1", "job-2"])

        // The gateway read late: job 1 (identifier 2) had a processing error; 2…5 were discarded.
        let notes = m.errorResponse(ErrorResponse(status: .processingError, identifier: 2))
        #expect(notes.lost == 0 && !notes.sequenceUnknown)
        #expect(m.queue.map(\.notification.jobID) == ["job-1", "job-2", "job-3", "job-4", "job-5"], "in order")
        #expect(m.queue.map(\.reported) == [true, true, false, false, false])
        let (outcomes, events) = drain(&m)
        #expect(outcomes.isEmpty)
        #expect(events.resentAfterSettle == 1 && events.replayed == 4 && events.retried == 1)

        _ = m.connectionLost()  // nothing kept: the error emptied the buffer
        write(&m, flush: 3, at: .at(2))
        _ = m.settleTick(now: .at(3))
        #expect(drain(&m).outcomes.map(\.jobID) == ["job-3", "job-4", "job-5"], "1 and 2 are not reported twice")
    }

    /// With `giveUpAfter` (the pipeline's `gateway.give_up_after_s`), status 1 is retried by time,
    /// not by count: past three attempts while within it, then dead-lettered `gateway-gave-up`.
    @Test func processingErrorsAreRetriedUntilTheGiveUpTime() {
        var c = BinaryConnectionStateMachine.Configuration()
        c.settleAfter = .seconds(1)
        c.maxAttempts = 3
        c.giveUpAfter = .seconds(10)
        var m = BinaryConnectionStateMachine(connection: 0, app: "com.example.shop", configuration: c)
        m.submitted([notification(0)])
        var at = NIODeadline.at(0)
        var flush: UInt64 = 1
        for _ in 0..<5 {
            write(&m, flush: flush, at: at)
            _ = m.errorResponse(ErrorResponse(status: .processingError, identifier: m.replay.oldestIdentifier!), now: at)
            _ = m.connectionLost()
            #expect(drain(&m).outcomes.isEmpty, "within its time: retried")
            at = at + .seconds(1)
            flush += 1
        }
        at = .at(11)
        write(&m, flush: flush, at: at)
        _ = m.errorResponse(ErrorResponse(status: .processingError, identifier: m.replay.oldestIdentifier!), now: at)
        let (outcomes, events) = drain(&m)
        #expect(outcomes.map(\.rejection) == [.transient(reason: "gateway-gave-up")])
        #expect(outcomes.first?.attempts == 6)
        #expect(events.gaveUp == 1)
    }

    /// Retried by time, a notification answered status 1 goes behind the queue: the ones the error
    /// discarded (and the rest) are written first, so one that keeps failing holds nothing back.
    @Test func aProcessingErrorRetriedByTimeGoesBehindTheOthers() {
        var c = BinaryConnectionStateMachine.Configuration()
        c.settleAfter = .seconds(1)
        c.giveUpAfter = .seconds(10)
        var m = BinaryConnectionStateMachine(connection: 0, app: "com.example.shop", configuration: c)
        m.submitted((0..<3).map(notification))
        write(&m, flush: 1, at: .at(0))
        m.submitted([notification(3)])
        _ = m.errorResponse(ErrorResponse(status: .processingError, identifier: 1), now: .at(0))  // job-0
        #expect(m.queue.map(\.notification.jobID) == ["job-1", "job-2", "job-3", "job-0"])
    }

    /// A refusal of a job already reported accepted is counted, not reported.
    @Test func aRefusalAfterSettlementIsCountedNotReported() {
        var m = machine()
        m.submitted((0..<4).map(notification))
        write(&m, flush: 1, at: .at(0))
        _ = m.settleTick(now: .at(1))
        _ = drain(&m)
        let notes = m.errorResponse(ErrorResponse(status: .invalidToken, identifier: 3))
        #expect(notes.refusedAfterSettle == ["job-2"])
        let (outcomes, events) = drain(&m)
        #expect(outcomes.isEmpty && events.refusedAfterSettle == 1 && events.resentAfterSettle == 1)
        #expect(m.queue.map(\.notification.jobID) == ["job-3"])
    }

    /// Past the grace window the settled are forgotten; an error naming one of them counts what it
    /// proves lost, with job ids, and resends what is still kept.
    @Test func pastTheGraceWindowTheLossIsCounted() {
        var m = machine()
        m.submitted((0..<4).map(notification))
        write(&m, flush: 1, at: .at(0))
        _ = m.settleTick(now: .at(1))
        m.submitted((4..<6).map(notification))
        write(&m, flush: 2, at: .at(1))
        _ = m.settleTick(now: .at(3))  // 0…3 forgotten (settled at 1 s + 2 s grace); 4, 5 settle
        #expect(m.replay.keptCount == 2 && m.replay.forgottenTotal == 4)
        _ = drain(&m)
        let notes = m.errorResponse(ErrorResponse(status: .invalidToken, identifier: 2))  // job-1, forgotten
        #expect(notes.sequenceUnknown && notes.lost == 2 && notes.lostJobs == ["job-2", "job-3"])
        #expect(notes.refusedAfterSettle == ["job-1"])
        let (outcomes, events) = drain(&m)
        #expect(outcomes.isEmpty)
        #expect(events.lostAfterSettle == 2 && events.sequenceUnknown == 1 && events.refusedAfterSettle == 1)
        #expect(m.queue.map(\.notification.jobID) == ["job-4", "job-5"] && m.queue.allSatisfy(\.reported))
    }

    /// A dropped connection resends the unsettled (ambiguous) and leaves the settled accepted; the
    /// drain probe's answer accepts what is unsettled, once.
    @Test func dropAndProbe() {
        var m = machine()
        m.submitted((0..<2).map(notification))
        write(&m, flush: 1, at: .at(0))
        _ = m.settleTick(now: .at(1))
        m.submitted((2..<4).map(notification))
        write(&m, flush: 2, at: .at(1))
        #expect(m.connectionLost() == 2)
        #expect(m.queue.map(\.notification.jobID) == ["job-2", "job-3"])
        write(&m, flush: 3, at: .at(1))
        m.probeAnswered()
        let (outcomes, events) = drain(&m)
        #expect(outcomes.map(\.jobID) == ["job-0", "job-1", "job-2", "job-3"])
        #expect(outcomes.map(\.attempts) == [1, 1, 2, 2] && events.ambiguous == 2)
        // The lost-and-resent ones carry it on their outcomes (counted per campaign by the pipeline).
        #expect(outcomes.map(\.ambiguousResends) == [0, 0, 1, 1])
        #expect(m.replay.isEmpty)
    }

    /// A campaign's jobs (`<campaign>:<token hex>`, kept compactly once settled) come back from the
    /// grace window as they went: the same frames on the wire, their job ids in the notes.
    @Test func settledCampaignJobsAreResentAsTheyWereWritten() {
        var m = machine()
        let jobs = (0..<4).map(campaignNotification)
        m.submitted(jobs)
        write(&m, flush: 1, at: .at(0))
        _ = m.settleTick(now: .at(1))
        #expect(drain(&m).outcomes.map(\.jobID) == jobs.map(\.jobID))
        let notes = m.errorResponse(ErrorResponse(status: .invalidToken, identifier: 2))
        #expect(notes.refusedAfterSettle == [jobs[1].jobID])
        #expect(m.queue.map(\.notification.jobID) == [jobs[2].jobID, jobs[3].jobID] && m.queue.allSatisfy(\.reported))
        #expect(m.queue.map(\.attempts) == [1, 1])
        _ = m.connectionLost()
        var again = ByteBufferAllocator().buffer(capacity: 4096)
        while m.mayTakeFrame { m.takeFrame(into: &again) }
        var expected: [UInt8] = []
        for (n, identifier) in zip(jobs[2...], UInt32(5)...) {
            n.payload.withUnsafeBytes { payload in
                FrameEncoder.writeCommand2(
                    token: n.token, payload: payload, identifier: identifier, expiry: n.expiry, priority: n.priority, into: &expected)
            }
        }
        #expect(Array(again.readableBytesView) == expected)
    }

    func campaignNotification(_ n: Int) -> PushNotification {
        let token = try! DeviceToken(bytes: (0..<32).map { UInt8(truncatingIfNeeded: $0 * 7 + n) })
        return PushNotification(
            jobID: "spring-sale:\(token.hex)", app: "com.example.shop", token: token,
            payload: Array(#"{"aps":{"alert":"Spring sale"}}"#.utf8), expiry: 1_900_000_000, priority: .conservePower,
            campaign: "spring-sale", position: SourcePosition(partition: 3, offset: Int64(n)))
    }

    /// A notification of a cancelled campaign is settled `cancelled` where it would be written, never
    /// encoded; the others are written as before, in order; a change of the set applies to what is queued.
    @Test func aCancelledCampaignsNotificationsSettleCancelledInsteadOfBeingWritten() {
        let cancellations = CampaignCancellations()
        var c = BinaryConnectionStateMachine.Configuration()
        c.settleAfter = .seconds(1)
        c.cancellations = cancellations
        var m = BinaryConnectionStateMachine(connection: 0, app: "com.example.shop", configuration: c)
        let batch = (0..<6).map { n in
            var x = notification(n)
            x.campaign = n % 2 == 0 ? "wrong" : "right"
            return x
        }
        m.submitted(batch)
        #expect(write(&m, flush: 1, at: .at(0)) == 6, "nothing cancelled yet")
        m.submitted(batch)
        cancellations.replace(cancelled: ["wrong"])
        #expect(write(&m, flush: 2, at: .at(0)) == 3, "only the other campaign's are written")
        let cancelled = drain(&m).outcomes
        #expect(cancelled.map(\.jobID) == ["job-0", "job-2", "job-4"] && cancelled.allSatisfy { $0.kind == .cancelled })
        _ = m.settleTick(now: .at(1))
        #expect(drain(&m).outcomes.filter { $0.kind == .accepted }.count == 9)
        // Paused instead: held back (the pipeline keeps them in Redis until the resume), not written.
        m.submitted(batch)
        cancellations.replace(cancelled: [], paused: ["right"])
        #expect(write(&m, flush: 3, at: .at(0)) == 3)
        let held = drain(&m).outcomes
        #expect(held.map(\.jobID) == ["job-1", "job-3", "job-5"] && held.allSatisfy { $0.kind == .deferred })
    }

    func notification(_ n: Int) -> PushNotification {
        var bytes = [UInt8](repeating: 0x22, count: 32)
        bytes[31] = UInt8(n)
        return PushNotification(
            jobID: "job-\(n)", app: "com.example.shop", token: try! DeviceToken(bytes: bytes),
            payload: Array(#"{"aps":{"alert":"hello there"},"x":1}"#.utf8), expiry: 0, priority: .immediate)
    }
}
