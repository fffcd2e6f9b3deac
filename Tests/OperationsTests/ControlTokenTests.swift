import Foundation
import Logging
import Pipeline
import Redis
import TestSupport
import Testing

@testable import Operations

/// The campaign controls' token, apart from the read token.
let opsControlToken = "ops-control-0123456789abcdefgh"

/// `metrics.control_token`: the campaign buttons answer to it and only to it (the read token reads, and
/// cannot pause or cancel); it reads too; every control action is logged at notice with the peer, the
/// action and the campaign. Against a real redis-server, over real sockets.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct ControlTokenTests {
    @Test func theControlTokenAloneChangesCampaignsAndEachActionIsLogged() async throws {
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        let captured = CapturedLog()
        var logger = Logger(label: "control-token") { _ in CapturingLogHandler(captured) }
        logger.logLevel = .notice
        let (server, data) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, authToken: opsToken, controlToken: opsControlToken,
            logger: logger, cacheFor: .zero)
        let base = "http://127.0.0.1:\(server.port)"
        let read = ["Authorization": "Bearer \(opsToken)"]
        let control = ["Authorization": "Bearer \(opsControlToken)"]

        // The read token reads, and is refused the buttons (401, naming the control token); nothing changes.
        #expect(try await get(base + "/api/dashboard", headers: read).status == 200)
        let refused = try await request("POST", base + "/api/campaigns/spring/pause", headers: read)
        #expect(refused.status == 401 && refused.body.contains("metrics.control_token"), "\(refused)")
        #expect(try await store.readControl().campaigns["spring"] == nil)
        #expect(try await request("POST", base + "/api/campaigns/spring/pause").status == 401)

        // The control token changes it, and reads too.
        let paused = try await request("POST", base + "/api/campaigns/spring/pause", headers: control)
        #expect(paused.status == 200 && paused.body.contains(#""state":"paused""#), "\(paused)")
        #expect(try await store.readControl().campaigns["spring"]?.paused == true)
        let cancelled = try await request("POST", base + "/api/campaigns/spring/cancel", headers: control)
        #expect(cancelled.status == 200, "\(cancelled)")
        #expect(try await request("POST", base + "/api/campaigns/spring/resume", headers: control).status == 409)
        #expect(try await get(base + "/api/dashboard", headers: control).status == 200)
        #expect(await data.snapshot().controls)

        // Each action, done or refused, at notice: who, what, which campaign.
        let lines = captured.lines
        func logged(_ message: String, _ action: String) -> Bool {
            lines.contains {
                $0.hasPrefix(message) && $0.contains("action=\(action)") && $0.contains("campaign=spring") && $0.contains("peer=127.0.0.1:")
            }
        }
        #expect(logged("campaign control refused: no valid control token", "pause"), "\(lines)")
        #expect(logged("campaign control: pause", "pause"), "\(lines)")
        #expect(logged("campaign control: cancel", "cancel"), "\(lines)")
        #expect(logged("campaign control refused: the campaign is cancelled", "resume"), "\(lines)")
        #expect(!lines.contains { $0.contains(opsControlToken) || $0.contains(opsToken) }, "no token in a log line")
        await server.stop()
        await data.close()

        // A read token alone: the buttons are off (403 naming the key), the page does not show them.
        let (readOnly, readOnlyData) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, authToken: opsToken, logger: testLogger, cacheFor: .zero)
        let off = try await request("POST", "http://127.0.0.1:\(readOnly.port)/api/campaigns/other/pause", headers: read)
        #expect(off.status == 403 && off.body.contains("metrics.control_token"), "\(off)")
        #expect(try await store.readControl().campaigns["other"] == nil)
        #expect(await readOnlyData.snapshot().controls == false)
        await readOnly.stop()
        await readOnlyData.close()
        await client.close()
    }

    /// The key: read like `metrics.auth_token` (a secret, redacted), refused when it equals the read token
    /// or is not a usable token, naming the key and never quoting the value.
    @Test func theControlTokenIsReadFromThePipelineFile() throws {
        let key = "\(TestCertificates.directory)/AuthKey_TESTKEY123.p8"
        let app = "apps:\n  - bundle_id: a\n    token:\n      key: \(key)\n      key_id: K\n      team_id: T\n"
        func load(_ yaml: String) throws -> PipelineConfiguration {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            return try PipelineConfiguration.load(file: path)
        }
        #expect(try load(app).metricsControlToken == nil)
        let both = try load(app + "metrics:\n  auth_token: \(opsToken)\n  control_token: \(opsControlToken)\n")
        #expect(both.metricsControlToken == opsControlToken && both.metricsAuthToken == opsToken)
        #expect(both.secrets.contains(opsControlToken))
        #expect(try load(app + "metrics:\n  control_token: \(opsControlToken)\n").metricsAuthToken == nil)
        #expect {
            try load(app + "metrics:\n  auth_token: \(opsToken)\n  control_token: \(opsToken)\n")
        } throws: { error in
            let text = "\(error)"
            return text.contains("metrics.control_token") && text.contains("of its own") && !text.contains(opsToken)
        }
        #expect {
            try load(app + "metrics:\n  control_token: short-one\n")
        } throws: { "\($0)".contains("metrics.control_token") && !"\($0)".contains("short-one") }
    }
}
