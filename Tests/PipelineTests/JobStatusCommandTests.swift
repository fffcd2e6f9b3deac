import Foundation
import Pipeline
import Redis
import TestSupport
import Testing

/// Issue 30 (5): `apns-pipeline job status ID --app A --token T [--json]` as an operator runs it, against
/// a real redis-server: the answer, its JSON, and the exit status (3: not seen).
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct JobStatusCommandTests {
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func acceptedSuppressedAndNotSeen() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("job-\(UUID().uuidString).yaml").path
        try """
        redis:
          url: "redis://127.0.0.1:\(server.port)/0"
        apps:
          - bundle_id: \(shop)
            certificate: "\(TestCertificates.directory)/\(shop).pem"
            key: "\(TestCertificates.directory)/\(shop).key"

        """.write(toFile: file, atomically: true, encoding: .utf8)
        let accepted = String(repeating: "ab", count: 32)
        let dead = String(repeating: "cd", count: 32)
        let store = PipelineStore(client: try server.client())
        let now = PipelineStore.epochNow()
        _ = try await store.settle(
            SettleBatch(outcomes: [SettledOutcome(jobID: "order-1", app: shop, tokenHex: accepted, kind: .accepted)], settledAt: now))
        try await store.suppress([Suppression(app: shop, tokenHex: dead, at: now - 60, reason: "invalid-token")])

        let json = try await PipelineProcess.command([
            "job", "status", "order-1", "--app", shop, "--token", accepted, "--pipeline", file, "--json",
        ])
        #expect(json.status == 0, "\(json.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["state"] as? String == "accepted" && object["id"] as? String == "order-1" && object["app"] as? String == shop)
        #expect(object["accepted_from"] is String && object["accepted_until"] is String, "\(object)")

        let text = try await PipelineProcess.command(["job", "status", "order-2", "--app", shop, "--token", dead, "--pipeline", file])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("job order-2: suppressed") && text.stdout.contains("(invalid-token)"), "\(text.stdout)")

        let unseen = try await PipelineProcess.command([
            "job", "status", "order-3", "--app", shop, "--token", accepted, "--pipeline", file, "--json",
        ])
        #expect(unseen.status == 3, "\(unseen.stdout) \(unseen.stderr)")
        #expect(unseen.stdout.contains("\"state\":\"not-seen\""), "\(unseen.stdout)")

        // A token that is not hex, and an app the file does not name: exit 1 with what to give.
        let badToken = try await PipelineProcess.command(["job", "status", "x", "--app", shop, "--token", "xyz", "--pipeline", file])
        #expect(badToken.status != 0 && badToken.stderr.contains("--token: expected the device token as hex"), "\(badToken.stderr)")
        let badApp = try await PipelineProcess.command([
            "job", "status", "x", "--app", "com.other", "--token", accepted, "--pipeline", file,
        ])
        #expect(badApp.status == 1 && badApp.stderr.contains("no app entry"), "\(badApp.stderr)")
    }
}
