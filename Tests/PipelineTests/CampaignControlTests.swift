import APNsProtocol
import Foundation
import GatewaySimulator
import HTTP2Simulator
import Pipeline
import Redis
import Sender
import TestSupport
import Testing

/// Campaign control (design §2.10) end to end: two `run` pipelines, the `apns-pipeline campaign …`
/// commands as processes, real Redis, the Kafka mock cluster over TCP, the simulators over TLS.
// A time limit per test: a stop or a command that never ends fails its test instead of holding the run.
@Suite(.serialized, .timeLimit(.minutes(15)), .enabled(if: RedisServer.available, RedisServer.skipReason))
struct CampaignControlTests {
    /// HTTP/2 to `sim`, slowed down (few streams) so a campaign takes seconds.
    static func http2Configuration(_ stack: Stack, _ sim: HTTP2Simulator) -> PipelineConfiguration {
        var c = HTTP2PipelineTests.configuration(stack, sim)
        c.http2.streamCap = 4
        return c
    }

    func waitForProcesses(_ stack: Stack, _ count: Int64) async throws {
        try await eventually("\(count) processes in control:seen") {
            try await stack.hashLength(stack.store.keys.controlSeen) == count
        }
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "not JSON: \(text)")
    }

    /// Cancel midway with two processes over HTTP/2: the command returns once both applied it; after
    /// that, only what was already on the wire (at most one window of streams per connection) reaches
    /// the simulator; every job settles (accepted before, cancelled after), jobs published after the
    /// cancel are cancelled too, and another campaign is untouched.
    @Test func cancelWithTwoProcessesOverHTTP2() async throws {
        var faults = HTTP2FaultScript()
        faults.responseDelayMillis = 10
        let stack = try await Stack()
        let sim = try await HTTP2Simulator.startedForTests(faults: faults)
        let c = Self.http2Configuration(stack, sim)
        let one = RunningPipeline(c, logger: testLogger(process: "one"))
        let two = RunningPipeline(c, logger: testLogger(process: "two"))
        try await waitForProcesses(stack, 2)
        let file = try stack.pipelineFile()

        let audience = (0..<6000).map(token)
        try await stack.publish(campaign: "wrong", template: template, tokens: audience)
        try await eventually("the campaign is going out") { HTTP2PipelineTests.recorded(sim, campaign: "wrong").count >= 300 }

        let cancel = try await PipelineProcess.command(["campaign", "cancel", "wrong", "--pipeline", file, "--timeout", "300", "--json"])
        let atReturn = HTTP2PipelineTests.recorded(sim, campaign: "wrong").values.reduce(0, +)
        #expect(cancel.status == 0, "\(cancel.stderr)")
        let answer = try Self.json(cancel.stdout)
        #expect(answer["state"] as? String == "cancelled" && answer["action"] as? String == "cancel")
        #expect((answer["processes"] as? NSNumber)?.intValue == 2 && (answer["confirmed"] as? NSNumber)?.intValue == 2)
        #expect((answer["missing"] as? [Any])?.isEmpty == true)
        let version = try #require((answer["version"] as? NSNumber)?.int64Value)
        // Both processes record the version they applied, after applying it.
        let seen = try await stack.store.controlAcknowledgements()
        #expect(seen.count == 2 && seen.allSatisfy { $0.version >= version }, "\(seen)")

        // Jobs of the campaign published after the cancel (still in Kafka when it happened) are cancelled too.
        let late = (6000..<6200).map(token)
        try await stack.publish(campaign: "wrong", template: template, tokens: late)
        // Another campaign goes out in full.
        try await stack.publish(campaign: "right", template: template, tokens: (0..<300).map(token))
        var progress = ""
        try await eventually("every job of both campaigns settled", timeout: .seconds(300)) {
            let wrong = try await stack.store.readCampaign("wrong")
            let right = try await stack.store.readCampaign("right")
            progress = "wrong \(wrong.jobsSettled) of 6200 (\(wrong.counters)), right \(right.jobsSettled) of 300 (\(right.counters))"
            return wrong.jobsSettled == 6200 && right.jobsSettled == 300
        } orRecord: {
            progress
        }
        let wrong = try await stack.store.readCampaign("wrong")
        let recorded = HTTP2PipelineTests.recorded(sim, campaign: "wrong")
        // What was written before the command returned may still arrive: at most the open streams of
        // every connection (2 processes × 2 connections × 4 streams).
        let sentAfter = recorded.values.reduce(0, +) - atReturn
        #expect(sentAfter <= 2 * c.http2.connections * c.http2.streamCap, "\(sentAfter) requests arrived after the cancel returned")
        #expect(recorded.values.allSatisfy { $0 == 1 }, "no job sent twice")
        #expect(wrong[.jobsAccepted] == Int64(recorded.count), "every accepted job is recorded, and only those")
        #expect(wrong[.jobsCancelled] == 6200 - Int64(recorded.count))
        #expect(wrong[.jobsCancelled] >= 200, "the late jobs at least")
        #expect(wrong.counters[.cancelled] >= wrong[.jobsCancelled])
        #expect(late.allSatisfy { recorded["wrong:\($0.hex)"] == nil }, "nothing published after the cancel was sent")
        #expect(HTTP2PipelineTests.recorded(sim, campaign: "right").count == 300)
        let totals = try await stack.store.readStats().totals
        #expect(totals[.cancelled] == wrong.counters[.cancelled])
        // No lease is left behind: every in-flight hash is empty once all settled.
        var leases: Int64 = 0
        for tag in stack.store.keys.tokenTags(app: shop) { leases += try await stack.hashLength("\(tag):inflight") }
        #expect(leases == 0)

        let status = try await PipelineProcess.command(["campaign", "status", "wrong", "--pipeline", file, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let object = try Self.json(status.stdout)
        #expect(object["state"] as? String == "cancelled" && object["done"] as? Bool == true)
        #expect(((object["jobs"] as? [String: Any])?["cancelled"] as? NSNumber)?.int64Value == wrong[.jobsCancelled])
        let text = try await PipelineProcess.command(["campaign", "status", "wrong", "--pipeline", file])
        #expect(text.stdout.contains("wrong: cancelled") && text.stdout.contains("cancelled"), "\(text.stdout)")

        // (A stop during the other's rebalance may fail its final commit: redelivery, not the point here.)
        try? await one.stop()
        try? await two.stop()
        // A stopped process leaves control:seen: the next change does not wait for it.
        #expect(try await stack.hashLength(stack.store.keys.controlSeen) == 0)
        try? await sim.stop()
        await stack.stop()
    }

    /// Over the binary interface: jobs queued in a shard when the cancel is applied are settled
    /// `cancelled` at the shard, never written; every job settles exactly once.
    @Test func cancelOverTheBinaryInterface() async throws {
        var faults = FaultScript()
        faults.slowReadBytes = 4096  // the gateway reads slowly: the shards' queues fill
        faults.slowReadIntervalMillis = 10
        let stack = try await Stack(faults: faults)
        var c = stack.configuration()
        c.gateway.shard.settleAfter = .milliseconds(300)
        let pipeline = RunningPipeline(c)
        try await waitForProcesses(stack, 1)
        let file = try stack.pipelineFile()
        let audience = (0..<4000).map(token)
        try await stack.publish(campaign: "bin", template: template, tokens: audience)
        try await eventually("the campaign is going out") { stack.recorded(campaign: "bin").count >= 100 }
        let cancel = try await PipelineProcess.command(["campaign", "cancel", "bin", "--pipeline", file, "--timeout", "300"])
        #expect(cancel.status == 0, "\(cancel.stderr)")
        #expect(cancel.stdout.contains("bin: cancelled") && cancel.stdout.contains("1 running process"), "\(cancel.stdout)")
        try await eventually("every job settled", timeout: .seconds(300)) { try await stack.store.readCampaign("bin").jobsSettled == 4000 }
        let bin = try await stack.store.readCampaign("bin")
        // The slow gateway reads the last frames after they settled (by time, §2.5).
        try await eventually("the gateway read every accepted frame") { stack.recorded(campaign: "bin").count >= bin[.jobsAccepted] }
        let recorded = stack.recorded(campaign: "bin")
        #expect(bin[.jobsCancelled] > 0 && bin[.jobsAccepted] + bin[.jobsCancelled] == 4000)
        #expect(bin[.jobsAccepted] == Int64(recorded.count), "every accepted job is recorded, and only those")
        #expect(recorded.values.allSatisfy { $0 == 1 })
        try await pipeline.stop()
        await stack.stop()
    }

    /// A job accepted before its campaign was cancelled and consumed again afterwards (a redelivery after a
    /// rebalance, a producer's retry) settles `deduped`, not `cancelled` as well: the campaign's per-job
    /// count stays at one outcome per job (it passed `jobs` by the redelivered copies, and `campaign wait`
    /// never ended, when the gate cancelled jobs without reading their dedup record).
    @Test func aJobAcceptedBeforeTheCancelIsDedupedNotCancelledAgain() async throws {
        let stack = try await Stack()
        let c = stack.configuration()
        let pipeline = RunningPipeline(c)
        try await waitForProcesses(stack, 1)
        let file = try stack.pipelineFile()
        let first = (0..<200).map(token)
        try await stack.publish(campaign: "again", template: template, tokens: first)
        try await eventually("the first part accepted", timeout: .seconds(300)) {
            try await stack.store.readCampaign("again")[.jobsAccepted] == 200
        }
        let cancel = try await PipelineProcess.command(["campaign", "cancel", "again", "--pipeline", file, "--timeout", "300"])
        #expect(cancel.status == 0, "\(cancel.stderr)")
        // The same 200 jobs again (their ids are the campaign and token), and 100 new ones.
        try await stack.publish(campaign: "again", template: template, tokens: first + (200..<300).map(token))
        try await eventually("every message settled", timeout: .seconds(300)) {
            let p = try await stack.store.readCampaign("again")
            return p.counters[.deduped] + p.counters[.cancelled] >= 300
        }
        let p = try await stack.store.readCampaign("again")
        #expect(p.counters[.deduped] == 200 && p.counters[.cancelled] == 100, "\(p.counters)")
        #expect(p[.jobsAccepted] == 200 && p[.jobsCancelled] == 100 && p.jobsSettled == 300, "\(p.counters)")
        #expect(stack.recorded(campaign: "again").count == 200, "nothing sent after the cancel")
        var leases: Int64 = 0
        for tag in stack.store.keys.tokenTags(app: shop) { leases += try await stack.hashLength("\(tag):inflight") }
        #expect(leases == 0, "the cancelled jobs' leases are freed")
        try await pipeline.stop()
        await stack.stop()
    }

    /// No process running: the change is recorded and the command says no process had to confirm; a
    /// bad pipeline file or campaign id is refused with a clear error.
    @Test func cancelWithNoProcessAndBadInput() async throws {
        let stack = try await Stack()
        let file = try stack.pipelineFile()
        let cancel = try await PipelineProcess.command(["campaign", "cancel", "x", "--pipeline", file, "--timeout", "300", "--json"])
        #expect(cancel.status == 0, "\(cancel.stderr)")
        let answer = try Self.json(cancel.stdout)
        #expect((answer["processes"] as? NSNumber)?.intValue == 0)
        #expect(try await stack.store.readControl().campaigns["x"]?.cancelled == true)
        let bad = try await PipelineProcess.command(["campaign", "cancel", "a:b", "--pipeline", file])
        #expect(bad.status != 0 && bad.stderr.contains("without ':'"), "\(bad.stderr)")
        for action in ["pause", "resume"] {
            let refused = try await PipelineProcess.command(["campaign", action, "a:b", "--pipeline", file])
            #expect(refused.status != 0 && refused.stderr.contains("without ':'"), "\(action): \(refused.stderr)")
        }
        let badRate = try await PipelineProcess.command(["campaign", "pace", "x", "--rate", "-1", "--pipeline", file])
        #expect(badRate.status != 0 && badRate.stderr.contains("--rate"), "\(badRate.stderr)")
        // A process that stopped beating (a crash) is not waited for, and its entry is removed.
        try await stack.store.client.send(RedisCommand("HSET", stack.store.keys.controlSeen, "gone", "0"))
        let again = try await PipelineProcess.command(["campaign", "cancel", "x", "--pipeline", file, "--timeout", "300", "--json"])
        let againAnswer = try Self.json(again.stdout)
        #expect(again.status == 0 && (againAnswer["processes"] as? NSNumber)?.intValue == 0, "\(again.stderr)")
        #expect(try await stack.hashLength(stack.store.keys.controlSeen) == 0)
        // A live process (its heartbeat present) that does not apply the change: exit 2, naming it.
        try await stack.store.client.send(RedisCommand("SET", stack.store.keys.owner("stuck"), "host-a pid 42", "PX", "60000"))
        try await stack.store.client.send(RedisCommand("HSET", stack.store.keys.controlSeen, "stuck", "-1"))
        let timedOut = try await PipelineProcess.command(["campaign", "cancel", "x", "--pipeline", file, "--timeout", "0.5"])
        #expect(timedOut.status == 2 && timedOut.stderr.contains("host-a pid 42"), "\(timedOut.status) \(timedOut.stderr)")
        await stack.stop()
    }

    /// Pause, publish, resume with two processes over HTTP/2: while paused nothing of the campaign is
    /// sent, its jobs are held in Redis (no lease, nothing in flight) and another campaign goes out in
    /// full; after the resume every job is sent exactly once.
    @Test func pauseHoldsJobsAndResumeSendsEachOnce() async throws {
        let stack = try await Stack()
        let sim = try await HTTP2Simulator.startedForTests()
        let c = HTTP2PipelineTests.configuration(stack, sim)
        let one = RunningPipeline(c)
        let two = RunningPipeline(c)
        try await waitForProcesses(stack, 2)
        let file = try stack.pipelineFile()

        let pause = try await PipelineProcess.command(["campaign", "pause", "p", "--pipeline", file, "--timeout", "300", "--json"])
        #expect(pause.status == 0, "\(pause.stderr)")
        let paused = try Self.json(pause.stdout)
        #expect(paused["state"] as? String == "paused" && (paused["confirmed"] as? NSNumber)?.intValue == 2)
        try await stack.publish(campaign: "p", template: template, tokens: (0..<3000).map(token))
        try await stack.publish(campaign: "other", template: template, tokens: (0..<300).map(token))
        try await eventually("the paused campaign held, the other one sent", timeout: .seconds(300)) {
            let held = try await stack.store.deferredCount(campaign: "p")
            let other = try await stack.store.readCampaign("other").jobsSettled
            return held == 3000 && other == 300
        }
        #expect(HTTP2PipelineTests.recorded(sim, campaign: "p").isEmpty, "nothing of a paused campaign is sent")
        #expect(HTTP2PipelineTests.recorded(sim, campaign: "other").count == 300)
        let p = try await stack.store.readCampaign("p")
        #expect(p.jobsSettled == 0 && p.counters[.deferred] >= 3000)
        #expect(try await stack.store.deferredCampaigns() == ["p"])
        var leases: Int64 = 0
        for tag in stack.store.keys.tokenTags(app: shop) { leases += try await stack.hashLength("\(tag):inflight") }
        #expect(leases == 0, "a held job holds no lease")
        let status = try await PipelineProcess.command(["campaign", "status", "p", "--pipeline", file, "--json"])
        let object = try Self.json(status.stdout)
        #expect(object["state"] as? String == "paused" && (object["deferred"] as? NSNumber)?.intValue == 3000, "\(status.stdout)")

        let resume = try await PipelineProcess.command(["campaign", "resume", "p", "--pipeline", file, "--timeout", "300", "--json"])
        #expect(resume.status == 0, "\(resume.stderr)")
        #expect(try Self.json(resume.stdout)["state"] as? String == "running")
        try await eventually("every job of p settled", timeout: .seconds(300)) {
            try await stack.store.readCampaign("p").jobsSettled == 3000
        }
        let recorded = HTTP2PipelineTests.recorded(sim, campaign: "p")
        #expect(recorded.count == 3000 && recorded.values.allSatisfy { $0 == 1 }, "each job sent exactly once")
        #expect(try await stack.store.readCampaign("p")[.jobsAccepted] == 3000)
        try await eventually("nothing held any more") {
            let held = try await stack.store.deferredCount(campaign: "p")
            let campaigns = try await stack.store.deferredCampaigns()
            return held == 0 && campaigns.isEmpty
        }
        try? await one.stop()
        try? await two.stop()
        try? await sim.stop()
        await stack.stop()
    }

    /// kill -9 of one of two `run` processes while a campaign is paused: the survivor takes its
    /// partitions over and holds what it had not; nothing is sent while paused, nothing is lost, and
    /// after the resume each job is sent exactly once.
    @Test func killWhilePausedLosesNothingAndSendsNothingEarly() async throws {
        let stack = try await Stack()
        let file = try stack.pipelineFile()
        let logs = FileManager.default.temporaryDirectory.appendingPathComponent("pause-\(UUID().uuidString)").path
        let first = try PipelineProcess(pipelineFile: file, logFile: logs + "-1.log")
        let second = try PipelineProcess(pipelineFile: file, logFile: logs + "-2.log")
        try await waitForProcesses(stack, 2)
        let pause = try await PipelineProcess.command(["campaign", "pause", "k", "--pipeline", file, "--timeout", "300"])
        #expect(pause.status == 0 && pause.stdout.contains("k: paused"), "\(pause.stdout) \(pause.stderr)")
        let audience = (0..<4000).map(token)
        try await stack.publish(campaign: "k", template: template, tokens: audience)
        try await eventually("some jobs held") { try await stack.store.deferredCount(campaign: "k") >= 200 }
        await first.crash()
        try await eventually("every job held, the crashed process's partitions taken over", timeout: .seconds(300)) {
            try await stack.store.deferredCount(campaign: "k") == 4000
        }
        #expect(stack.recorded(campaign: "k").isEmpty, "nothing sent while paused")
        // The crashed process stays in control:seen until its heartbeat lapses (redis.owner_heartbeat_s).
        let resume = try await PipelineProcess.command(["campaign", "resume", "k", "--pipeline", file, "--timeout", "30"])
        #expect(resume.status == 0, "\(resume.stdout) \(resume.stderr)")
        try await eventually("every job settled", timeout: .seconds(300)) { try await stack.store.readCampaign("k").jobsSettled == 4000 }
        let k = try await stack.store.readCampaign("k")
        #expect(k[.jobsAccepted] == 4000)
        try await eventually("the gateway read every accepted frame") { stack.recorded(campaign: "k").count == 4000 }
        #expect(stack.recorded(campaign: "k").values.allSatisfy { $0 == 1 }, "each job sent exactly once")
        #expect(await second.stop() == 0)
        await stack.stop()
    }

    /// Pause while a campaign is going out over HTTP/2: what the gate admitted before and waits in the
    /// connections' queues is held back too (kept in Redis as the job it would have sent); after the
    /// resume every job is sent exactly once.
    @Test func pauseMidwayHoldsQueuedJobsAndResumeSendsEachOnce() async throws {
        var faults = HTTP2FaultScript()
        faults.responseDelayMillis = 10
        let stack = try await Stack()
        let sim = try await HTTP2Simulator.startedForTests(faults: faults)
        let c = Self.http2Configuration(stack, sim)
        let pipeline = RunningPipeline(c)
        try await waitForProcesses(stack, 1)
        let file = try stack.pipelineFile()
        try await stack.publish(campaign: "m", template: template, tokens: (0..<4000).map(token))
        try await eventually("the campaign is going out") { HTTP2PipelineTests.recorded(sim, campaign: "m").count >= 300 }
        let pause = try await PipelineProcess.command(["campaign", "pause", "m", "--pipeline", file, "--timeout", "300"])
        let atReturn = HTTP2PipelineTests.recorded(sim, campaign: "m").values.reduce(0, +)
        #expect(pause.status == 0, "\(pause.stderr)")
        try await eventually("every job sent or held", timeout: .seconds(300)) {
            let m = try await stack.store.readCampaign("m")
            let held = try await stack.store.deferredCount(campaign: "m")
            return m.jobsSettled + held == 4000
        }
        // Jobs held back by the transport are kept as the job they would have sent (its payload carries
        // the test's `jid`); those the gate held are the messages as published (no `jid`).
        let held = try await stack.store.dueDeferred(campaign: "m", nowMs: Int64(Date().timeIntervalSince1970 * 1000) + 1000, limit: 5000)
        let fromTransports = held.filter { String(decoding: $0.stored, as: UTF8.self).contains(#""jid""#) }.count
        #expect(fromTransports > 0 && fromTransports < held.count, "\(fromTransports) of \(held.count) held back by the transports")
        let sentWhilePaused = HTTP2PipelineTests.recorded(sim, campaign: "m").values.reduce(0, +) - atReturn
        #expect(sentWhilePaused <= c.http2.connections * c.http2.streamCap, "\(sentWhilePaused) sent after the pause returned")
        let resume = try await PipelineProcess.command(["campaign", "resume", "m", "--pipeline", file, "--timeout", "300"])
        #expect(resume.status == 0, "\(resume.stderr)")
        try await eventually("every job settled", timeout: .seconds(300)) { try await stack.store.readCampaign("m").jobsSettled == 4000 }
        let recorded = HTTP2PipelineTests.recorded(sim, campaign: "m")
        #expect(recorded.count == 4000 && recorded.values.allSatisfy { $0 == 1 }, "each job sent exactly once")
        #expect(try await stack.store.readCampaign("m")[.jobsAccepted] == 4000)
        try? await pipeline.stop()
        try? await sim.stop()
        await stack.stop()
    }

    /// Files for `campaign publish`: the template and `count` tokens from `from`.
    func publishFiles(from: Int = 0, count: Int) throws -> (template: String, tokens: String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("publish-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let templatePath = dir.appendingPathComponent("template.json").path
        try String(decoding: template.serialized(), as: UTF8.self).write(toFile: templatePath, atomically: true, encoding: .utf8)
        let tokensPath = dir.appendingPathComponent("tokens.txt").path
        try (from..<(from + count)).map { token($0).hex }.joined(separator: "\n").write(
            toFile: tokensPath, atomically: true, encoding: .utf8)
        return (templatePath, tokensPath)
    }

    /// `campaign publish --at T`: the jobs are in Kafka at once, nothing reaches the gateway before T,
    /// everything after it, each job once.
    @Test func scheduledStartSendsNothingBeforeItsTime() async throws {
        let stack = try await Stack()
        let sim = try await HTTP2Simulator.startedForTests()
        let c = HTTP2PipelineTests.configuration(stack, sim)
        let one = RunningPipeline(c)
        let two = RunningPipeline(c)
        try await waitForProcesses(stack, 2)
        let file = try stack.pipelineFile()
        let files = try publishFiles(count: 2000)
        // Whole seconds (RFC 3339 without a fraction), far enough ahead that `publish`, which refuses a
        // time already past, reaches its check before it on a loaded machine.
        let startSeconds = Int64(Date().timeIntervalSince1970) + 15
        let at = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(startSeconds)))
        let publish = try await PipelineProcess.command([
            "campaign", "publish", "--campaign", "s", "--template", files.template, "--tokens", files.tokens, "--pipeline", file, "--at",
            at, "--control-timeout", "300", "--quiet",
        ])
        #expect(publish.status == 0, "\(publish.stderr)")
        #expect(publish.stderr.contains("scheduled for"), "\(publish.stderr)")
        let status = try await PipelineProcess.command(["campaign", "status", "s", "--pipeline", file, "--json"])
        let object = try Self.json(status.stdout)
        if Int64(Date().timeIntervalSince1970) < startSeconds - 1 {
            #expect((object["state"] as? String)?.hasPrefix("scheduled for") == true, "\(status.stdout)")
        }
        try await eventually("every job settled", timeout: .seconds(300)) { try await stack.store.readCampaign("s").jobsSettled == 2000 }
        let records = sim.records.filter { $0.jobID?.hasPrefix("s:") == true }
        #expect(records.count == 2000 && Set(records.compactMap(\.jobID)).count == 2000, "each job once")
        let first = try #require(records.map(\.time).min())
        #expect(first >= startSeconds * 1000, "first sent \(first - startSeconds * 1000) ms after the start time")
        try? await one.stop()
        try? await two.stop()
        try? await sim.stop()
        await stack.stop()
    }

    /// Never faster than `rate` per second from `startMs`: the k-th job to reach the gateway (each job's
    /// first record, in time order) came no earlier than `startMs + k / rate`. Each job goes at or after
    /// its own slot, the slots are 1/rate apart, and the first is not before the jobs were published: so
    /// among the first k+1 jobs to arrive one has a slot at least k/rate past the start. A slower machine
    /// only sends later; a pace that let one job through early fails. Answers the worst job, if any.
    static func earliestBeforeItsSlot(_ firstRecords: [Int64], rate: Int, startMs: Int64) -> String? {
        // 2 ms: the held jobs' scores are whole milliseconds (floor of the slot), the records' times too.
        let tolerance = 2.0
        var worst: (k: Int, early: Double)?
        for (k, t) in firstRecords.sorted().enumerated() {
            let slot = Double(startMs) + Double(k) * 1000 / Double(rate)
            let early = slot - Double(t)
            if early > tolerance, early > (worst?.early ?? 0) { worst = (k, early) }
        }
        return worst.map { "job \($0.k) of \(firstRecords.count) reached the gateway \(Int($0.early)) ms before its slot" }
    }

    /// Each job's first record time, by job id.
    static func firstRecords(_ records: [(id: String, time: Int64)]) -> [Int64] {
        var first: [String: Int64] = [:]
        for r in records { first[r.id] = min(first[r.id] ?? .max, r.time) }
        return Array(first.values)
    }

    /// The check above, on made-up arrivals: on the pace, or late and then catching up, passes; one job
    /// early, or a whole campaign at twice the pace, fails.
    @Test func theSlotCheckCatchesAnEarlyJob() {
        let onPace = (0..<100).map { Int64(1_000 + $0 * 10) }  // 100/s from 1 000 ms
        #expect(Self.earliestBeforeItsSlot(onPace, rate: 100, startMs: 1_000) == nil)
        let lateThenCatchingUp = (0..<100).map { Int64($0 < 50 ? 2_000 : 1_000 + $0 * 10) }
        #expect(Self.earliestBeforeItsSlot(lateThenCatchingUp, rate: 100, startMs: 1_000) == nil)
        var oneEarly = onPace
        oneEarly[60] = 1_300
        #expect(Self.earliestBeforeItsSlot(oneEarly, rate: 100, startMs: 1_000) != nil)
        let twiceThePace = (0..<100).map { Int64(1_000 + $0 * 5) }
        #expect(Self.earliestBeforeItsSlot(twiceThePace, rate: 100, startMs: 1_000)?.contains("job 99 of 100") == true)
    }

    /// `campaign publish --rate N` with two processes: every job once, never faster than the pace, and
    /// jobs held (deferred) on the way; `campaign pace --rate 0` then lifts it. The pace is well below
    /// what two debug-built processes carry on a slow machine: how close the rate comes to the pace is
    /// `ops/bench pace`'s to measure (docs/benchmarks.md), not a test's to bound.
    @Test func pacingHoldsTheRateAcrossTwoProcesses() async throws {
        let stack = try await Stack()
        let sim = try await HTTP2Simulator.startedForTests()
        let c = HTTP2PipelineTests.configuration(stack, sim)
        let one = RunningPipeline(c)
        let two = RunningPipeline(c)
        try await waitForProcesses(stack, 2)
        let file = try stack.pipelineFile()
        let rate = 400
        let jobs = 3000
        let files = try publishFiles(count: jobs)
        let startMs = Int64(Date().timeIntervalSince1970 * 1000)
        let publish = try await PipelineProcess.command([
            "campaign", "publish", "--campaign", "paced", "--template", files.template, "--tokens", files.tokens, "--pipeline", file,
            "--rate", "\(rate)", "--control-timeout", "300", "--quiet",
        ])
        #expect(publish.status == 0, "\(publish.stderr)")
        try await eventually("every job settled", timeout: .seconds(600)) {
            try await stack.store.readCampaign("paced").jobsSettled == Int64(jobs)
        }
        let records = sim.records.compactMap { r in r.jobID.flatMap { $0.hasPrefix("paced:") ? (id: $0, time: r.time) : nil } }
        #expect(records.count == jobs && Set(records.map(\.id)).count == jobs, "each job once")
        #expect(Self.earliestBeforeItsSlot(Self.firstRecords(records), rate: rate, startMs: startMs) == nil)
        // Pacing held jobs (their messages settle `deferred` when held): without a pace, two processes
        // would take the 3 000 jobs in the first batches and hold none.
        #expect(try await stack.store.readCampaign("paced").counters[.deferred] > 0)
        // The pace is lifted.
        let lift = try await PipelineProcess.command([
            "campaign", "pace", "paced", "--rate", "0", "--pipeline", file, "--timeout", "300", "--json",
        ])
        let lifted = try Self.json(lift.stdout)
        #expect(lift.status == 0 && lifted["state"] as? String == "running", "\(lift.stdout) \(lift.stderr)")
        try? await one.stop()
        try? await two.stop()
        try? await sim.stop()
        await stack.stop()
    }

    /// `apps[].max_rate`: every job of the app, campaign or not, never faster than that rate, each once.
    @Test func anAppsMaxRateHoldsItsJobs() async throws {
        let stack = try await Stack()
        let sim = try await HTTP2Simulator.startedForTests()
        var c = HTTP2PipelineTests.configuration(stack, sim)
        let rate = 300
        c.apps[0].maxRate = rate
        let pipeline = RunningPipeline(c)
        try await waitForProcesses(stack, 1)
        let jobs = 1500
        let startMs = Int64(Date().timeIntervalSince1970 * 1000)
        try await stack.publishRaw(
            (0..<jobs).map { #"{"id":"r-\#($0)","app":"com.example.shop","token":"\#(token($0).hex)","payload":{"aps":{"alert":"x"}}}"# })
        try await eventually("every job sent", timeout: .seconds(600)) {
            sim.records.filter { $0.jobID?.hasPrefix("r-") == true }.count >= jobs
        }
        let records = sim.records.compactMap { r in r.jobID.flatMap { $0.hasPrefix("r-") ? (id: $0, time: r.time) : nil } }
        #expect(Set(records.map(\.id)).count == jobs && records.count == jobs, "each job once")
        #expect(Self.earliestBeforeItsSlot(Self.firstRecords(records), rate: rate, startMs: startMs) == nil)
        try? await pipeline.stop()
        try? await sim.stop()
        await stack.stop()
    }

    /// kill -9 of one of two `run` processes while a campaign is paced (binary interface): nothing is
    /// lost (every job settles, each recorded once) and nothing goes early (never faster than the pace).
    @Test func killWhilePacedLosesNothingAndKeepsThePace() async throws {
        let stack = try await Stack()
        let file = try stack.pipelineFile(settleAfterMs: 500)
        let logs = FileManager.default.temporaryDirectory.appendingPathComponent("pace-\(UUID().uuidString)").path
        let first = try PipelineProcess(pipelineFile: file, logFile: logs + "-1.log")
        let second = try PipelineProcess(pipelineFile: file, logFile: logs + "-2.log")
        try await waitForProcesses(stack, 2)
        let rate = 400
        let pace = try await PipelineProcess.command(["campaign", "pace", "q", "--rate", "\(rate)", "--pipeline", file, "--timeout", "300"])
        #expect(pace.status == 0 && pace.stdout.contains("paced at \(rate)/s"), "\(pace.stdout) \(pace.stderr)")
        let jobs = 3000
        let startMs = Int64(Date().timeIntervalSince1970 * 1000)
        try await stack.publish(campaign: "q", template: template, tokens: (0..<jobs).map(token))
        try await eventually("the campaign is going out") { stack.recorded(campaign: "q").count >= 400 }
        await first.crash()
        try await eventually("every job settled", timeout: .seconds(300)) {
            try await stack.store.readCampaign("q").jobsSettled == Int64(jobs)
        }
        try await eventually("the gateway read every accepted frame") { stack.recorded(campaign: "q").count == jobs }
        let records = stack.simulator.records.filter { $0.jobID?.hasPrefix("q:") == true }
        // The crash's own duplicate window (design §2.4): what the dead process had written and not
        // settled is sent again by the survivor, each such job counted `ambiguous`.
        let ambiguous = try await stack.store.readCampaign("q").counters[.ambiguous]
        #expect(Set(records.compactMap(\.jobID)).count == jobs, "every job recorded")
        #expect(Int64(records.count - jobs) <= ambiguous, "\(records.count - jobs) duplicates, \(ambiguous) counted ambiguous")
        // First record of each job: never faster than the pace (resends of the crash window aside).
        let firsts = Self.firstRecords(records.compactMap { r in r.jobID.map { (id: $0, time: r.time) } })
        #expect(Self.earliestBeforeItsSlot(firsts, rate: rate, startMs: startMs) == nil)
        #expect(await second.stop() == 0)
        await stack.stop()
    }
}
