import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import Jobs
import Kafka
import Pipeline
import Redis
import Sender
import TestSupport
import Testing

/// The pipeline over Apple's HTTP/2 provider API: Kafka (mock cluster) → Redis → the HTTP/2 simulator
/// over TLS with token auth, every count exact. The binary-interface story of `PipelineTests`, told
/// with 400 and 410 answers instead of status 8 and the feedback service.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct HTTP2PipelineTests {
    static func simulator(_ faults: HTTP2FaultScript) async throws -> HTTP2Simulator {
        try await HTTP2Simulator.startedForTests(faults: faults)
    }

    /// The stack's configuration with one HTTP/2 app, token auth, pointed at `sim`.
    static func configuration(_ stack: Stack, _ sim: HTTP2Simulator) -> PipelineConfiguration {
        var c = stack.configuration()
        c.apps = [
            .init(
                bundleID: shop, transport: .http2,
                authentication: .token(
                    keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID))
        ]
        c.http2.hosts = [GatewayAddress(host: "127.0.0.1", port: sim.port)]
        c.http2.serverHostname = "localhost"
        c.http2.ca = "\(TestCertificates.directory)/ca.pem"
        c.http2.connections = 2
        // A stream unanswered for the product's 10 s is resent as ambiguous: a loaded machine can keep
        // the in-process simulator from answering that long, and the tests count each job once.
        c.http2.requestTimeout = .seconds(300)
        c.http2.reconnect.initialDelay = .milliseconds(5)
        c.http2.reconnect.attemptsPerSecondPerGateway = 1000
        return c
    }

    static func recorded(_ sim: HTTP2Simulator, campaign: String) -> [String: Int] {
        sim.records.reduce(into: [:]) { counts, r in
            if let id = r.jobID, id.hasPrefix("\(campaign):") { counts[id, default: 0] += 1 }
        }
    }

    @Test func campaignsSuppressionByAnswersDedupAndDeadLetters() async throws {
        let audience = (0..<1000).map(token)
        let invalid = Set(stride(from: 17, to: 1000, by: 100).map(token))  // 10: 400 BadDeviceToken
        let uninstalled = Set(stride(from: 29, to: 1000, by: 50).map(token))  // 20: 410 Unregistered
        // Apple's 410 timestamp: when it last knew the token valid (here an hour ago).
        let unregisteredAt = Int64(Date().timeIntervalSince1970) - 3600
        var faults = HTTP2FaultScript()
        faults.invalidTokens = Set(invalid.map(\.hex))
        faults.uninstalledTokens = Set(uninstalled.map(\.hex))
        faults.unregisteredTimestampMillis = unregisteredAt * 1000
        faults.shutdownEvery = 400  // GOAWAY now and then: streams above it are resent, never twice
        let stack = try await Stack()
        let sim = try await Self.simulator(faults)
        let pipeline = RunningPipeline(Self.configuration(stack, sim))

        // Campaign A, with HTTP/2 fields and malformed ones among it.
        try await stack.publish(campaign: "a", template: template, tokens: audience)
        let good = token(5000).hex
        try await stack.publishRaw([
            #"{"id":"h1","app":"com.example.shop","token":"\#(good)","payload":{"aps":{"alert":"x"}},"collapse_id":"\#(String(repeating: "c", count: 65))"}"#,
            #"{"id":"h2","app":"com.example.shop","token":"\#(good)","payload":{"aps":{"alert":"x"}},"push_type":"background"}"#,
            #"{"id":"h3","app":"com.example.shop","token":"\#(good)","payload":{"aps":{"alert":"\#(String(repeating: "x", count: 4100))"}}}"#,
            #"{"id":"h4","app":"com.example.shop","token":"\#(good)","payload":{"aps":{"alert":"x"}},"collapse_id":"score-42","push_type":"alert","priority":5}"#,
        ])
        try await stack.waitSettled("a", count: 1000)
        try await eventually("3 dead letters counted, h4 accepted") {
            let totals = try await stack.store.readStats().totals
            return totals[.deadLettered] == 3 && totals[.accepted] == 971
        }

        var a = try await stack.campaign("a")
        #expect(a["accepted"] == 970)
        #expect(a["rejected"] == 30)
        #expect(a["rejected:BadDeviceToken"] == 10)
        #expect(a["rejected:Unregistered"] == 20)
        let recordedA = Self.recorded(sim, campaign: "a")
        #expect(recordedA.count == 970)
        // Streams above a GOAWAY's last stream are resent unprocessed; a request can only reach the
        // gateway twice when its connection ended before answering it, and each such resend is counted.
        let ambiguous = try await stack.store.readStats().totals[.ambiguous]
        #expect(Int64(recordedA.values.reduce(0, +) - recordedA.count) <= ambiguous, "duplicates only among ambiguous")
        #expect(Set(recordedA.keys) == Set(audience.filter { !invalid.contains($0) && !uninstalled.contains($0) }.map { "a:\($0.hex)" }))
        #expect(sim.totals.goAways > 0, "the GOAWAY fault fired")
        // h4's HTTP/2 fields reached the gateway.
        let h4 = sim.records.first { $0.jobID == "h4" }
        #expect(h4?.collapseID == "score-42" && h4?.pushType == "alert" && h4?.priority == 5)
        #expect(h4?.auth.contains(TestCertificates.tokenTeamID) == true, "token auth: \(h4?.auth ?? "-")")

        // Both kinds of dead token are suppressed at once; a 410 from Apple's timestamp.
        #expect(try await stack.tokenHashLength("suppressed", shop) == 30)
        let stamp = try await stack.store.client.send(
            RedisCommand(
                "HGET", stack.store.keys.suppressed(app: shop, tokenHex: uninstalled.first!.hex), uninstalled.first!.hex.lowercased())
        ).string
        #expect(stamp?.hasPrefix("\(unregisteredAt):") == true, "410 suppression time \(stamp ?? "-")")

        // Five uninstalled tokens register again after their 410 time (but before now): lifted. An
        // invalid token registering at the same time is not: its suppression is from when it was refused.
        let reregistered = Array(uninstalled.sorted { $0.hex < $1.hex }.prefix(5))
        let invalidOne = invalid.sorted { $0.hex < $1.hex }[0]
        let registeredAt = unregisteredAt + 10
        try await stack.publishRaw(
            (reregistered + [invalidOne]).map { t in #"{"app":"com.example.shop","token":"\#(t.hex)","registered_at":\#(registeredAt)}"# },
            topic: "apns.registrations")
        try await eventually("registrations applied") { try await stack.tokenHashLength("registered", shop) == 6 }

        // Campaign B to the same audience: the dead tokens suppressed before sending, the re-registered
        // sent again (the simulator, unlike a device, still answers them 410).
        try await stack.publish(campaign: "b", template: template, tokens: audience)
        try await stack.waitSettled("b", count: 1000)
        let b = try await stack.campaign("b")
        #expect(b["suppressed"] == 25)
        #expect(b["rejected:Unregistered"] == 5, "the re-registered tokens were sent, not suppressed")
        #expect(b["rejected:BadDeviceToken"] == nil, "the invalid token that registered before its refusal stays suppressed")
        #expect(b["accepted"] == 970)
        #expect(Self.recorded(sim, campaign: "b").count == 970)

        // Campaign A again: nothing accepted before is sent twice.
        try await stack.publish(campaign: "a", template: template, tokens: audience)
        try await stack.waitSettled("a", count: 2000)
        a = try await stack.campaign("a")
        #expect(a["deduped"] == 970)
        #expect(a["suppressed"] == 25)
        #expect(a["accepted"] == 970)
        #expect(a["rejected"] == 35, "30 the first time, and the 5 re-registered tokens again")
        #expect(Self.recorded(sim, campaign: "a").count == 970, "no accepted job sent again")

        // Dead letters, with their reasons.
        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: stack.cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"],
                sessionTimeout: .seconds(6)), logger: testLogger)
        var reasons: [String: String] = [:]
        try await eventually("3 dead letters read") {
            if let batch = await dlq.nextBatch() {
                for m in batch {
                    let id = String(decoding: m.value, as: UTF8.self).split(separator: "\"")[3]
                    reasons[String(id)] = m.headers.first(named: "reason")?.stringValue
                }
            }
            return reasons.count >= 3
        }
        await dlq.close()
        #expect(reasons == ["h1": "invalid-collapse-id", "h2": "invalid-push-type", "h3": "payload-too-large"])

        try await pipeline.stop()
        let positions = pipeline.runner.observations.finalCommitPositions
        #expect(positions.values.reduce(0, +) == 3004, "committed positions \(positions)")
        try await sim.stop()
        await stack.stop()
    }

    /// An Apple incident (every answer 503 for 2 s from the first request) rides through: every job accepted once, none
    /// dead-lettered; the resends are counted by reason in Redis (`retried:5xx`), nothing `gave_up`.
    @Test func aServiceUnavailableStormIsRetriedAndCountedByReason() async throws {
        let audience = (0..<300).map(token)
        var faults = HTTP2FaultScript()
        faults.serviceUnavailableRate = 1
        faults.ratesFromSecond = 0
        faults.ratesForSeconds = 2
        let stack = try await Stack()
        let sim = try await Self.simulator(faults)
        var c = Self.configuration(stack, sim)
        c.http2.retry.initialDelay = .milliseconds(50)
        c.http2.retry.maximumDelay = .milliseconds(500)
        let pipeline = RunningPipeline(c)
        try await stack.publish(campaign: "s", template: template, tokens: audience)
        try await stack.waitSettled("s", count: 300)
        let s = try await stack.campaign("s")
        #expect(s["accepted"] == 300)
        #expect((s["dead_lettered"] ?? 0) == 0)
        #expect(Self.recorded(sim, campaign: "s").values.allSatisfy { $0 == 1 })
        #expect(Self.recorded(sim, campaign: "s").count == 300)
        #expect(sim.totals.byStatus[503, default: 0] > 0, "the storm was met")
        try await eventually("the 503 retries are counted by reason") {
            try await stack.store.readStats().totals.fields["retried:5xx", default: 0] > 0
        }
        #expect(try await stack.store.readStats().totals.fields["gave_up", default: 0] == 0)
        try await pipeline.stop()
        try await sim.stop()
        await stack.stop()
    }

    /// A server that resets every stream: each job is retried with back-off until
    /// `http2.give_up_after_s` (1 s here), then dead-lettered `gateway-gave-up`, counted `gave_up`.
    @Test func aResetStormEndsInGatewayGaveUpDeadLetters() async throws {
        let audience = (0..<40).map(token)
        var faults = HTTP2FaultScript()
        faults.resetStreamRate = 1
        let stack = try await Stack()
        let sim = try await Self.simulator(faults)
        var c = Self.configuration(stack, sim)
        c.http2.giveUpAfter = .seconds(1)
        c.http2.retry.initialDelay = .milliseconds(50)
        c.http2.retry.maximumDelay = .milliseconds(500)
        let pipeline = RunningPipeline(c)
        try await stack.publish(campaign: "r", template: template, tokens: audience)
        try await stack.waitSettled("r", count: 40)
        let r = try await stack.campaign("r")
        #expect(r["dead_lettered"] == 40)
        #expect(sim.records.isEmpty)
        try await eventually("the give-ups and the resets are counted") {
            let totals = try await stack.store.readStats().totals.fields
            return totals["gave_up", default: 0] == 40 && totals["retried:reset", default: 0] > 0
        }
        // Bounded: 1 s of back-off from 50 ms is a handful of requests per job, not a hot loop.
        #expect(sim.totals.resetStreams <= 40 * 12)
        try await pipeline.stop()
        try await sim.stop()
        await stack.stop()
    }

    /// Connections dropped with requests in flight: each unanswered request is resent (a possible
    /// duplicate) and counted `ambiguous` for its campaign when it settles, not only in the totals.
    @Test func droppedConnectionsCountAmbiguousResendsPerCampaign() async throws {
        let audience = (0..<600).map(token)
        var faults = HTTP2FaultScript()
        faults.dropEvery = 150  // the 150th accepted request's connection closes before it is answered
        let stack = try await Stack()
        let sim = try await Self.simulator(faults)
        let pipeline = RunningPipeline(Self.configuration(stack, sim))
        try await stack.publish(campaign: "d", template: template, tokens: audience)
        try await stack.waitSettled("d", count: 600)
        // Every job is in campaign "d", so once the last outcome is in, its count is the totals' one.
        var campaignAmbiguous: Int64 = 0
        var totalsAmbiguous: Int64 = 0
        try await eventually("the campaign's ambiguous equals the totals'") {
            campaignAmbiguous = try await stack.campaign("d")["ambiguous"] ?? 0
            totalsAmbiguous = try await stack.store.readStats().totals[.ambiguous]
            return campaignAmbiguous == totalsAmbiguous
        }
        #expect(campaignAmbiguous >= 1, "the drops left requests unanswered")
        #expect(totalsAmbiguous >= campaignAmbiguous)
        let d = try await stack.campaign("d")
        #expect(d["accepted"] == 600)
        let recorded = Self.recorded(sim, campaign: "d")
        #expect(recorded.count == 600)
        #expect(Int64(recorded.values.reduce(0, +) - recorded.count) <= campaignAmbiguous, "duplicates only among ambiguous")
        try await pipeline.stop()
        try await sim.stop()
        await stack.stop()
    }
}
