import Testing

@testable import Kafka

/// The consumer's lifecycle as events and actions, without librdkafka (`ConsumerStateMachine`).
@Suite struct ConsumerStateMachineTests {
    @Test func runPollsUntilAStopThenCloses() {
        var m = ConsumerStateMachine()
        #expect(m.state == .initializing)
        #expect(m.acceptsCommitRequests, "a commit asked before run() waits for the poll thread")
        let r1 = m.run()
        #expect(r1 == .startPollThread)
        #expect(m.state == .consuming(.polling))
        let r2 = m.nextPollAction()
        #expect(r2 == .poll)
        let r3 = m.nextPollAction()
        #expect(r3 == .poll)
        #expect(!m.isClosing)

        let r4 = m.stop()
        #expect(r4 == .wakePollThread)
        #expect(m.state == .closing)
        #expect(m.isClosing, "the rebalance callback does no blocking lookup from here on")
        #expect(!m.acceptsCommitRequests)
        let r5 = m.nextPollAction()
        #expect(r5 == .close)
        let r6 = m.stop()
        #expect(r6 == .none, "a second stop (close() after a cancellation) changes nothing")
        #expect(!m.isFinished)

        m.closed()
        #expect(m.state == .finished)
        #expect(m.isFinished)
        let r7 = m.stop()
        #expect(r7 == .none)
        let r8 = m.run()
        #expect(r8 == .awaitClosed, "run() after the close returns at once")
        #expect(!m.acceptsCommitRequests)
    }

    @Test func aFullBufferHoldsUntilHalfDrained() {
        var m = ConsumerStateMachine()
        _ = m.run()
        let r9 = m.bufferDrained()
        #expect(!r9, "nothing to resume while polling")
        let r10 = m.bufferFull()
        #expect(r10, "the first time the buffer fills, the poll thread holds (a pause counted)")
        let r11 = m.bufferFull()
        #expect(!r11, "already holding: not counted again")
        #expect(m.isHolding)
        let r12 = m.nextPollAction()
        #expect(r12 == .hold)
        let r13 = m.nextPollAction()
        #expect(r13 == .hold, "held until woken by a drain")

        let r14 = m.bufferDrained()
        #expect(r14, "drained to half: the holding poll thread is woken")
        let r15 = m.bufferDrained()
        #expect(!r15, "one wake-up per hold")
        #expect(m.isHolding, "until the poll thread takes its next step")
        let r16 = m.nextPollAction()
        #expect(r16 == .resume)
        #expect(m.state == .consuming(.polling))
        let r17 = m.nextPollAction()
        #expect(r17 == .poll)

        let r18 = m.bufferFull()
        #expect(r18, "a new hold after polling again is counted")
        let r19 = m.nextPollAction()
        #expect(r19 == .hold)
    }

    @Test func aStopEndsAHold() {
        var m = ConsumerStateMachine()
        _ = m.run()
        let r20 = m.bufferFull()
        #expect(r20)
        let r21 = m.stop()
        #expect(r21 == .wakePollThread)
        #expect(!m.isHolding)
        let r22 = m.nextPollAction()
        #expect(r22 == .close, "closing, not holding, however full the buffer")
        let r23 = m.bufferDrained()
        #expect(!r23)
        let r24 = m.bufferFull()
        #expect(!r24)
    }

    @Test func aStopBeforeRunClosesWithoutAPollThread() {
        var m = ConsumerStateMachine()
        let r25 = m.stop()
        #expect(r25 == .closeWithoutPollThread)
        #expect(m.state == .closing)
        let r26 = m.run()
        #expect(r26 == .awaitClosed, "run() while that close runs waits for it")
        let r27 = m.stop()
        #expect(r27 == .none)
        m.closed()
        let r28 = m.run()
        #expect(r28 == .awaitClosed)
        #expect(m.isFinished)
    }

    @Test func runTwiceIsRefused() {
        var m = ConsumerStateMachine()
        let r29 = m.run()
        #expect(r29 == .startPollThread)
        let r30 = m.run()
        #expect(r30 == .alreadyRunning)
        _ = m.bufferFull()
        let r31 = m.run()
        #expect(r31 == .alreadyRunning)
        #expect(m.state == .consuming(.holding(drained: false)), "a refused run() changes nothing")
    }
}
