import Foundation
import Redis
import TestSupport
import Testing

/// redis-server CPU per job for gate + settle (issue 14): not a unit test — it runs only when
/// `APNS_REDIS_CPU_JOBS` is set (e.g. 100000) and prints µs of redis-server CPU (utime + stime from
/// /proc, so independent of the Swift build mode) and commands per job from `INFO commandstats`.
/// One app, batches of 500, one dedup record per accepted job, every tenth token suppressed; each
/// variant on a fresh redis-server, in turn, `APNS_REDIS_CPU_ROUNDS` times (default 2):
///   APNS_REDIS_CPU_JOBS=100000 swift test --filter RedisCPUBenchmark
/// The variants are each other's baselines (one call per batch vs the cluster path's one slot per call,
/// denser dedup sets, short keys, 12 h dedup buckets (the default before 24 h), and a steady state where the older dedup buckets
/// hold records). The scripts before issue 15 (commit f757e0e) measured 13.4–16.3 µs and 10.89 commands
/// per job here; issue 15's (1c3f01b) 14.6–16.8 µs and 6.14 (100 000 jobs; 14.2–18.6 in an earlier
/// session); with leases in one hash per tag, no per-job index arguments, `EXPIREAT` once per set and
/// minute and campaign progress by ranges (issue 14) 8.9–10.3 µs and 4.36, 10.7–11.9 µs in the steady
/// state (every probe reads a set), on the shared 2-core machine; with multi-field reads returned as
/// they are (1f9482c) 7.05–7.25 vs 8.05–8.15 µs (steady state 10.05–10.30 vs 11.20–11.60) alternating with
/// b6fd625's scripts in one of the machine's slow phases (5.2–6.0 µs, fresh, in a faster one).
@Suite(.enabled(if: ProcessInfo.processInfo.environment["APNS_REDIS_CPU_JOBS"] != nil && RedisServer.available))
struct RedisCPUBenchmark {
    struct Variant: Sendable {
        var name: String
        var gate: @Sendable ([GateRequest]) async throws -> [GateDecision]
        var settle: @Sendable (SettleBatch) async throws -> Void
        var suppress: @Sendable ([Suppression]) async throws -> Void
        var stats: String
        /// The bench's app (bundle id): its length is in every per-token key name.
        var app = "com.example.bench"
        /// Steady state: the older dedup time buckets hold records (of other job ids) before the run, as
        /// after a day of traffic, so every probe reads a set (on a fresh server only the current one exists).
        var steady = false
    }

    static func variants(_ client: RedisClient) -> [Variant] {
        let store = PipelineStore(client: client)
        let cluster = PipelineStore(client: client, configuration: .init(oneSlotPerCall: true))
        let dense = PipelineStore(client: client, configuration: .init(dedupSubBuckets: 256))
        let narrow = PipelineStore(client: client, configuration: .init(dedupBucketWidth: .seconds(43_200)))
        return [
            Variant(
                name: "this code, single Redis (one call per batch)", gate: { try await store.gate($0) },
                settle: { try await store.settle($0) },
                suppress: { try await store.suppress($0) }, stats: store.keys.stats),
            Variant(
                name: "this code, one slot per call (the cluster path)", gate: { try await cluster.gate($0) },
                settle: { try await cluster.settle($0) }, suppress: { try await cluster.suppress($0) }, stats: cluster.keys.stats),
            Variant(
                name: "this code, single Redis, 256 dedup sets per time bucket (more jobs per set)", gate: { try await dense.gate($0) },
                settle: { try await dense.settle($0) }, suppress: { try await dense.suppress($0) }, stats: dense.keys.stats),
            Variant(
                name: "this code, single Redis, app named \"a\" (keys ≤ 44 bytes: Redis embeds them in one allocation)",
                gate: { try await store.gate($0) }, settle: { try await store.settle($0) }, suppress: { try await store.suppress($0) },
                stats: store.keys.stats, app: "a"),
            Variant(
                name: "this code, single Redis, 12 h dedup buckets (the default before issue 14: 3 probes per job, not 2)",
                gate: { try await narrow.gate($0) }, settle: { try await narrow.settle($0) }, suppress: { try await narrow.suppress($0) },
                stats: narrow.keys.stats),
            Variant(
                name: "this code, single Redis, steady state (the older dedup buckets hold records)", gate: { try await store.gate($0) },
                settle: { try await store.settle($0) }, suppress: { try await store.suppress($0) }, stats: store.keys.stats, steady: true),
            Variant(
                name: "this code, single Redis, steady state, 12 h dedup buckets", gate: { try await narrow.gate($0) },
                settle: { try await narrow.settle($0) }, suppress: { try await narrow.suppress($0) }, stats: narrow.keys.stats, steady: true
            ),
        ]
    }

