import Foundation
import Jobs
import Kafka
import Logging
import Synchronization

/// `apns-bench kafka [N] [--partitions P] [--compression C] [--max-buffered M]`: consumer throughput of our `KafkaConsumer`
/// against `kcat -C` reading the same topic of N jobs from the same mock cluster, in one run.
///
/// librdkafka's mock keeps at most ~5 MiB / 100k message sets per partition and silently drops older
/// data, so the topic gets enough partitions and the producer compresses (lz4; both readers decompress
/// alike); both readers must then see exactly N messages, or the benchmark fails.
enum KafkaBenchmark {
    static let topic = "apns.jobs.bench"

    struct Options {
        var messages = 1_000_000
        var partitions: Int32 = 32
        var compression = "lz4"
        /// The consumer's `maxBufferedMessages`: when the reader is slower than fetching (decoding), the
        /// buffer fills and the partitions are paused until it is half drained.
        var maxBuffered = 50_000
    }

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "--partitions": options.partitions = rest.popFirst().flatMap { Int32($0) } ?? options.partitions
            case "--compression": options.compression = rest.popFirst() ?? options.compression
            case "--max-buffered": options.maxBuffered = rest.popFirst().flatMap { Int($0) } ?? options.maxBuffered
            default:
                guard let n = Int(argument), n > 0 else {
                    print("usage: apns-bench kafka [N] [--partitions P] [--compression lz4|zstd|none] [--max-buffered M]")
                    exit(2)
                }
                options.messages = n
            }
        }
        return options
    }

    struct Row {
        var reader: String
        var seen: Int
        var seconds: Double
        var perSecond: Double { Double(seen) / seconds }
    }

    static func run(arguments: [String]) async throws {
        let options = parse(arguments)
        let n = options.messages
        var logger = Logger(label: "apns-bench-kafka")
        logger.logLevel = .error  // offset gaps (data dropped by the mock) are logged at error level

        let cluster = try MockCluster(
            brokers: 3, topics: [.init(name: topic, partitions: options.partitions)], logger: logger)
        defer { cluster.stop() }

        // Produce.
        let producer = try KafkaProducer.started(
            configuration: .init(
                bootstrapServers: cluster.bootstrapServers,
                properties: [
                    "compression.type": options.compression, "linger.ms": "20", "batch.num.messages": "10000",
                    "batch.size": "4000000", "queue.buffering.max.messages": "400000",
                ]),
            logger: logger)
        var valueBytes = 0
        let produceStart = now()
        var chunk: [KafkaProducerMessage] = []
        let chunkSize = 50_000
        chunk.reserveCapacity(chunkSize)
        for i in 0..<n {
            let (key, value) = JobsBenchmark.jobAndKey(i)
            valueBytes += value.count
            chunk.append(KafkaProducerMessage(topic: topic, key: key, value: value))
            if chunk.count == chunkSize || i == n - 1 {
                try await producer.sendBatch(chunk)
                chunk.removeAll(keepingCapacity: true)
            }
        }
        let produceSeconds = seconds(since: produceStart)
        await producer.close()
        print("\n## Kafka consumer throughput: ours vs kcat -C (same mock cluster, same topic, one run)")
        print(
            "\(n.formatted()) jobs of \(valueBytes / n) bytes (key: token hex), topic of \(options.partitions) partitions on 3 mock brokers, compression \(options.compression), consumer buffer \(options.maxBuffered.formatted()) messages; produced in \(String(format: "%.1f", produceSeconds)) s (\(Int(Double(n) / produceSeconds).formatted()) msgs/s)"
        )

        var rows: [Row] = []
        var failures: [String] = []
        func check(_ row: Row) {
            if row.seen != n { failures.append("\(row.reader): saw \(row.seen) of \(n) messages") }
        }

        // (a) kcat, to /dev/null: the figure to beat; then once more into a pipe whose lines we count,
        // proving the data is all there (kcat -e stops at the end of every partition).
        let devNull = try kcat(cluster.bootstrapServers, countLines: false)
        let counted = try kcat(cluster.bootstrapServers, countLines: true)
        rows.append(Row(reader: "kcat -C -o beginning -e -q > /dev/null (baseline)", seen: counted.lines, seconds: devNull.seconds))
        rows.append(Row(reader: "kcat -C … \\| newline count (verification run)", seen: counted.lines, seconds: counted.seconds))
        check(rows[1])

        // (b) ours: group consume, nextBatch until N, settle each batch.
        let ours = try await consume(cluster.bootstrapServers, n: n, maxBuffered: options.maxBuffered, decode: false, logger: logger)
        rows.append(Row(reader: "KafkaConsumer, from partition assignment", seen: ours.seen, seconds: ours.fromAssignment))
        rows.append(Row(reader: "KafkaConsumer, incl. consumer-group join", seen: ours.seen, seconds: ours.total))
        check(rows[rows.count - 1])
        let decoding = try await consume(cluster.bootstrapServers, n: n, maxBuffered: options.maxBuffered, decode: true, logger: logger)
        rows.append(
            Row(
                reader: "KafkaConsumer + JobDecoder.decode, from partition assignment", seen: decoding.seen,
                seconds: decoding.fromAssignment))
        check(rows[rows.count - 1])
        for (name, result) in [("KafkaConsumer", ours), ("KafkaConsumer + JobDecoder", decoding)] {
            if result.gaps > 0 { failures.append("\(name) reported \(result.gaps) offset gaps: the mock dropped data") }
            if result.partitions != Int(options.partitions) {
                failures.append("\(name) owned \(result.partitions) of \(options.partitions) partitions at the end")
            }
        }
        for (name, result) in [("KafkaConsumer", ours), ("KafkaConsumer + JobDecoder", decoding)] {
            print(
                "\(name): \(result.batches.formatted()) batches, \(String(format: "%.2f", result.waited)) s waiting in nextBatch() after assignment, buffer full (consumer held) \(result.pauses) times"
            )
        }
        if decoding.decoded != decoding.seen { failures.append("JobDecoder refused \(decoding.seen - decoding.decoded) jobs") }

        let baseline = rows[0].perSecond
        print("| reader | messages | seconds | msgs/s | vs kcat |")
        print("|---|---:|---:|---:|---:|")
        for row in rows {
            print(
                "| \(row.reader) | \(row.seen.formatted()) | \(String(format: "%.2f", row.seconds)) | \(Int(row.perSecond).formatted()) | \(String(format: "%.2f×", row.perSecond / baseline)) |"
            )
        }
        print(
            "(kcat: one process, simple assign, writes every value to stdout; ours: consumer group, messages copied into Swift values, batches handed out, settled and committed. The group join of a new group takes ~3 s on the mock; kcat's time includes its process start and metadata.)"
        )
        if !failures.isEmpty {
            for f in failures { print("FAILED: \(f)") }
            FileHandle.standardError.write(Data("kafka benchmark FAILED: not every reader saw all \(n) messages\n".utf8))
            exit(1)
        }
    }

    // MARK: kcat

    static func kcat(_ bootstrap: String, countLines: Bool) throws -> (seconds: Double, lines: Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q"]
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = nil  // the malloc interposer is for our process only
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        let pipe = Pipe()
        process.standardOutput = countLines ? pipe : FileHandle.nullDevice
        let start = now()
        try process.run()
        var lines = 0
        if countLines {
            let fd = pipe.fileHandleForReading.fileDescriptor
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                let got = read(fd, buffer.baseAddress, buffer.count)
                if got < 0 && errno == EINTR { continue }
                if got <= 0 { break }
                for byte in UnsafeRawBufferPointer(rebasing: buffer[0..<got]) where byte == 0x0A { lines += 1 }
            }
        }
        process.waitUntilExit()
        let elapsed = seconds(since: start)
        guard process.terminationStatus == 0 else {
            throw BenchmarkError("kcat exited with status \(process.terminationStatus)")
        }
        return (elapsed, lines)
    }

    // MARK: ours

    final class Progress: Sendable {
        let messages = Atomic<Int>(0)
    }

    struct ConsumeResult {
        var seen: Int
        var total: Double
        var fromAssignment: Double
        /// Partitions this consumer owned at the end: all of them, or a rebalance happened.
        var partitions: Int
        var decoded: Int
        var gaps: Int
        /// Time spent in nextBatch() waiting for messages, and how often the buffer was full.
        var waited: Double
        var pauses: Int
        var batches: Int
    }

    static func consume(_ bootstrap: String, n: Int, maxBuffered: Int, decode: Bool, logger: Logger) async throws -> ConsumeResult {
        let start = now()
        let consumer = try KafkaConsumer.started(
            configuration: .init(
                bootstrapServers: bootstrap, groupID: "apns-bench-\(decode ? "decode" : "read")-\(getpid())", topics: [topic],
                sessionTimeout: .seconds(6), maxBatchSize: 5000, maxBufferedMessages: maxBuffered, commitInterval: .seconds(1)),
            logger: logger)
        // Watchdog: no progress for 20 s means messages are missing; closing ends nextBatch() with nil.
        let progress = Progress()
        let watchdog = Task {
            var last = -1
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(20))
                let current = progress.messages.load(ordering: .relaxed)
                if current == last {
                    FileHandle.standardError.write(Data("kafka benchmark: no message for 20 s after \(current): giving up\n".utf8))
                    await consumer.close()
                    return
                }
                last = current
            }
        }
        let decoder = JobDecoder()
        let validAt: UInt32 = 1_767_000_000
        var seen = 0
        var decoded = 0
        // The group join (~3 s on the mock, group.initial.rebalance.delay.ms on a real broker) is not
        // reading: the comparable figure starts when the partitions are assigned (fetching starts then).
        // kcat assigns partitions itself, without a group.
        let joinDeadline = now() + 60_000_000_000
        while consumer.statistics.assignedPartitions.isEmpty && now() < joinDeadline {
            try await Task.sleep(for: .milliseconds(1))
        }
        let assignedAt = now()
        var waited: UInt64 = 0
        while seen < n {
            let asked = now()
            guard let batch = await consumer.nextBatch() else { break }
            waited += now() - asked
            seen += batch.count
            if decode {
                for message in batch where (try? decoder.decode(message.value, now: validAt)) != nil { decoded += 1 }
            }
            consumer.settle(batch.map(\.ref))
            progress.messages.store(seen, ordering: .relaxed)
        }
        let end = now()
        watchdog.cancel()
        let statistics = consumer.statistics
        let gaps = statistics.offsetGaps
        let assigned = statistics.assignedPartitions.count
        await consumer.close()
        return ConsumeResult(
            seen: seen, total: Double(end - start) / 1e9, fromAssignment: Double(end - assignedAt) / 1e9,
            partitions: assigned, decoded: decoded, gaps: gaps, waited: Double(waited) / 1e9, pauses: statistics.pauses,
            batches: statistics.batchesDelivered)
    }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
    static func seconds(since start: UInt64) -> Double { Double(now() - start) / 1e9 }
}

struct BenchmarkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
