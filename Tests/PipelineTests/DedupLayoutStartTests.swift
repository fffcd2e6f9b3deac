import Foundation
import Redis
import TestSupport
import Testing

/// `apns-pipeline run` refuses to start when its pipeline file's dedup settings would not find the
/// records Redis holds (issue 14 made the default bucket 24 h wide): the error names the file, the keys
/// and the values the records were written with, before any job is consumed.
@Suite(.enabled(if: RedisServer.available && PipelineProcess.binary != nil, "needs redis-server and the built apns-pipeline (ops/test)"))
struct DedupLayoutStartTests {
    @Test func runRefusesAnotherLayout() async throws {
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        let keys = RedisKeys()
        // Records written with 12-hour buckets, as the defaults before issue 14 did.
        try await client.send(
            RedisCommand("SET", keys.dedupLayout, DedupLayout(bucketSeconds: 43_200, subBuckets: 4096, tokenBuckets: 16).stored))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("layout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("pipeline.yaml").path
        // Kafka is never reached: the check runs before the consumer starts.
        let d = TestCertificates.directory
        func writeFile(redisExtra: String = "") throws {
            try """
            kafka:
              bootstrap_servers: "127.0.0.1:1"
            redis:
              url: \(redis.url)
            \(redisExtra)
            apps:
              - bundle_id: \(shop)
                transport: binary
                certificate: \(d)/\(shop).pem
                key: \(d)/\(shop).key
            """.write(toFile: file, atomically: true, encoding: .utf8)
        }
        try writeFile()
        let (status, _, stderr) = try await PipelineProcess.command(["run", "--pipeline", file])
        #expect(status != 0)
        #expect(stderr.contains(file), "\(stderr)")
        #expect(stderr.contains("written with redis.dedup_bucket_hours: 12"), "\(stderr)")
        #expect(stderr.contains("this configuration has redis.dedup_bucket_hours: 24"), "\(stderr)")

        // With the width the records were written with, it starts. (The record cleared first: the
        // process records its layout again once its check passed, which this waits for.)
        try await client.send(RedisCommand("DEL", keys.dedupLayout))
        try writeFile(redisExtra: "  dedup_bucket_hours: 12")
        let log = directory.appendingPathComponent("run.log").path
        let process = try PipelineProcess(pipelineFile: file, logFile: log)
        try await eventually("run records its layout", timeout: .seconds(300)) {
            try await client.send(RedisCommand("GET", keys.dedupLayout)).string != nil || !process.process.isRunning
        }
        #expect(try await client.send(RedisCommand("GET", keys.dedupLayout)).string == "bucket_s=43200 sub_buckets=4096 token_buckets=16")
        #expect(process.process.isRunning, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        _ = await process.stop()
        await client.close()
    }
}