    @Test func gateAndSettleCPUPerJob() async throws {
        let jobs = Int(ProcessInfo.processInfo.environment["APNS_REDIS_CPU_JOBS"] ?? "") ?? 100_000
        let rounds = Int(ProcessInfo.processInfo.environment["APNS_REDIS_CPU_ROUNDS"] ?? "") ?? 2
        for _ in 0..<rounds {
            let chosen = (ProcessInfo.processInfo.environment["APNS_REDIS_CPU_VARIANTS"] ?? "0,1,2,3").split(separator: ",").compactMap {
                Int($0)
            }
            for index in chosen {
                let server = try await RedisServer()
                defer { server.stop() }
                try await measure(Self.variants(try server.client())[index], server: server, jobs: jobs)
            }
        }
    }

    func measure(_ variant: Variant, server: RedisServer, jobs: Int) async throws {
        let batchSize = 500
        let client = try server.client()
        let app = variant.app
        let pid = try await client.info("server")["process_id"] ?? "?"
        func cpuTicks() throws -> (user: Double, system: Double) {
            let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
            let fields = stat[stat.range(of: ")")!.upperBound...].split(separator: " ")
            return (Double(fields[11])!, Double(fields[12])!)  // utime, stime (fields 14, 15)
        }
        try await variant.suppress(
            (0..<(jobs / 10)).map { Suppression(app: app, tokenHex: String(format: "%064x", $0 * 10), at: 1, reason: "feedback") })
        if variant.steady {
            // As many records as the run makes, in each older bucket the gate probes (12 h and 24 h ago).
            let now = PipelineStore.epochNow()
            for (age, prefix) in [(Int64(43_200), "old"), (Int64(86_400 - 600), "older")] {
                for start in stride(from: 0, to: jobs, by: 1000) {
                    let outcomes = (start..<min(jobs, start + 1000)).map {
                        SettledOutcome(jobID: "\(prefix):\($0)", app: app, tokenHex: String(format: "%064x", $0), kind: .accepted)
                    }
                    try await variant.settle(SettleBatch(outcomes: outcomes, settledAt: now - age))
                }
            }
        }
        _ = try await client.send(RedisCommand("CONFIG", "RESETSTAT"))
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        // The gate of every batch first, then their settles: so each has its own CPU figure.
        let before = try cpuTicks()
        var gated = 0
        var batches: [SettleBatch] = []
        for start in stride(from: 0, to: jobs, by: batchSize) {
            let requests = (start..<min(jobs, start + batchSize)).map {
                GateRequest(jobID: "bench:\($0)", app: app, tokenHex: String(format: "%064x", $0))
            }
            let decisions = try await variant.gate(requests)
            var outcomes: [SettledOutcome] = []
            for (request, decision) in zip(requests, decisions) {
                switch decision {
                case .admitted, .takenOver:
                    outcomes.append(
                        SettledOutcome(
                            jobID: request.jobID, app: app, tokenHex: request.tokenHex, campaign: "bench", kind: .accepted, shard: 0))
                case .suppressed:
                    outcomes.append(
                        SettledOutcome(jobID: request.jobID, app: app, tokenHex: request.tokenHex, campaign: "bench", kind: .suppressed))
                default: break
                }
            }
            batches.append(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: requests.count)))
            gated += requests.count
        }
        let middle = try cpuTicks()
        for batch in batches { try await variant.settle(batch) }
        let after = try cpuTicks()
        let gateSeconds = (middle.user + middle.system - before.user - before.system) / ticksPerSecond
        let user = (after.user - before.user) / ticksPerSecond
        let total = user + (after.system - before.system) / ticksPerSecond
        let stats = try await client.send(RedisCommand("INFO", "commandstats")).string ?? ""
        var calls: [(String, Int)] = []
        for line in stats.split(separator: "\r\n") where line.hasPrefix("cmdstat_") {
            let name = line.dropFirst("cmdstat_".count).prefix { $0 != ":" }
            if let range = line.range(of: "calls="), let n = Int(line[range.upperBound...].prefix { $0.isNumber }) {
                calls.append((String(name), n))
            }
        }
        let perJob = calls.filter { $0.1 * 100 >= gated }.sorted { $0.1 > $1.1 }.map {
            "\($0.0) \(String(format: "%.2f", Double($0.1) / Double(gated)))"
        }
        let commands = calls.filter { !["evalsha", "eval", "config|resetstat", "info", "script|load"].contains($0.0) }.reduce(0) {
            $0 + $1.1
        }
        func us(_ seconds: Double) -> String { String(format: "%.2f", seconds * 1e6 / Double(gated)) }
        print(
            "redis-server CPU per job, \(variant.name): \(us(total)) µs (user \(us(user)); gate \(us(gateSeconds)), settle \(us(total - gateSeconds))); \(String(format: "%.2f", Double(commands) / Double(gated))) commands per job: \(perJob.joined(separator: ", ")) [\(gated) jobs, batches of \(batchSize)]"
        )
        let totals = try await client.hashCounters(variant.stats)
        #expect(totals["received"] == Int64(gated))
    }
}
