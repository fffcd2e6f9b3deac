import Foundation
import ProcessSupport
import Redis

#if canImport(Glibc)
import Glibc
#endif

/// The Redis stage against the server's own limit, measured on the same server in the same run:
/// gate + settle jobs/s (batches of `batch` jobs: one gate round trip, then one settle round trip of
/// the accepted outcomes), `redis-benchmark -P 64` SET/GET ops/s, their ratio, and bytes per dedup
/// record (INFO memory `used_memory` delta ÷ jobs settled as accepted).
///
/// Starts its own `redis-server` on a free loopback port unless `APNS_BENCH_REDIS_URL` names one (that
/// server's data is flushed: FLUSHALL).
enum RedisBenchmark {
    static func run(arguments: [String]) async throws {
        let jobs = arguments.first.flatMap(Int.init) ?? 200_000
        let batch = arguments.dropFirst().first.flatMap(Int.init) ?? 500
        let server: LocalRedis
        if let url = ProcessInfo.processInfo.environment["APNS_BENCH_REDIS_URL"] {
            server = try LocalRedis(url: url)
        } else {
            server = try await LocalRedis.start()
        }
        defer { server.stop() }

        let client = try RedisClient(url: server.url)
        let version = try await client.info("server")["redis_version"] ?? "?"
        _ = try await client.send(RedisCommand("FLUSHALL"))
        // Warm up (script load, connection), then start from an empty database for the memory figure.
        _ = try await gateAndSettle(client: client, jobs: 2 * batch, batch: batch, run: "warmup")
        _ = try await client.send(RedisCommand("FLUSHALL"))
        let before = try await usedMemory(client)

        let single = try await gateAndSettle(client: client, jobs: jobs, batch: batch, run: "a")
        let after = try await usedMemory(client)
        let bytesPerRecord = Double(after - before) / Double(jobs)
        let dedupKeys = try await client.send(RedisCommand("DBSIZE")).integer ?? 0

        // Four pipeline processes' worth of concurrent batches (one connection each).
        let clients = try (0..<4).map { _ in try RedisClient(url: server.url) }
        let concurrentStart = DispatchTime.now().uptimeNanoseconds
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (i, c) in clients.enumerated() {
                group.addTask { _ = try await gateAndSettle(client: c, jobs: jobs / 4, batch: batch, run: "c\(i)") }
            }
            try await group.waitForAll()
        }
        let concurrentSeconds = Double(DispatchTime.now().uptimeNanoseconds - concurrentStart) / 1e9
        for c in clients { await c.close() }
        await client.close()

        let baseline = try redisBenchmark(port: server.port, host: server.host)
        let set = baseline["SET"] ?? .nan
        let get = baseline["GET"] ?? .nan

