import APNsProtocol
import Foundation
import GatewaySimulator
import HTTP2Simulator
import Kafka
import NIOPosix
import Sender
import TestSupport
import Testing

@testable import Pipeline

/// The waits between stages end when their task is cancelled: a stop never hangs on a stage that will
/// not take or give again (issue 28, `docs/design.md §1.3`). Pure, no servers.
@Suite struct HandoffCancellationTests {
    @Test func aBudgetWaitEndsWhenCancelled() async {
        let budget = InFlightBudget(capacity: 10)
        #expect(await budget.acquire(10))
        let waiting = Task { await budget.acquire(5) }
        // The budget is spent: the wait would last until a release that never comes.
        try? await Task.sleep(for: .milliseconds(50))
        waiting.cancel()
        #expect(await waiting.value == false, "a cancelled wait takes nothing")
        #expect(budget.inFlight == 10)
        budget.release(10)
        #expect(budget.inFlight == 0)
        #expect(await budget.acquire(10), "the cancelled waiter left no claim behind")
    }

    @Test func aCancelledWaiterDoesNotHoldUpTheOnesBehindIt() async {
        let budget = InFlightBudget(capacity: 10)
        #expect(await budget.acquire(8))
        let big = Task { await budget.acquire(10) }
        try? await Task.sleep(for: .milliseconds(50))
        let small = Task { await budget.acquire(2) }
        try? await Task.sleep(for: .milliseconds(50))
        big.cancel()
        #expect(await big.value == false)
        #expect(await small.value == true, "the waiter behind the cancelled one fits and gets its share")
    }

    @Test func anAlreadyCancelledTaskDoesNotWait() async {
        let budget = InFlightBudget(capacity: 1)
        #expect(await budget.acquire(1))
        let t = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await budget.acquire(1)
        }
        #expect(await t.value == false)
    }

    @Test func aFullHandoffPutEndsWhenCancelled() async {
        let handoff = BatchHandoff<Int>(capacity: 1)
        let producer = Task { await handoff.put(1) }  // nobody takes: waits for a consumer that never comes
        try? await Task.sleep(for: .milliseconds(50))
        producer.cancel()
        await producer.value
        // The cancelled put dropped its element.
        handoff.finish()
        var batches = handoff.batches.makeAsyncIterator()
        #expect(await batches.next() == nil)
    }

    @Test func anEmptyHandoffNextEndsWhenCancelled() async {
        let handoff = BatchHandoff<Int>(capacity: 2)
        let consumer = Task {
            var batches = handoff.batches.makeAsyncIterator()
            return await batches.next()
        }
        try? await Task.sleep(for: .milliseconds(50))
        consumer.cancel()
        #expect(await consumer.value == nil)
        // The hand-off still works for another consumer afterwards, in order.
        let other = Task {
            var got: [Int] = []
            for await n in handoff.batches { got.append(n) }
            return got
        }
        await handoff.put(7)
        await handoff.put(8)
        handoff.finish()
        #expect(await other.value == [7, 8])
    }

    @Test func anEmptySettlerInboxTakeEndsWhenCancelled() async {
        let inbox = SettlerInbox()
        let settler = Task { await inbox.take() }  // nothing is put: waits for a put that never comes
        try? await Task.sleep(for: .milliseconds(50))
        settler.cancel()
        #expect(await settler.value == nil)
        // The inbox still works afterwards, and a cancelled taker still gets what is pending.
        var item = SettlerInbox.Item()
        item.events.received = 3
        inbox.put(item)
        let late = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await inbox.take()
        }
        #expect(await late.value?.events.received == 3)
        let again = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await inbox.take()
        }
        #expect(await again.value == nil, "cancelled with nothing pending: no wait")
    }

    @Test func aStopSignalWakesEveryWaiterAndLaterOnesAtOnce() async {
        let signal = StopSignal()
        let waiters = (0..<3).map { _ in Task { await signal.wait() } }
        #expect(!signal.isFired)
        signal.fire()
        for w in waiters { await w.value }
        #expect(signal.isFired)
        await signal.wait()  // fired before the wait began: no wait
    }

    @Test func aStopSignalWaitEndsWhenCancelledWithoutFiring() async {
        let signal = StopSignal()
        let waiting = Task { await signal.wait() }
        waiting.cancel()
        await waiting.value
        #expect(!signal.isFired, "the wait ended by its cancellation, not by the signal")
    }

    @Test func sendOrderPutsTheIntakesBatchesBackInOrderAndLetsRegatesThrough() {
        var order = SendOrder<String>()
        #expect(order.arrived("b1", intakeOrder: 1).isEmpty, "batch 1 waits for batch 0")
        #expect(order.arrived("r", intakeOrder: nil) == ["r"], "a batch gated again goes at once")
        #expect(order.arrived("b3", intakeOrder: 3).isEmpty)
        #expect(order.waitingCount == 2)
        #expect(order.arrived("b0", intakeOrder: 0) == ["b0", "b1"], "batch 0, then what waited for it")
        #expect(order.arrived("b2", intakeOrder: 2) == ["b2", "b3"])
        #expect(order.arrived("b4", intakeOrder: 4) == ["b4"])
        #expect(order.waitingCount == 0)
        // A gap at the end (the intake dropped batch 5 as it stopped): the rest goes, in order.
        #expect(order.arrived("b7", intakeOrder: 7).isEmpty)
        #expect(order.arrived("b6", intakeOrder: 6).isEmpty)
        #expect(order.rest() == ["b6", "b7"])
        #expect(order.waitingCount == 0)
    }

    @Test func sharedBatchesGoEachToOneConsumerOldestFirst() async {
        let handoff = BatchHandoff<Int>(capacity: 1)
        let consumers = (0..<3).map { _ in
            Task {
                var taken: [Int] = []
                for await n in handoff.sharedBatches { taken.append(n) }
                return taken
            }
        }
        for n in 0..<300 { await handoff.put(n) }
        handoff.finish()
        var all: [Int] = []
        for c in consumers {
            let taken = await c.value
            #expect(taken == taken.sorted(), "each consumer gets its batches oldest first")
            all += taken
        }
        #expect(all.sorted() == Array(0..<300), "each batch goes to exactly one consumer")
    }

    @Test func regatesComeBackInOrderAndEndWhenCancelled() async {
        let regates = Regates()
        let handoff = BatchHandoff<DecodedBatch>(capacity: 4)
        let running = Task { await regates.run { await handoff.put($0) } }
        for n in 1...2 {
            regates.add(DecodedBatch(messages: [], jobs: [], jobMessages: Array(repeating: 0, count: n), deadLetters: [], isRetry: true))
        }
        var batches = handoff.batches.makeAsyncIterator()
        #expect(await batches.next()?.jobMessages.count == 1)
        #expect(await batches.next()?.jobMessages.count == 2)
        running.cancel()
        await running.value  // ends: a lane's group is never held by its regates
    }
}

