import Foundation
import Pipeline
import ProcessSupport
import Redis
import TestSupport
import Testing

@Suite struct ClusterPipelineConfigurationTests {
    private func load(_ redisSection: String) throws -> PipelineConfiguration {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("cluster-\(UUID().uuidString).yaml").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try """
        redis:
        \(redisSection)
        apps:
          - bundle_id: \(shop)
            certificate: \(TestCertificates.directory)/\(shop).pem
            key: \(TestCertificates.directory)/\(shop).key
        """.write(toFile: file, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: file)
    }

    @Test func redisClusterListsTheNodes() throws {
        let c = try load("  cluster: [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]")
        guard case .cluster(let cluster) = try c.redis.target() else {
            Issue.record("expected a cluster target")
            return
        }
        #expect(cluster.seeds.map(\.description) == ["10.0.0.1:7000", "10.0.0.2:7000"])
        #expect(
            try load("  url: redis://10.0.0.1:6380/2").redis.target() == .single(try RedisConfiguration(url: "redis://10.0.0.1:6380/2")))
    }

    @Test func badRedisSettingsNameTheKey() throws {
        for (section, key, expected) in [
            ("  cluster: [\"10.0.0.1:x\"]", "redis.cluster", "expected a list of host:port"),
            ("  cluster: [\"10.0.0.1:7000/3\"]", "redis.cluster", "only database 0"),
            ("  cluster: \"10.0.0.1:7000\"", "redis.cluster", "expected a list of strings"),
            ("  url: redis://h:1\n  cluster: [\"10.0.0.1:7000\"]", "redis", "not both"),
            ("  url: http://h", "redis.url", "expected redis://"),
        ] {
            #expect {
                try load(section)
            } throws: { error in
                guard let error = error as? ConfigurationError else { return false }
                return error.key == key && error.problem.contains(expected)
            }
        }
    }
}

