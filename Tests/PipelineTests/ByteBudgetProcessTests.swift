import Foundation
import Kafka
import Pipeline
import Redis
import TestSupport
import Testing
import Tools

/// Issue 28 (2): `run`'s memory is bounded in bytes. A real `apns-pipeline run` process takes ~0.9 MB
/// jobs — valid ones (an unknown top-level key carries the bulk: design §3.1 ignores it) and refused ones
/// that must be dead-lettered — while the dead-letter topic fails: the refused jobs' letters wait,
/// unsettled and holding their bytes against `pipeline.max_in_flight_bytes`, so ingest waits instead of
/// taking the rest. The process's peak RSS (VmHWM) stays under the byte budget plus a generous allowance
/// for the process itself and its fixed buffers (consumer 32 MiB, librdkafka 8 MiB), far below the
/// ~345 MB of messages published; once the topic works again every job is delivered or dead-lettered:
/// nothing lost. (Measured 2026-11-26 with a 16 MiB budget: VmHWM 78–88 MiB while the topic failed,
/// 140–210 MiB at the end, when the letters are written at once. With
/// the byte budget set to 64 GiB the same run peaked at 86/118 MiB: at this volume, which the mock's
/// ~5 MiB per partition limits, the consumer's and librdkafka's own bounds keep the peak low too, so
/// this test proves the bound holds and nothing is lost, not that the byte budget alone is what holds it;
/// `BudgetBytesTests` shows the budget's accounting blocks.)
@Suite(
    .serialized,
    .enabled(if: RedisServer.available && PipelineProcess.binary != nil, "needs redis-server and the built apns-pipeline (ops/test)"))
struct ByteBudgetProcessTests {
    static let budget = 64 << 20
    /// The process itself (a debug build, ~40–100 MiB at rest), the consumer's buffer, librdkafka's
    /// queue and one batch taken whole beyond the budget: generous, so a loaded machine cannot fail it.
    static let allowance = 250 << 20
    static let partitions = 128
    static let jobs = 384

    @Test func bigJobsWithTheDeadLetterTopicFailingStayWithinTheByteBudget() async throws {
        // 128 partitions, 3 jobs each (~2.7 MB): under librdkafka's mock's ~5 MiB per partition, which
        // drops older data silently.
        let stack = try await Stack(partitions: Int32(Self.partitions))
        stack.cluster.setTopicError("apns.jobs.dlq", code: 29)  // TOPIC_AUTHORIZATION_FAILED
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bytes-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = try stack.pipelineFile()
        var yaml = try String(contentsOfFile: file, encoding: .utf8)
        yaml = yaml.replacingOccurrences(
            of: "  max_in_flight: 2000\n", with: "  max_in_flight: 2000\n  max_in_flight_bytes: \(Self.budget)\n")
        yaml = yaml.replacingOccurrences(of: "  batch_size: 500\n", with: "  batch_size: 500\n  dead_letter_timeout_ms: 1000\n")
        #expect(yaml.contains("max_in_flight_bytes") && yaml.contains("dead_letter_timeout_ms"))
        try yaml.write(toFile: file, atomically: true, encoding: .utf8)

        // 192 valid jobs of campaign "big" and 192 refused ones (a token that is not hex), ~0.9 MB each,
        // spread over every partition, refused and valid mixed.
        let filler = String(repeating: "x", count: 900_000)
        var messages: [KafkaProducerMessage] = []
        for i in 0..<Self.jobs {
            let value: [UInt8]
            if i % 2 == 0 {
                value = Array(
                    #"{"id":"bad-\#(i)","app":"com.example.shop","token":"abc","notes":"\#(filler)","payload":{"aps":{"alert":"hi"}}}"#.utf8
                )
            } else {
                let job = Campaign.job(template: template, campaign: "big", recipient: .init(token: token(i), language: nil))
                // An unknown top-level key carries the bulk: valid, ignored by the decoder.
                value = Array(#"{"notes":"\#(filler)","#.utf8) + job.dropFirst()
            }
            messages.append(KafkaProducerMessage(topic: "apns.jobs", partition: Int32(i % Self.partitions), key: nil, value: value))
        }
        let big = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(
                bootstrapServers: stack.cluster.bootstrapServers, properties: ["message.max.bytes": "4000000"]),
            logger: testLogger)
        let log = directory.appendingPathComponent("run.log").path
        let process = try PipelineProcess(pipelineFile: file, logFile: log)
        defer { if process.process.isRunning { process.crashWithoutWaiting() } }
        try await big.sendBatch(messages)
        await big.close()
        let logText = { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

        // The dead-letter topic refuses: letters are retried, their messages stay unsettled and hold bytes.
        try await eventually("dead-letter writes failing", timeout: .seconds(300)) {
            try await stack.store.readStats().totals[.deadLetterFailures] >= 3 || !process.process.isRunning
        }
        #expect(process.process.isRunning, "\(logText())")
        #expect(try await stack.store.readStats().totals[.deadLettered] == 0, "nothing settled before its letter is stored")
        let whileFailing = try Self.peakRSS(of: process.process.processIdentifier)

        // The topic works again: every refused job dead-lettered once, every valid one delivered once.
        stack.cluster.setTopicError("apns.jobs.dlq", code: 0)
        try await eventually("every dead letter stored", timeout: .seconds(300)) {
            try await stack.store.readStats().totals[.deadLettered] >= Int64(Self.jobs / 2)
        }
        try await stack.waitAccepted("big", count: Int64(Self.jobs / 2), timeout: .seconds(300))
        let peak = try Self.peakRSS(of: process.process.processIdentifier)
        #expect(await process.stop() == 0, "\(logText())")
        let totals = try await stack.store.readStats().totals
        #expect(totals[.deadLettered] == Int64(Self.jobs / 2))
        let recorded = stack.recorded(campaign: "big")
        #expect(recorded.count == Self.jobs / 2, "every valid job delivered")
        #expect(recorded.values.allSatisfy { $0 == 1 })
        print(
            "byte budget \(Self.budget >> 20) MiB: run's VmHWM \(whileFailing >> 20) MiB while the DLQ failed, \(peak >> 20) MiB at the end (\(Self.jobs) jobs, ~\(Self.jobs * 9 / 10) MB)"
        )
        #expect(peak < Self.budget + Self.allowance, "run's peak RSS \(peak >> 20) MiB")
        await stack.stop()
    }

    /// VmHWM (peak resident set) of a process, in bytes.
    static func peakRSS(of pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { throw TestFailure("no VmHWM in /proc/\(pid)/status") }
        return kb << 10
    }
}