/// A SIGTERM ends `run` while Apple is unreachable (issue 28 item 4): a real `apns-pipeline run` with
/// thousands of jobs taken, its HTTP/2 host a socket that accepts and never answers (the TLS handshake
/// hangs), Kafka and Redis real. It exits 0 after its drain timeout, settles nothing it was not
/// answered for, and a pipeline pointed at a working simulator afterwards delivers every job: the
/// committed offsets did not cover the unsettled ones.
@Suite(
    .serialized,
    .enabled(if: RedisServer.available && PipelineProcess.binary != nil, "needs redis-server and the built apns-pipeline (ops/test)"))
struct StopWithAppleUnreachableTests {
    @Test func sigtermEndsAndLosesNothing() async throws {
        let stack = try await Stack()
        let blackHole = try BlackHole()
        defer { blackHole.close() }
        let d = TestCertificates.directory
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("pipeline.yaml").path
        try """
        kafka:
          bootstrap_servers: "\(stack.cluster.bootstrapServers)"
          group: stop-test
          batch_size: 500
          session_timeout_ms: 6000
        redis:
          url: \(stack.redis.url)
        http2:
          hosts: ["127.0.0.1:\(blackHole.port)"]
          server_hostname: localhost
          ca: \(d)/ca.pem
          connections: 2
        apps:
          - bundle_id: \(shop)
            token: { key: \(TestCertificates.tokenKeyPath), key_id: \(TestCertificates.tokenKeyID), team_id: \(TestCertificates.tokenTeamID) }
        pipeline:
          max_in_flight: 2000
          drain_timeout_s: 2
        feedback:
          interval_minutes: 0
        logging:
          level: info

        """.write(toFile: file, atomically: true, encoding: .utf8)
        let log = directory.appendingPathComponent("run.log").path
        let tokens = (0..<3000).map(token)
        try await stack.publish(campaign: "stop", template: template, tokens: tokens)
        let process = try PipelineProcess(pipelineFile: file, logFile: log)
        // The budget fills: 2 000 jobs gated (leased) and waiting for a connection that never comes up.
        try await eventually("jobs taken and leased", timeout: .seconds(300)) {
            try await stack.tokenHashLength("inflight", shop) > 0 || !process.process.isRunning
        }
        #expect(process.process.isRunning, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        try await Task.sleep(for: .seconds(1))
        process.process.terminate()
        // Drain timeout 2 s + 10 s is the promise; 60 s only keeps a broken build from hanging the suite.
        let outer = ContinuousClock.now + .seconds(60)
        while process.process.isRunning && ContinuousClock.now < outer { try await Task.sleep(for: .milliseconds(50)) }
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(!process.process.isRunning, "run did not stop: \(text)")
        if process.process.isRunning { await process.crash() }
        #expect(process.process.terminationStatus == 0, "\(text)")
        #expect((try await stack.campaign("stop")["accepted"] ?? 0) == 0)

        // Apple back: every job comes again from Kafka and is delivered once.
        let sim = try await HTTP2Simulator.startedForTests(faults: HTTP2FaultScript())
        var c = HTTP2PipelineTests.configuration(stack, sim)
        c.kafka.group = "stop-test"
        let pipeline = RunningPipeline(c)
        try await stack.waitAccepted("stop", count: 3000)
        try await pipeline.stop()
        let recorded = HTTP2PipelineTests.recorded(sim, campaign: "stop")
        #expect(recorded.count == 3000)
        #expect(recorded.values.allSatisfy { $0 == 1 })
        try await sim.stop()
        await stack.stop()
    }
}

