import Foundation
import Pipeline
import Redis
import TestSupport
import Testing
import Tools

/// `campaign publish --at`: a time in the past is refused (unless `--now-if-past`, which starts the
/// campaign now), and so is one more than 30 days ahead, each with an error that says what to do.
@Suite struct ScheduledStartLimitsTests {
    static let now = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z

    @Test func theStartTimeIsChecked() throws {
        #expect(try Campaign.scheduledStart(at: nil, now: Self.now) == nil)
        #expect(try Campaign.scheduledStart(at: "2026-01-01T09:00:00Z", now: Self.now) == 1_767_258_000_000)
        #expect(try Campaign.scheduledStart(at: "2026-01-01T10:00:00+01:00", now: Self.now) == 1_767_258_000_000)
        #expect(try Campaign.scheduledStart(at: "2026-01-31T00:00:00Z", now: Self.now) == 1_769_817_600_000, "30 days ahead")
        #expect {
            try Campaign.scheduledStart(at: "2025-12-31T23:59:59Z", now: Self.now)
        } throws: { "\($0)".contains("in the past") && "\($0)".contains("--now-if-past") && "\($0)".contains("2026-01-01T00:00:00Z") }
        #expect(try Campaign.scheduledStart(at: "2025-12-31T23:59:59Z", now: Self.now, nowIfPast: true) == nil)
        #expect {
            try Campaign.scheduledStart(at: "2026-01-31T00:00:01Z", now: Self.now)
        } throws: { "\($0)".contains("more than 30 days ahead") }
        #expect {
            try Campaign.scheduledStart(at: "2027-01-01T00:00:00Z", now: Self.now, nowIfPast: true)
        } throws: { "\($0)".contains("more than 30 days ahead") }
        for bad in ["tomorrow", "2026-01-02", "2026-01-02T09:00:00"] {
            #expect {
                try Campaign.scheduledStart(at: bad, now: Self.now)
            } throws: { "\($0)".contains("RFC 3339") && "\($0)".contains(bad) }
        }
    }

    /// The real command against Kafka and Redis: a past time publishes nothing and sets nothing; with
    /// `--now-if-past` the campaign is published with no schedule; a year ahead is refused too.
    @Test(.enabled(if: RedisServer.available && PipelineProcess.binary != nil, "needs redis-server and the built apns-pipeline"))
    func publishRefusesAPastOrFarStart() async throws {
        let stack = try await Stack()
        let file = try stack.pipelineFile()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("at-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let templateFile = dir.appendingPathComponent("template.json").path
        try String(decoding: template.serialized(), as: UTF8.self).write(toFile: templateFile, atomically: true, encoding: .utf8)
        let tokensFile = dir.appendingPathComponent("tokens.txt").path
        try (0..<10).map { token($0).hex }.joined(separator: "\n").write(toFile: tokensFile, atomically: true, encoding: .utf8)
        func publish(_ campaign: String, _ extra: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
            try await PipelineProcess.command(
                [
                    "campaign", "publish", "--pipeline", file, "--campaign", campaign, "--template", templateFile, "--tokens", tokensFile,
                    "--quiet",
                ]
                    + extra)
        }
        let past = "2020-01-01T00:00:00Z"

        let refused = try await publish("late", ["--at", past])
        #expect(refused.status == 64, "\(refused)")
        #expect(refused.stderr.contains("in the past") && refused.stderr.contains("--now-if-past"), "\(refused.stderr)")
        #expect(try await stack.store.readCampaign("late").published == 0)
        #expect(try await stack.store.readControl().campaigns["late"] == nil)

        let far = try await publish("far", ["--at", ISO8601DateFormatter().string(from: Date().addingTimeInterval(365 * 86_400))])
        #expect(far.status == 64 && far.stderr.contains("more than 30 days ahead"), "\(far)")
        #expect(try await stack.store.readCampaign("far").published == 0)

        let now = try await publish("late", ["--at", past, "--now-if-past"])
        #expect(now.status == 0, "\(now)")
        #expect(now.stderr.contains("starting now"), "\(now.stderr)")
        #expect(try await stack.store.readCampaign("late").published == 10)
        #expect(try await stack.store.readControl().campaigns["late"]?.startAtMs == nil, "no schedule: it starts now")
        await stack.stop()
    }
}