/// The pipeline on a 3-primary Redis Cluster while an operator reshards it with `redis-cli --cluster
/// reshard`: the keys of the jobs in flight move between nodes under the pipeline's feet (ASK during a
/// slot's move, MOVED after it).
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct ClusterPipelineTests {
    static let redisCLI = executablePath("redis-cli")

    /// A campaign published in two halves; the second half is published while 4000 slots (a quarter of
    /// the cluster) move from one primary to another, and the pipeline works on the first half meanwhile.
    /// Then: every job recorded by the gateway exactly once (0 lost, 0 duplicated), the counters exact, and
    /// the whole campaign published again is deduped to the last job — the dedup records moved with their
    /// slots and are found on their new node.
    @Test func reshardingMidCampaignLosesNothingAndSendsNothingTwice() async throws {
        guard let redisCLI = Self.redisCLI else {
            throw TestFailure("redis-cli is not installed (Debian package redis-tools)")
        }
        let stack = try await Stack(redis: .cluster)
        let cluster = try #require(stack.redis.cluster)
        let pipeline = RunningPipeline(stack.configuration())
        let jobs = 6000
        let audience = (0..<jobs).map(token)
        try await stack.publish(campaign: "r", template: template, tokens: Array(audience.prefix(jobs / 2)))
        try await stack.waitAccepted("r", count: 200)

        let from = try await cluster.nodeID(0)
        let to = try await cluster.nodeID(1)
        let reshard = Process()
        reshard.executableURL = URL(fileURLWithPath: redisCLI)
        reshard.arguments = [
            "--cluster", "reshard", cluster.addresses[0], "--cluster-from", from, "--cluster-to", to,
            "--cluster-slots", "4000", "--cluster-yes", "--cluster-pipeline", "50",
        ]
        // To a file: redis-cli prints a line per slot moved, more than a pipe holds while we wait.
        let logPath = FileManager.default.temporaryDirectory.appendingPathComponent("reshard-\(UUID().uuidString).log").path
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: logPath) }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        reshard.standardOutput = output
        reshard.standardError = output
        reshard.standardInput = FileHandle.nullDevice
        try startChild(reshard)
        try await stack.publish(campaign: "r", template: template, tokens: Array(audience.suffix(jobs / 2)))
        let acceptedBefore = try await stack.campaign("r")["accepted"] ?? 0
        while reshard.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        try output.close()
        let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        #expect(reshard.terminationStatus == 0, "redis-cli --cluster reshard: \(log.suffix(2000))")
        let acceptedAfter = try await stack.campaign("r")["accepted"] ?? 0
        // Not asserted (it depends on the machine's speed), but shown: how much of the campaign ran
        // while the slots moved.
        print("reshard of 4000 slots: accepted \(acceptedBefore) → \(acceptedAfter) of \(jobs) while it ran")

        try await stack.waitSettled("r", count: Int64(jobs))
        let counters = try await stack.campaign("r")
        #expect(counters["accepted"] == Int64(jobs))
        let recorded = stack.recorded(campaign: "r")
        #expect(recorded.count == jobs, "lost: \(jobs - recorded.count)")
        #expect(recorded.values.allSatisfy { $0 == 1 }, "duplicated: \(recorded.values.filter { $0 > 1 }.count)")

        // Dedup intact after the move: the whole campaign again is refused job by job.
        try await stack.publish(campaign: "r", template: template, tokens: audience)
        try await stack.waitSettled("r", count: Int64(2 * jobs))
        #expect(try await stack.campaign("r")["deduped"] == Int64(jobs))
        #expect(stack.recorded(campaign: "r").values.allSatisfy { $0 == 1 })

        // The slots did move: node 1 owns 4000 more than its third.
        let slots = try await cluster.nodeClient(1).send(RedisCommand("CLUSTER", "SLOTS")).array ?? []
        let owned = slots.compactMap { range -> Int? in
            guard let fields = range.array, let port = fields[2].array?[1].integer, Int(port) == cluster.nodes[1].port,
                let first = fields[0].integer, let last = fields[1].integer
            else { return nil }
            return Int(last - first + 1)
        }.reduce(0, +)
        #expect(owned == 16_384 * 2 / 3 - 16_384 / 3 + 4000)

        // `stats` reads the cluster given on its command line (one node names it; the rest are found).
        let stats = try await PipelineProcess.command(["stats", "--redis-cluster", cluster.addresses[2], "--json", "--campaign", "r"])
        #expect(stats.status == 0, "\(stats.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any])
        let totals = try #require(object["totals"] as? [String: Any])
        #expect((totals["accepted"] as? NSNumber)?.int64Value == Int64(jobs) && (totals["deduped"] as? NSNumber)?.int64Value == Int64(jobs))
        #expect((object["redis"] as? String)?.hasPrefix("redis-cluster://") == true)
        let badNodes = try await PipelineProcess.command(["stats", "--redis-cluster", "127.0.0.1:notaport", "--json"])
        #expect(badNodes.status != 0 && badNodes.stderr.contains("--redis-cluster"), "\(badNodes.stderr)")

        // `feedback poll --pipeline` writes to the file's cluster (it used to read `redis.url` alone, so
        // a cluster's suppressions went to a default server): the next campaign skips the dead token.
        stack.simulator.queueFeedback(app: shop, token: audience[0], time: UInt32(Date().timeIntervalSince1970))
        let poll = try await PipelineProcess.command(["feedback", "poll", "--pipeline", try stack.pipelineFile(), "--redis-wait", "5"])
        #expect(poll.status == 0, "feedback poll: \(poll.stdout) \(poll.stderr)")
        try await stack.publish(campaign: "f", template: template, tokens: Array(audience.prefix(10)))
        try await stack.waitSettled("f", count: 10)
        #expect(try await stack.campaign("f")["suppressed"] == 1)

        try await pipeline.stop()
        await stack.stop()
    }
}