/// A TCP port that accepts connections (the kernel completes the handshake) and never reads or
/// answers: an Apple front end that went silent.
/// An HTTP/2 transport whose host never answers (the TLS handshake hangs) fills its connection's
/// queue; the caller waiting for room stops waiting once its task is cancelled (a stop past its drain
/// deadline), and the drain then reports what is unanswered. Real socket, no timing.
@Suite struct HTTP2SendWaitTests {
    @Test func aSendWaitingForRoomEndsWhenCancelled() async throws {
        let blackHole = try BlackHole()
        defer { blackHole.close() }
        let app = "com.example.shop"
        var c = HTTP2TransportConfiguration(
            app: app, authentication: .certificate(.test(app: app, in: TestCertificates.directory)),
            hosts: [GatewayAddress(host: "127.0.0.1", port: blackHole.port)])
        c.connections = 1
        c.serverHostname = "localhost"
        let transport = try HTTP2Transport(configuration: c, group: MultiThreadedEventLoopGroup.singleton, onOutcomes: { _ in })
        let notifications = (0..<1000).map { n in
            PushNotification(
                jobID: "j\(n)", app: app, token: try! DeviceToken(bytes: [UInt8](repeating: UInt8(n % 251), count: 32)),
                payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), expiry: 0, priority: .immediate)
        }
        let sending = Task { try await transport.send(notifications) }
        // The connection never comes up: 1 000 queued is past its room, so the caller waits.
        try await eventually("the caller waits for room") { (await transport.statistics().first?.callerWaits ?? 0) > 0 }
        sending.cancel()
        await #expect(throws: CancellationError.self) { try await sending.value }
        let drained = await transport.drainAndClose(before: .now)
        #expect(drained.count == 1)
    }
}

final class BlackHole: @unchecked Sendable {
    let port: Int
    private let fd: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 128) == 0 else { throw TestFailure("black hole: bind/listen failed") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(fd) }
}

/// The in-flight budget counts the bytes of large messages too (issue 28 item 2): a batch of ~1 MB jobs
/// waits for bytes, not only for a count, and settling them gives the bytes back. Pure, no servers.
@Suite struct BudgetBytesTests {
    private func message(_ offset: Int64, bytes: Int, partition: Int32 = 0) -> KafkaConsumerMessage {
        KafkaConsumerMessage(
            topic: "apns.jobs", partition: partition, offset: offset, key: nil, value: [UInt8](repeating: 0x20, count: bytes))
    }

    @Test func largeMessagesHoldTheirBytesUntilSettled() async {
        let budget = InFlightBudget(capacity: 1000, byteCapacity: 3 << 20)
        let first = (0..<2).map { message($0, bytes: 1 << 20) }
        #expect(await budget.acquire(batch: first))
        #expect(budget.inFlightBytes == 2 << 20)
        // Two more 1 MiB messages do not fit in the 1 MiB left, though the count is far from spent.
        let second = (2..<4).map { message($0, bytes: 1 << 20) }
        let waiting = Task { await budget.acquire(batch: second) }
        try? await Task.sleep(for: .milliseconds(100))
        #expect(budget.inFlight == 2, "the second batch is still waiting")
        // One settled: 2 MiB free, it goes.
        budget.release(refs: [first[0].ref])
        #expect(await waiting.value)
        #expect(budget.inFlight == 3)
        #expect(budget.inFlightBytes == 3 << 20)
        budget.release(refs: [first[1].ref] + second.map(\.ref))
        #expect(budget.inFlight == 0 && budget.inFlightBytes == 0)
    }

    @Test func smallMessagesCostNoBytesAndUnknownRefsReleaseNone() async {
        let budget = InFlightBudget(capacity: 10, byteCapacity: 1 << 20)
        let batch = (0..<5).map { message($0, bytes: 500) }
        #expect(await budget.acquire(batch: batch))
        #expect(budget.inFlightBytes == 0)
        let big = message(9, bytes: 600 << 10, partition: 3)
        #expect(await budget.acquire(batch: [big]))
        #expect(budget.inFlightBytes == 600 << 10)
        // A ref settled twice (a redelivered copy) gives its bytes back once.
        budget.release(refs: [big.ref])
        budget.release(refs: [big.ref])
        #expect(budget.inFlightBytes == 0)
        budget.release(refs: batch.map(\.ref))
        #expect(budget.inFlight == 0)
    }

    @Test func aBatchLargerThanTheWholeBudgetTakesAllOfItAndGivesItBack() async {
        let budget = InFlightBudget(capacity: 10, byteCapacity: 1 << 20)
        let huge = [message(0, bytes: 3 << 20)]
        #expect(await budget.acquire(batch: huge))
        #expect(budget.inFlightBytes == 1 << 20)
        budget.release(refs: huge.map(\.ref))
        #expect(budget.inFlightBytes == 0)
    }
}
