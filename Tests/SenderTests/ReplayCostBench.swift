import Foundation
import GatewaySimulator
import Sender
import Testing

/// Issue 10 (4): what an error response costs in replays, with the unsettled window and without it (the
/// old bound: 65 536 frames / 16 MiB per shard), in one run. The demo's binary setup: 4 shards,
/// `settle_after` 250 ms, 1 % invalid tokens. A measurement, not a test: it asserts only what must hold
/// in both (nothing lost), and runs when SENDER_BENCH is set:
/// `SENDER_BENCH=1 swift test --filter ReplayCostBench` (prints replays per error and CPU µs per job).
@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["SENDER_BENCH"] != nil))
struct ReplayCostBench {
    /// Unsettled windows in KiB: 16 MiB fixed (the bound before: `replay_max_mb`), the default (0:
    /// adaptive, from `settle_after` × 8 MiB/s down to 16 KiB), 128 KiB fixed.
    @Test(arguments: [16_384, 0, 128]) func replaysPerError(windowKiB: Int) async throws {
        let jobs = Int(ProcessInfo.processInfo.environment["SENDER_BENCH_JOBS"] ?? "") ?? 50_000
        let invalid = Set((0..<jobs).filter { $0 % 100 == 37 })
        var faults = FaultScript()
        faults.invalidTokens = Set(invalid.map { testToken($0).hex })
        let sim = try await startSimulator(faults: faults)
        let log = OutcomeLog()
        var shard = testShardConfiguration()
        shard.settleAfter = .milliseconds(250)
        if windowKiB > 0 {
            shard.maxUnsettledBytes = windowKiB << 10
            shard.minUnsettledBytes = windowKiB << 10  // fixed
        }
        let pool = try makePool(simulators: [sim], shards: 4, shard: shard, log: log)
        let cpu0 = cpuMicroseconds()
        let t0 = ContinuousClock.now
        for start in stride(from: 0, to: jobs, by: 1000) {
            try await pool.send((start..<min(jobs, start + 1000)).map { job($0, token: $0) })
        }
        try await waitUntil("an outcome for every job") { log.count >= jobs }
        let elapsed = ContinuousClock.now - t0
        let cpu = cpuMicroseconds() - cpu0
        _ = await pool.drainAndClose()
        let e = log.events
        let errors = sim.totals.rejectedByStatus.values.reduce(0, +)
        let recorded = Set(sim.records.compactMap(\.jobID))
        #expect(recorded.count == jobs - invalid.count)
        #expect(e.lostAfterSettle == 0)
        print(
            "replay cost, window \(windowKiB == 0 ? "adaptive \(shard.minUnsettledBytes >> 10)…\(shard.unsettledByteLimit >> 10) KiB (default)" : "fixed \(windowKiB) KiB"): \(jobs) jobs, \(errors) errors, replayed \(e.replayed) = \(e.replayed / max(errors, 1)) per error, \(String(format: "%.2f", Double(e.replayed) / Double(jobs))) per job; \(String(format: "%.1f", Double(cpu) / Double(jobs))) CPU µs per job (sender and simulator, one process); \(elapsed) wall"
        )
        try await sim.stop()
    }
}

/// CPU time of this process (user + system), in microseconds.
func cpuMicroseconds() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return (Int(usage.ru_utime.tv_sec) + Int(usage.ru_stime.tv_sec)) * 1_000_000 + Int(usage.ru_utime.tv_usec)
        + Int(usage.ru_stime.tv_usec)
}