        let singleRate = Double(jobs) / single
        let concurrentRate = Double(jobs / 4 * 4) / concurrentSeconds
        print("\n## Redis stage: gate + settle vs redis-benchmark (Redis \(version), same server, same run)")
        print("| case | jobs | seconds | jobs/s | ÷ redis-benchmark SET ops/s |")
        print("|---|---:|---:|---:|---:|")
        print(
            "| gate + settle, 1 connection, batches of \(batch) | \(jobs.formatted()) | \(String(format: "%.2f", single)) | \(Int(singleRate).formatted()) | \(String(format: "%.3f", singleRate / set)) |"
        )
        print(
            "| gate + settle, 4 connections, batches of \(batch) | \((jobs / 4 * 4).formatted()) | \(String(format: "%.2f", concurrentSeconds)) | \(Int(concurrentRate).formatted()) | \(String(format: "%.3f", concurrentRate / set)) |"
        )
        print("\n| redis-benchmark -P 64 -n 1000000 | ops/s |")
        print("|---|---:|")
        print("| SET | \(Int(set).formatted()) |")
        print("| GET | \(Int(get).formatted()) |")
        print("\n| dedup memory | value |")
        print("|---|---:|")
        print("| used_memory delta over \(jobs.formatted()) accepted jobs | \(after - before) B |")
        print("| bytes per dedup record (incl. counters, batch markers) | \(String(format: "%.1f", bytesPerRecord)) |")
        print("| keys after the run (dedup sets, stats, markers) | \(dedupKeys) |")
        let defaults = PipelineStoreConfiguration()
        let buckets = defaults.dedupRetention.components.seconds / defaults.dedupBucketWidth.components.seconds + 1
        print(
            "\nEach job costs the gate a SISMEMBER per live dedup bucket (\(buckets) with the defaults), its lease's field in the tag's lease hash (HMGET and HSET per group) and its token's fields of the suppression and language hashes (HMGET per group); the settle an SADD, the lease's HDEL (one per group) and the counter HINCRBYs (summed per batch). redis-benchmark's SET is one pipelined command per op: 1 ÷ ratio is how many such SETs' worth of server time one gated and settled job costs."
        )
    }

    /// Gates and settles `jobs` distinct jobs in batches; returns the seconds it took.
    static func gateAndSettle(client: RedisClient, jobs: Int, batch: Int, run: String) async throws -> Double {
        let store = PipelineStore(client: client)
        let apps = ["com.example.shop", "com.example.news"]
        let start = DispatchTime.now().uptimeNanoseconds
        var next = 0
        while next < jobs {
            let count = min(batch, jobs - next)
            var requests: [GateRequest] = []
            requests.reserveCapacity(count)
            for i in next..<(next + count) {
                requests.append(GateRequest(jobID: "bench-\(run):\(i)", app: apps[i & 1], tokenHex: String(format: "%064x", i)))
            }
            let decisions = try await store.gate(requests)
            var outcomes: [SettledOutcome] = []
            outcomes.reserveCapacity(count)
            for (request, decision) in zip(requests, decisions) {
                guard case .admitted = decision else { throw BenchError("job \(request.jobID) not admitted: \(decision)") }
                outcomes.append(
                    SettledOutcome(
                        jobID: request.jobID, app: request.app, tokenHex: request.tokenHex, campaign: "bench", kind: .accepted, shard: 0))
            }
            try await store.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: count)))
            next += count
        }
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    static func usedMemory(_ client: RedisClient) async throws -> Int {
        guard let value = try await client.info("memory")["used_memory"].flatMap(Int.init) else {
            throw BenchError("INFO memory has no used_memory")
        }
        return value
    }

    /// `redis-benchmark -P 64 -n 1000000 -q -t set,get` → ops/s per command.
    static func redisBenchmark(port: Int, host: String) throws -> [String: Double] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try LocalRedis.which("redis-benchmark"))
        process.arguments = ["-h", host, "-p", String(port), "-P", "64", "-n", "1000000", "-q", "-t", "set,get"]
        process.environment = LocalRedis.childEnvironment
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        // -q prints progress lines ending in \r, then "SET: 1234567.89 requests per second, p50=… msec".
        var result: [String: Double] = [:]
        let text = String(decoding: data, as: UTF8.self)
        for line in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, line.contains("requests per second") else { continue }
            let number = parts[1].trimmingCharacters(in: .whitespaces).split(separator: " ").first.flatMap { Double($0) }
            if let number { result[String(parts[0]).trimmingCharacters(in: .whitespaces)] = number }
        }
        guard result["SET"] != nil else { throw BenchError("could not parse redis-benchmark output: \(text)") }
        return result
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A redis-server of the benchmark's own on a free loopback port (killed at the end), or an existing one.
final class LocalRedis: @unchecked Sendable {
    let host: String
    let port: Int
    private let process: ChildProcess?
    private let directory: String?

    var url: String { "redis://\(host):\(port)" }

    /// The malloc interposer that ops/bench preloads is for this process, not for redis' own binaries.
    static var childEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = nil
        return environment
    }

    init(url: String) throws {
        let configuration = try RedisConfiguration(url: url)
        host = configuration.host
        port = configuration.port
        process = nil
        directory = nil
    }

    private init(port: Int, process: ChildProcess, directory: String) {
        host = "127.0.0.1"
        self.port = port
        self.process = process
        self.directory = directory
    }

    static func start() async throws -> LocalRedis {
        let port = try freeLoopbackPort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apns-bench-redis-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let process = try ChildProcess(
            executable: try which("redis-server"),
            arguments: ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory],
            environment: childEnvironment)
        let server = LocalRedis(port: port, process: process, directory: directory)
        // Until it accepts connections: `connect()` fails fast (no retry, no log), so poll it.
        let probe = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: port))
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                try await probe.connect()
                break
            } catch {
                if ContinuousClock.now > deadline {
                    server.stop()
                    throw BenchError("redis-server did not start on port \(port): \(error)")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        await probe.close()
        return server
    }

    func stop() {
        process?.kill()  // the data is throw-away
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    static func which(_ name: String) throws -> String {
        guard let path = executablePath(name, extraDirectories: ["/usr/sbin", "/usr/bin"]) else {
            throw BenchError("\(name) not found on PATH (Debian package redis-server / redis-tools)")
        }
        return path
    }
}
