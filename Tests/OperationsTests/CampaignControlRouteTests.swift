import Foundation
import Logging
import Redis
import Synchronization
import TestSupport
import Testing

@testable import Operations

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A request with a method and headers over a real socket: status and body.
func request(
    _ method: String, _ url: String, headers: [String: String] = [:], timeout: TimeInterval = 600
) async throws -> (status: Int, body: String) {
    var request = URLRequest(url: URL(string: url)!)
    request.httpMethod = method
    request.timeoutInterval = timeout
    for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
    let (data, response) = try await URLSession.shared.data(for: request)
    return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
}

/// The dashboard's campaign buttons: `POST /api/campaigns/<id>/<action>` against a real redis-server,
/// over a real socket.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct CampaignControlRouteTests {
    let bearer = ["Authorization": "Bearer \(opsControlToken)"]

    /// Pause, resume and cancel change `{<p>}:control` as the CLI does; a resume after a cancel is
    /// refused (409) and changes nothing; without the token 401; GET 405; a bad path 400. A running
    /// process (a store that polls the control state, as `run` does) confirms each change.
    @Test func buttonsChangeTheControlStateBehindTheToken() async throws {
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        // A heartbeat that outlives the test however slow the machine (the default, 10 s, lapsed on a
        // loaded CI machine, and the process stopped counting as running).
        var configuration = PipelineStoreConfiguration()
        configuration.ownerHeartbeat = .seconds(600)
        let store = PipelineStore(client: client, configuration: configuration, logger: testLogger)
        // One "run" process: a heartbeat and a control poll, as run's control loop does.
        try await store.beat(value: "test-host pid 1")
        let polling = Task {
            var applied: Int64 = -1
            while !Task.isCancelled {
                if let snapshot = try await store.pollControl(applied: applied) { applied = snapshot.version }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        defer { polling.cancel() }
        // The answer waits for the poller's confirmation: a bound of the test's own, far past the product's
        // 3 s, which the poller missed when the full suite loaded both cores (the answer returns as soon as
        // it confirms, so a fast machine waits no longer).
        let (server, data) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, authToken: opsToken, controlToken: opsControlToken,
            logger: testLogger, cacheFor: .zero, confirmationWait: .seconds(300))
        let base = "http://127.0.0.1:\(server.port)/api/campaigns/"

        let paused = try await request("POST", base + "spring%20sale/pause", headers: bearer)
        #expect(paused.status == 200, "\(paused)")
        #expect(paused.body.contains(#""state":"paused""#) && paused.body.contains(#""campaign":"spring sale""#))
        #expect(paused.body.contains(#""processes":1"#) && paused.body.contains(#""confirmed":1"#), "\(paused.body)")
        #expect(try await store.readControl().campaigns["spring sale"]?.paused == true)
        // The dashboard's data shows the state, and that the buttons are available.
        let snapshot = await data.snapshot()
        #expect(snapshot.controls)

        let resumed = try await request("POST", base + "spring%20sale/resume", headers: bearer)
        #expect(resumed.status == 200 && resumed.body.contains(#""state":"running""#), "\(resumed)")
        #expect(try await store.readControl().campaigns["spring sale"]?.paused != true)

        let cancelled = try await request("POST", base + "spring%20sale/cancel", headers: bearer)
        #expect(cancelled.status == 200 && cancelled.body.contains(#""state":"cancelled""#), "\(cancelled)")
        let refused = try await request("POST", base + "spring%20sale/resume", headers: bearer)
        #expect(refused.status == 409 && refused.body.contains("final"), "\(refused)")
        let stored = try await store.readControl().campaigns["spring sale"]
        #expect(stored?.cancelled == true)
        // The cancel's time, from which its entry expires with the campaign (design §2.10).
        let cancelledAt = try #require(stored?.cancelledAtMs)
        #expect(abs(cancelledAt - Int64(Date().timeIntervalSince1970 * 1000)) < 600_000)

        let versionBefore = try await store.readControl().version
        #expect(try await request("POST", base + "other/pause").status == 401)
        #expect(try await request("POST", base + "other/pause", headers: ["Authorization": "Bearer wrong"]).status == 401)
        #expect(try await request("GET", base + "other/pause", headers: bearer).status == 405)
        #expect(try await request("POST", base + "other/stop", headers: bearer).status == 400)
        #expect(try await request("POST", base + "%FF/pause", headers: bearer).status == 400)
        #expect(try await request("POST", base + String(repeating: "x", count: 129) + "/pause", headers: bearer).status == 400)
        #expect(try await request("POST", "http://127.0.0.1:\(server.port)/api/dashboard", headers: bearer).status == 405)
        // None of the refused requests changed anything.
        let after = try await store.readControl()
        #expect(after.version == versionBefore && after.campaigns["other"] == nil)

        await server.stop()
        await data.close()
        await client.close()
    }

    /// Without `metrics.control_token` the buttons are not served (403; the page does not show them) and
    /// nothing changes: whoever reaches an open port must not stop a campaign.
    @Test func withoutATokenTheButtonsAreOff() async throws {
        let redis = try await RedisServer()
        defer { redis.stop() }
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        let (server, data) = try await OperationsSurface.serveDashboard(
            redisURL: redis.url, prefix: "apns", host: "127.0.0.1", port: 0, authToken: nil, logger: testLogger, cacheFor: .zero)
        let answer = try await request("POST", "http://127.0.0.1:\(server.port)/api/campaigns/spring/cancel")
        #expect(answer.status == 403 && answer.body.contains("metrics.control_token"), "\(answer)")
        #expect(try await store.readControl().campaigns.isEmpty)
        #expect(await data.snapshot().controls == false)
        await server.stop()
        await data.close()
        await client.close()
    }

    @Test func pathsAreParsedStrictly() throws {
        func parse(_ path: String) -> (String, CampaignAction)? {
            guard case .success(let r) = CampaignControlRoute.parse(path) else { return nil }
            return (r.campaign, r.action)
        }
        #expect(parse("/api/campaigns/spring/pause")! == ("spring", .pause))
        #expect(parse("/api/campaigns/a%2Fb/cancel")! == ("a/b", .cancel))
        #expect(parse("/api/campaigns/%C3%A9t%C3%A9/resume")! == ("été", .resume))
        #expect(parse("/api/campaigns/spring/delete") == nil)
        #expect(parse("/api/campaigns//pause") == nil)
        #expect(parse("/api/campaigns/a%0Ab/pause") == nil)
        #expect(parse("/api/campaigns/%FF/pause") == nil)
        #expect(parse("/api/campaigns/%4/pause") == nil)
        #expect(parse("/api/campaigns/pause") == nil)
        #expect(parse("/api/campaigns/" + String(repeating: "x", count: 128) + "/pause") != nil)
    }
}
