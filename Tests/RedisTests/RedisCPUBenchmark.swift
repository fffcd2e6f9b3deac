import Foundation
import Redis
import Testing
import TestSupport

/// redis-server CPU per job for gate + settle (issue 14): not a unit test — it runs only when
/// `APNS_REDIS_CPU_JOBS` is set (e.g. 200000) and prints µs of redis-server CPU (utime + stime from
/// /proc, so independent of the Swift build mode) and `redis.call`s per job from `INFO commandstats`.
/// One app, batches of 500, one dedup record per accepted job, every tenth token suppressed:
///   APNS_REDIS_CPU_JOBS=200000 swift test --filter RedisCPUBenchmark
@Suite(.enabled(if: ProcessInfo.processInfo.environment["APNS_REDIS_CPU_JOBS"] != nil && RedisServer.available))
struct RedisCPUBenchmark {
    @Test func gateAndSettleCPUPerJob() async throws {
        let jobs = Int(ProcessInfo.processInfo.environment["APNS_REDIS_CPU_JOBS"] ?? "") ?? 200_000
        let batchSize = 500
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let store = PipelineStore(client: client)
        let app = "com.example.bench"
        let pid = try await client.info("server")["process_id"] ?? "?"
        func cpuTicks() throws -> Double {
            let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
            let fields = stat[stat.range(of: ")")!.upperBound...].split(separator: " ")
            return Double(fields[11])! + Double(fields[12])!  // utime, stime (fields 14, 15)
        }
        // Warm up (script load, first keys), then measure.
        try await store.suppress((0..<(jobs / 10)).map { Suppression(app: app, tokenHex: String(format: "%064x", $0 * 10), at: 1, reason: "feedback") })
        _ = try await client.send(RedisCommand("CONFIG", "RESETSTAT"))
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        let before = try cpuTicks()
        var gated = 0
        for start in stride(from: 0, to: jobs, by: batchSize) {
            let requests = (start..<min(jobs, start + batchSize)).map {
                GateRequest(jobID: "bench:\($0)", app: app, tokenHex: String(format: "%064x", $0))
            }
            let decisions = try await store.gate(requests)
            var outcomes: [Outcome] = []
            for (request, decision) in zip(requests, decisions) {
                switch decision {
                case .admitted, .takenOver:
                    outcomes.append(Outcome(jobID: request.jobID, app: app, tokenHex: request.tokenHex, campaign: "bench", kind: .accepted, shard: 0))
                case .suppressed:
                    outcomes.append(Outcome(jobID: request.jobID, app: app, tokenHex: request.tokenHex, campaign: "bench", kind: .suppressed))
                default: break
                }
            }
            try await store.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: requests.count)))
            gated += requests.count
        }
        let cpuSeconds = (try cpuTicks() - before) / ticksPerSecond
        let stats = try await client.send(RedisCommand("INFO", "commandstats")).string ?? ""
        var calls: [(String, Int)] = []
        for line in stats.split(separator: "\r\n") where line.hasPrefix("cmdstat_") {
            let name = line.dropFirst("cmdstat_".count).prefix { $0 != ":" }
            if let range = line.range(of: "calls="), let n = Int(line[range.upperBound...].prefix { $0.isNumber }) { calls.append((String(name), n)) }
        }
        let perJob = calls.sorted { $0.1 > $1.1 }.map { "\($0.0) \(String(format: "%.2f", Double($0.1) / Double(gated)))" }
        let lua = calls.filter { !["evalsha", "eval", "config", "info", "script"].contains($0.0) }.reduce(0) { $0 + $1.1 }
        print("redis-server CPU per job (gate+settle, \(gated) jobs, batches of \(batchSize)): \(String(format: "%.2f", cpuSeconds * 1e6 / Double(gated))) µs; commands per job \(String(format: "%.2f", Double(lua) / Double(gated))): \(perJob.joined(separator: ", "))")
        let totals = try await client.hashCounters(store.keys.stats)
        #expect(totals["received"] == Int64(gated))
    }
}
