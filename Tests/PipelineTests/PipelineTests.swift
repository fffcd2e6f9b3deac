import APNsProtocol
import Feedback
import Foundation
import GatewaySimulator
import Jobs
import Kafka
import Pipeline
import Redis
import Sender
import Synchronization
import TestSupport
import Testing
import Tools

/// The demo's scenario, smaller, with every count asserted exactly, against real servers.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct PipelineTests {
    /// On one redis-server and on a 3-primary Redis Cluster: the same pipeline, the same outcomes.
    @Test(arguments: RedisTestTarget.allCases)
    func campaignsSuppressionDedupAndDeadLetters(_ redis: RedisTestTarget) async throws {
        let audience = (0..<1000).map(token)
        let invalid = Set(stride(from: 17, to: 1000, by: 100).map(token))  // 10
        let uninstalled = Set(stride(from: 29, to: 1000, by: 50).map(token))  // 20
        var faults = FaultScript()
        faults.invalidTokens = Set(invalid.map(\.hex))
        faults.uninstalledTokens = Set(uninstalled.map(\.hex))
        let stack = try await Stack(faults: faults, redis: redis)
        let pipeline = RunningPipeline(stack.configuration())

        // Campaign A, and five malformed jobs among it.
        try await stack.publish(campaign: "a", template: template, tokens: audience)
        let good = token(5000).hex
        try await stack.publishRaw([
            #"{"id":"m1","app":"com.example.shop","token":"\#(good)","payload":{"aps":{"alert":"x"}"#,  // bad JSON
            #"{"id":"m2","app":"com.example.shop","token":"abc","payload":{"aps":{"alert":"x"}}}"#,
            #"{"id":"m3","app":"com.example.shop","token":"\#(good)","payload":{"aps":{"alert":"\#(String(repeating: "x", count: 2100))"}}}"#,
            #"{"id":"m4","app":"com.example.shop","token":"\#(good)","payload":{"aps":{"content-available":1}},"priority":10}"#,
            #"{"id":"m5","app":"com.example.shop","token":"\#(good)","payload":{"acme":1}}"#,
        ])
        try await stack.waitSettled("a", count: 1000)
        try await eventually("5 dead letters counted") { try await stack.store.readStats().totals[.deadLettered] == 5 }

        var a = try await stack.campaign("a")
        #expect(a["accepted"] == 990)
        #expect(a["rejected"] == 10)
        #expect(a["rejected:8"] == 10)
        let recordedA = stack.recorded(campaign: "a")
        #expect(recordedA.count == 990)
        #expect(recordedA.values.allSatisfy { $0 == 1 }, "every valid job recorded exactly once")
        #expect(Set(recordedA.keys) == Set(audience.filter { !invalid.contains($0) }.map { "a:\($0.hex)" }))

        // The invalid tokens are suppressed, with the reason.
        let suppressed = try await stack.tokenHashLength("suppressed", shop)
        #expect(suppressed == 10)

        // Dead letters: unchanged, with their reasons.
        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: stack.cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"],
                sessionTimeout: .seconds(6)), logger: testLogger)
        var reasons: [String: String] = [:]
        try await eventually("5 dead letters read") {
            if let batch = await dlq.nextBatch() {
                for m in batch {
                    let id = String(decoding: m.value, as: UTF8.self).split(separator: "\"")[3]
                    reasons[String(id)] = m.headers.first(named: "reason")?.stringValue
                    #expect(m.headers.first(named: "source-topic")?.stringValue == "apns.jobs")
                }
            }
            return reasons.count >= 5
        }
        await dlq.close()
        #expect(
            reasons == [
                "m1": "invalid-json", "m2": "invalid-token", "m3": "payload-too-large",
                "m4": "priority-10-content-available-only", "m5": "invalid-payload",  // m5: no aps dictionary
            ])

        // Feedback: the simulator queued the uninstalled tokens; the poller suppresses them.
        let poller = FeedbackPoller(store: stack.store, logger: testLogger)
        let summary = try await poller.poll(
            FeedbackApp(
                credentials: .test(app: shop, in: TestCertificates.directory),
                endpoint: FeedbackEndpoint(host: "127.0.0.1", port: stack.simulator.ports.feedback, serverHostname: "localhost")))
        #expect(summary.suppressed == 20)
        #expect(try await stack.tokenHashLength("suppressed", shop) == 30)

        // Five of them re-register after their feedback time (one of them in French): they get campaign B.
        let reregistered = Array(uninstalled.sorted { $0.hex < $1.hex }.prefix(5))
        let later = Int(Date().timeIntervalSince1970) + 10
        try await stack.publishRaw(
            reregistered.enumerated().map { i, t in
                #"{"app":"com.example.shop","token":"\#(t.hex)","registered_at":\#(later)\#(i == 0 ? #","language":"fr""# : "")}"#
            }, topic: "apns.registrations")
        try await eventually("registrations applied") { try await stack.tokenHashLength("registered", shop) == 5 }

        // Campaign B to the same audience: invalid and still-uninstalled tokens suppressed before sending.
        try await stack.publish(campaign: "b", template: template, tokens: audience)
        try await stack.waitSettled("b", count: 1000)
        let b = try await stack.campaign("b")
        #expect(b["suppressed"] == 25)
        #expect(b["accepted"] == 975)
        let recordedB = stack.recorded(campaign: "b")
        #expect(recordedB.count == 975 && recordedB.values.allSatisfy { $0 == 1 })
        #expect(reregistered.allSatisfy { recordedB["b:\($0.hex)"] == 1 }, "re-registered tokens delivered again")
        #expect(uninstalled.subtracting(reregistered).allSatisfy { recordedB["b:\($0.hex)"] == nil })
        #expect(invalid.allSatisfy { recordedB["b:\($0.hex)"] == nil })
        // The French registration picked the French alert: the gateway got exactly the payload that
        // job encodes for "fr" (and the English one the default).
        for (i, t) in reregistered.prefix(2).enumerated() {
            let message = Campaign.job(template: template, campaign: "b", recipient: .init(token: t, language: nil))
            let job = try JobDecoder().decode(message, now: UInt32(Date().timeIntervalSince1970))
            let expected = try job.encodedPayload(language: i == 0 ? "fr" : nil, encoder: PayloadEncoder(), jobIDKey: "jid")
            #expect(String(decoding: expected, as: UTF8.self).contains(i == 0 ? "Bonjour" : "Hello"))
            let record = stack.simulator.records.first { $0.jobID == "b:\(t.hex)" }
            #expect(record?.payloadHash == fnv1a64(expected))
        }

        // Campaign A again: nothing is sent twice; invalid tokens are now suppressed before sending.
        try await stack.publish(campaign: "a", template: template, tokens: audience)
        try await stack.waitSettled("a", count: 2000)
        a = try await stack.campaign("a")
        #expect(a["deduped"] == 990)
        #expect(a["suppressed"] == 10)
        #expect(a["accepted"] == 990)
        #expect(stack.recorded(campaign: "a").values.allSatisfy { $0 == 1 })

        try await pipeline.stop()
        // Every message of every partition settled and committed: positions add up to what was published.
        let positions = pipeline.runner.observations.finalCommitPositions
        #expect(positions.values.reduce(0, +) == 3005, "committed positions \(positions)")
        await stack.stop()
    }

    /// SIGTERM mid-campaign, then a restart: the campaign finishes, nothing lost, nothing sent twice.
    @Test func gracefulStopMidCampaignThenRestart() async throws {
        let stack = try await Stack()
        let audience = (0..<4000).map(token)
        try await stack.publish(campaign: "c", template: template, tokens: audience)
        var config = stack.configuration()
        config.maxInFlight = 300  // slow enough to stop it in the middle
        let first = RunningPipeline(config)
        try await eventually("first run settled some") {
            let c = try await stack.campaign("c")
            return (c["accepted"] ?? 0) >= 500
        }
        try await first.stop()
        let settledByFirst = try await stack.campaign("c")["accepted"] ?? 0
        #expect(settledByFirst < 4000, "stopped in the middle")
        let second = RunningPipeline(config)
        try await stack.waitAccepted("c", count: 4000)
        try await second.stop()
        let recorded = stack.recorded(campaign: "c")
        #expect(recorded.count == 4000, "nothing lost")
        #expect(recorded.values.allSatisfy { $0 == 1 }, "nothing sent twice")
        let c = try await stack.campaign("c")
        #expect(c["accepted"] == 4000)
        await stack.stop()
    }

    /// Issue 10 (1): a job message too large for the dead-letter topic costs one dead letter without
    /// its body, never the pipeline; the valid jobs behind it are delivered.
    @Test func poisonMessageCostsOneDeadLetterNotThePipeline() async throws {
        let stack = try await Stack()
        let pipeline = RunningPipeline(stack.configuration())
        // A producer allowed to publish ~1 MiB messages (the pipeline's DLQ producer keeps the default).
        let big = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(
                bootstrapServers: stack.cluster.bootstrapServers, properties: ["message.max.bytes": "4000000"]),
            logger: testLogger)
        func job(_ id: String, alertBytes: Int) -> [UInt8] {
            Array(#"{"id":"\#(id)","app":"com.example.shop","token":"\#(token(9000).hex)","payload":{"aps":{"alert":""#.utf8)
                + [UInt8](repeating: 0x78, count: alertBytes) + Array(#""}}}"#.utf8)
        }
        let large = job("large", alertBytes: 900_000)  // fits the DLQ: dead-lettered with its body
        let huge = job("huge", alertBytes: 1 << 20)  // does not
        try await stack.publish(campaign: "p1", template: template, tokens: (0..<300).map(token))
        try await big.sendBatch([
            KafkaProducerMessage(topic: "apns.jobs", partition: 0, key: nil, value: large),
            KafkaProducerMessage(topic: "apns.jobs", partition: 0, key: nil, value: huge),
        ])
        await big.close()
        try await stack.publish(campaign: "p2", template: template, tokens: (300..<600).map(token))
        try await stack.waitAccepted("p1", count: 300, timeout: .seconds(300))
        try await stack.waitAccepted("p2", count: 300, timeout: .seconds(300))
        try await eventually("2 dead letters counted") { try await stack.store.readStats().totals[.deadLettered] == 2 }
        #expect(try await stack.store.readStats().totals[.deadLetterFailures] == 0)

        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: stack.cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"],
                sessionTimeout: .seconds(6)), logger: testLogger)
        var letters: [KafkaConsumerMessage] = []
        try await eventually("2 dead letters read") {
            if let batch = await dlq.nextBatch() { letters += batch }
            return letters.count >= 2
        }
        await dlq.close()
        #expect(letters.count == 2, "one dead letter each")
        let withBody = try #require(letters.first { !$0.value.isEmpty })
        #expect(withBody.value == large)
        #expect(withBody.headers.first(named: "body-omitted") == nil)
        let bodyless = try #require(letters.first { $0.value.isEmpty })
        #expect(bodyless.headers.first(named: "reason")?.stringValue == "payload-too-large")
        #expect(bodyless.headers.first(named: "original-size")?.stringValue == String(huge.count))
        #expect(bodyless.headers.first(named: "body-fnv1a64")?.stringValue == fnv1a64(huge))
        #expect(bodyless.headers.first(named: "source-topic")?.stringValue == "apns.jobs")
        #expect(bodyless.headers.first(named: "source-partition")?.stringValue == "0")
        #expect(bodyless.headers.first(named: "body-omitted") != nil)
        let sourceOffset = try #require(bodyless.headers.first(named: "source-offset")?.stringValue.flatMap { Int64($0) })
        #expect(withBody.headers.first(named: "source-offset")?.stringValue == String(sourceOffset - 1))

        // Still running: a stop is graceful, and every message (the two poison ones included) committed.
        try await pipeline.stop()
        #expect(pipeline.runner.observations.finalCommitPositions.values.reduce(0, +) == 602)
        #expect(stack.recorded(campaign: "p2").count == 300)
        await stack.stop()
    }

    /// Issue 10 (1): a dead-letter topic that refuses writes costs retries (counted, logged), not the
    /// pipeline: valid jobs go on, the refused message stays unsettled until its letter is stored.
    @Test func failingDeadLetterWritesAreRetriedAndCounted() async throws {
        let stack = try await Stack()
        stack.cluster.setTopicError("apns.jobs.dlq", code: 29)  // TOPIC_AUTHORIZATION_FAILED
        var config = stack.configuration()
        config.kafka.deadLetterTimeoutMs = 1000
        let pipeline = RunningPipeline(config)
        try await stack.publishRaw([#"{"id":"bad","app":"com.example.shop","token":"abc","payload":{"aps":{}}}"#])
        try await stack.publish(campaign: "d", template: template, tokens: (0..<300).map(token))
        try await stack.waitAccepted("d", count: 300, timeout: .seconds(300))
        try await eventually("dead-letter failures counted") {
            try await stack.store.readStats().totals[.deadLetterFailures] >= 2
        }
        #expect(try await stack.store.readStats().totals[.deadLettered] == 0, "not settled before it is stored")
        stack.cluster.setTopicError("apns.jobs.dlq", code: 0)
        try await eventually("dead letter stored and settled") { try await stack.store.readStats().totals[.deadLettered] == 1 }
        try await pipeline.stop()
        #expect(pipeline.runner.observations.finalCommitPositions.values.reduce(0, +) == 301)
        await stack.stop()
    }

    /// Issue 10 (2, 3): `kill -9` of a `run` process mid-campaign, then a new one: the dead process's
    /// leases are void once its heartbeat lapses (seconds), not after the 600 s lease; every job is
    /// delivered, and what may have gone out twice is counted (`resent_after_crash`, also `ambiguous`).
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func killedProcessLeasesAreTakenOverInSeconds() async throws {
        let stack = try await Stack()
        let audience = (0..<6000).map(token)
        try await stack.publish(campaign: "k", template: template, tokens: audience)
        let file = try stack.pipelineFile()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("run-\(UUID().uuidString).log").path
        let first = try PipelineProcess(pipelineFile: file, logFile: log)
        try await eventually("the first process accepted some", timeout: .seconds(300)) {
            (try await stack.campaign("k")["accepted"] ?? 0) >= 1000
        }
        await first.crash()
        let killed = ContinuousClock.now
        var leased = 0
        for hash in try await stack.store.client.send(RedisCommand("KEYS", "{apns:*}:inflight")).array?.compactMap(\.string) ?? [] {
            leased += Int(try await stack.store.client.send(RedisCommand("HLEN", hash)).integer ?? 0)
        }
        #expect(leased > 0, "the crash left leases behind")
        let second = try PipelineProcess(pipelineFile: file, logFile: log)
        // The deadline is far below the 600 s lease: only a takeover can meet it.
        try await stack.waitAccepted("k", count: 6000, timeout: .seconds(300))
        let recovery = ContinuousClock.now - killed
        #expect(await second.stop() == 0)

        let recorded = stack.recorded(campaign: "k")
        #expect(recorded.count == 6000, "nothing lost")
        let duplicates = recorded.values.filter { $0 > 1 }.count
        let totals = try await stack.store.readStats().totals
        let campaign = try await stack.campaign("k")
        #expect(totals[.resentAfterCrash] > 0, "leases were taken over")
        #expect(Int64(duplicates) <= totals[.resentAfterCrash], "every duplicate is in the counted window")
        #expect(campaign["resent_after_crash"] == totals[.resentAfterCrash])
        // `ambiguous` counts only what the dead process had handed to its transports (issue 28): still
        // every duplicate.
        #expect(Int64(duplicates) <= totals[.ambiguous], "every duplicate is counted ambiguous")
        print(
            "kill -9: \(leased) leases left, recovered in \(recovery), resent_after_crash \(totals[.resentAfterCrash]), duplicates \(duplicates), in_flight_waits \(totals[.inFlightWaits])"
        )
        await stack.stop()
    }

    /// Issue 10 (5): Kafka gone, then SIGTERM: the pipeline drains and settles, but the final commit
    /// cannot be stored, and `run` must say so and fail (it exited 0 before).
    @Test func finalCommitFailureFailsTheRun() async throws {
        let stack = try await Stack()
        try await stack.publish(campaign: "f", template: template, tokens: (0..<6000).map(token))
        let pipeline = RunningPipeline(stack.configuration())
        try await stack.waitAccepted("f", count: 500, timeout: .seconds(300))
        // Jobs still in flight settle after this: positions that can no longer be committed.
        stack.cluster.stop()
        try await Task.sleep(for: .seconds(2))
        await #expect(throws: KafkaError.self) { try await pipeline.stop() }
        await stack.stop()
    }

    /// Issue 13 (4, 5, 6): two real `run` processes and forced rebalances (the second starts mid-campaign,
    /// then the first stops mid-campaign): messages are redelivered and settle again, but the campaign's
    /// per-job progress never exceeds its jobs, ends exactly at them, and `campaign wait` (a real process
    /// beside them) returns 0 only once every job is done. Also: `campaign status --json`, `stats --json`,
    /// the wait's timeout status, and `${NAME}` in the pipeline file kept out of the logs.
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func progressIsExactWithTwoProcessesAndRebalances() async throws {
        let audience = (0..<6000).map(token)
        let invalid = Set(stride(from: 7, to: 6000, by: 97).map(token))  // 62: rejected, then suppressed when redelivered
        var faults = FaultScript()
        faults.invalidTokens = Set(invalid.map(\.hex))
        let stack = try await Stack(faults: faults)
        let jobs = Int64(audience.count)
        // The group comes from the environment: a substituted value, which no log line may show.
        let groupSecret = "progress-group-\(UUID().uuidString.prefix(8))"
        let environment = ["APNS_TEST_GROUP": groupSecret]
        let file = try stack.pipelineFile(group: "\"${APNS_TEST_GROUP}\"", settleAfterMs: 1000, maxInFlight: 1000)
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("run-\(UUID().uuidString).log").path

        // Published by `campaign publish` itself, from a token file listing one token twice: one job.
        let tokensFile = FileManager.default.temporaryDirectory.appendingPathComponent("tokens-\(UUID().uuidString).txt").path
        try (audience.map(\.hex) + [audience[5].hex]).joined(separator: "\n").write(toFile: tokensFile, atomically: true, encoding: .utf8)
        let templateFile = FileManager.default.temporaryDirectory.appendingPathComponent("template-\(UUID().uuidString).json").path
        defer { for f in [tokensFile, templateFile] { try? FileManager.default.removeItem(atPath: f) } }
        try Data(template.serialized()).write(to: URL(fileURLWithPath: templateFile))
        let published = try await PipelineProcess.command(
            ["campaign", "publish", "--pipeline", file, "--campaign", "p", "--template", templateFile, "--tokens", tokensFile, "--quiet"],
            environment: environment)
        #expect(published.status == 0, "\(published.stderr)")
        #expect(published.stderr.contains("1 duplicate token(s)"), "\(published.stderr)")
        let afterPublish = try await stack.store.readCampaign("p")
        #expect(afterPublish.jobs == jobs && afterPublish.published == jobs && !afterPublish.isPublishing)
        let waiter = Task {
            try await PipelineProcess.command(
                ["campaign", "wait", "p", "--pipeline", file, "--timeout", "240", "--quiet"], environment: environment)
        }
        let first = try PipelineProcess(pipelineFile: file, logFile: log, environment: environment)

        // Sample progress all along: it must never pass the number of jobs.
        let highest = Mutex<Int64>(0)
        let sampler = Task {
            while !Task.isCancelled {
                if let p = try? await stack.store.readCampaign("p") { highest.withLock { $0 = max($0, p.jobsSettled) } }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        try await eventually("the first process settled some", timeout: .seconds(300)) {
            try await stack.store.readCampaign("p").jobsSettled >= 1500
        }
        let second = try PipelineProcess(pipelineFile: file, logFile: log, environment: environment)  // rebalance
        try await eventually("the second process took part", timeout: .seconds(300)) {
            try await stack.store.readCampaign("p").jobsSettled >= 3000
        }
        #expect(await first.stop() == 0)  // rebalance again: its partitions move to the second
        let (status, waitOut, waitErr) = try await waiter.value
        // `campaign wait` said done: every job must be done now.
        let recorded = stack.recorded(campaign: "p")
        #expect(status == 0, "campaign wait: \(waitOut) \(waitErr)")
        #expect(recorded.count == audience.count - invalid.count, "campaign wait returned before every job was done")
        let atWait = try await stack.store.readCampaign("p")
        #expect(atWait.jobsSettled == jobs)
        #expect(await second.stop() == 0)
        sampler.cancel()
        _ = await sampler.value

        let p = try await stack.store.readCampaign("p")
        #expect(highest.withLock { $0 } <= jobs, "progress passed the job count during the run")
        #expect(p.jobs == jobs && p.jobsSettled == jobs)
        #expect(p[.jobsAccepted] == jobs - Int64(invalid.count) && p[.jobsRejected] == Int64(invalid.count))
        #expect(p[.jobsSuppressed] == 0 && p[.jobsDeadLettered] == 0)
        // The message figures count every redelivered message again (how many depends on the rebalances).
        print(
            "two processes: \(jobs) jobs, \(p.messagesSettled) messages settled (deduped \(p.counters[.deduped]), suppressed \(p.counters[.suppressed])), highest progress seen \(highest.withLock { $0 })"
        )
        #expect(p.messagesSettled >= jobs)

        // Scriptable output: stable keys, numbers as numbers.
        let statusJSON = try await PipelineProcess.command(
            ["campaign", "status", "p", "--pipeline", file, "--json"], environment: environment)
        #expect(statusJSON.status == 0, "\(statusJSON.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(statusJSON.stdout.utf8)) as? [String: Any])
        #expect(object["campaign"] as? String == "p" && object["basis"] as? String == "jobs" && object["done"] as? Bool == true)
        #expect((object["target"] as? NSNumber)?.int64Value == jobs && (object["settled"] as? NSNumber)?.int64Value == jobs)
        let jobsObject = try #require(object["jobs"] as? [String: Any])
        #expect((jobsObject["accepted"] as? NSNumber)?.int64Value == jobs - Int64(invalid.count))
        #expect((object["messages"] as? [String: Any])?["deduped"] is NSNumber)
        #expect((object["rejected_by_code"] as? [String: Any])?["8"] is NSNumber)
        let stats = try await PipelineProcess.command(["stats", "--pipeline", file, "--json", "--campaign", "p"], environment: environment)
        #expect(stats.status == 0, "\(stats.stderr)")
        let statsObject = try #require(try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any])
        let totals = try #require(statsObject["totals"] as? [String: Any])
        #expect(Set(totals.keys) == Set(CounterField.allCases.map(\.rawValue)))
        #expect((totals["accepted"] as? NSNumber)?.int64Value == p.counters[.accepted])
        #expect(((statsObject["campaign"] as? [String: Any])?["jobs"] as? [String: Any])?["settled"] is NSNumber)
        #expect((statsObject["per_second"] as? [String: Any])?["current_minute"] is [String: Any])
        // Exit statuses: 2 when the wait times out, 1 when Redis cannot be read.
        let timedOut = try await PipelineProcess.command(
            ["campaign", "wait", "never-published", "--pipeline", file, "--timeout", "0.5", "--quiet"], environment: environment)
        #expect(timedOut.status == 2, "\(timedOut.stderr)")
        let unreachable = try await PipelineProcess.command(["stats", "--redis", "redis://127.0.0.1:1", "--json"])
        #expect(unreachable.status == 1)

        // Secrets: the substituted group is in no log line (the starting line logs the group, masked).
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(!text.contains(groupSecret), "a substituted value reached the log")
        await stack.stop()
    }

    /// Two `run` instances in one consumer group share the partitions and together send each job once.
    @Test func twoInstancesShareTheWork() async throws {
        let stack = try await Stack()
        let audience = (0..<4000).map(token)
        let config = stack.configuration(group: "shared")
        let one = RunningPipeline(config)
        let two = RunningPipeline(config)
        try await stack.publish(campaign: "s", template: template, tokens: audience)
        try await stack.waitAccepted("s", count: 4000)
        try await one.stop()
        try await two.stop()
        let recorded = stack.recorded(campaign: "s")
        #expect(recorded.count == 4000)
        #expect(recorded.values.allSatisfy { $0 == 1 }, "each job recorded once")
        #expect(one.runner.observations.received > 0 && two.runner.observations.received > 0, "both took partitions")
        #expect(try await stack.campaign("s")["accepted"] == 4000)
        await stack.stop()
    }
}

@Suite struct PipelineConfigurationTests {
    func write(_ yaml: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Paths in the shipped files are relative to the repository's top; point them at the certificates.
    func loadShipped(_ name: String) throws -> PipelineConfiguration {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let text = try String(contentsOfFile: root + "/Pipelines/\(name)", encoding: .utf8)
            .replacingOccurrences(of: ".run/certs", with: TestCertificates.directory)
        return try PipelineConfiguration.load(file: try write(text))
    }

    @Test func theShippedFilesLoad() throws {
        let c = try loadShipped("default.yaml")
        #expect(c.apps.map(\.bundleID) == ["com.example.shop", "com.example.news"])
        #expect(c.apps.map(\.transport) == [.http2, .http2])
        #expect(
            c.apps[0].authentication
                == .token(
                    keyFile: "\(TestCertificates.directory)/AuthKey_TESTKEY123.p8", keyID: "TESTKEY123", teamID: "TESTTEAM01"))
        guard case .certificate = c.apps[1].authentication else {
            Issue.record("com.example.news uses certificate auth")
            return
        }
        #expect(c.http2.hosts == [GatewayAddress(host: "127.0.0.1", port: 2197)])
        #expect(c.apps[1].shards == 2)
        #expect(c.maxInFlight == 100_000)
        #expect(c.kafka.sessionTimeoutMs == 6000)
        // HTTP/2 apps are held to Apple's limits; the decoder lets the largest (voip) through.
        #expect(c.payloadLimit(app: c.apps[0], pushType: nil) == 4096)
        #expect(c.payloadLimit(app: c.apps[0], pushType: .voip) == 5120)
        #expect(c.largestPayloadLimit == 5120)
        let h = try #require(try c.transportConfiguration(for: c.apps[1], as: HTTP2TransportConfiguration.self))
        #expect(h.connections == 2 && h.hosts == [GatewayAddress(host: "127.0.0.1", port: 2197)] && h.serverHostname == "localhost")

        let b = try loadShipped("binary.yaml")
        #expect(b.apps.map(\.transport) == [.binary, .binary])
        #expect(b.gateway.shard.settleAfter == .milliseconds(250))
        #expect(b.gateway.shard.maxUnsettledBytes == nil && b.gateway.shard.unsettledByteLimit == 4 << 20)
        #expect(b.gateway.shard.settleGrace == .seconds(2))
        #expect(b.apps[1].shards == 2)
        #expect(b.gateway.addresses == [GatewayAddress(host: "127.0.0.1", port: 2195)])
        #expect(b.payloadLimit(app: b.apps[0], pushType: nil) == 2048)
        #expect(try b.transportConfiguration(for: b.apps[0], as: HTTP2TransportConfiguration.self) == nil)
        let shards = try #require(try b.transportConfiguration(for: b.apps[1], as: BinaryTransportConfiguration.self))
        #expect(shards.shards == 2 && shards.gateways == [GatewayAddress(host: "127.0.0.1", port: 2195)])
    }

    /// Without `http2.hosts`, an app's environment picks Apple's hosts.
    @Test func environmentPicksApplesHosts() throws {
        let key = "\(TestCertificates.directory)/AuthKey_TESTKEY123.p8"
        let token = "    token:\n      key: \(key)\n      key_id: K\n      team_id: T\n"
        let path = try write(
            "apps:\n  - bundle_id: a\n" + token + "  - bundle_id: b\n    environment: sandbox\n" + token)
        let c = try PipelineConfiguration.load(file: path)
        #expect(
            try c.transportConfiguration(for: c.apps[0], as: HTTP2TransportConfiguration.self)?.hosts == [
                GatewayAddress(host: "api.push.apple.com", port: 443)
            ])
        #expect(
            try c.transportConfiguration(for: c.apps[1], as: HTTP2TransportConfiguration.self)?.hosts == [
                GatewayAddress(host: "api.sandbox.push.apple.com", port: 443)
            ])
    }

    /// A file that sets nothing gets the defaults of the components themselves: each default has one home.
    @Test func defaultsComeFromTheirHome() throws {
        let apps =
            "apps:\n  - bundle_id: x\n    certificate: \(TestCertificates.directory)/\(shop).pem\n    key: \(TestCertificates.directory)/\(shop).key\n"
        let c = try PipelineConfiguration.load(file: try write(apps))
        let store = PipelineStoreConfiguration()
        #expect(c.redis.prefix == RedisKeys.defaultPrefix && store.keyPrefix == RedisKeys.defaultPrefix)
        #expect(c.redis.url == RedisConfiguration.defaultURL)
        #expect(Duration.seconds(c.redis.dedupTTLHours * 3600) == store.dedupRetention)
        #expect(Duration.seconds(c.redis.dedupBucketHours * 3600) == store.dedupBucketWidth)
        #expect(c.redis.dedupSubBuckets == store.dedupSubBuckets)
        #expect(Duration.seconds(c.redis.inFlightLeaseSeconds) == store.inFlightLease)
        #expect(c.gateway.payloadLimit == PayloadLimits.default.command2)
        #expect(Duration.seconds(c.feedbackIntervalMinutes * 60) == FeedbackSchedule.defaultInterval)
        let shard = ShardConfiguration()
        #expect(c.gateway.shard.linger == shard.linger && c.gateway.shard.settleAfter == shard.settleAfter)
        #expect(c.gateway.shard.maxUnsettledBytes == nil && c.gateway.shard.settleGrace == shard.settleGrace)
        #expect(c.gateway.shard.reconnect.initialDelay == shard.reconnect.initialDelay)
        #expect(c.gateway.shard.reconnect.maximumDelay == shard.reconnect.maximumDelay)
    }

    @Test func errorsNameFileKeyAndExpectation() throws {
        let cert = "\(TestCertificates.directory)/\(shop).pem"
        let key = "\(TestCertificates.directory)/\(shop).key"
        let apps = "apps:\n  - bundle_id: x\n    certificate: \(cert)\n    key: \(key)\n"
        let cases: [(String, String, String)] = [
            ("gateway:\n  shards: many\n" + apps, "gateway.shards", "expected a whole number"),
            ("gateway:\n  shardz: 4\n" + apps, "gateway.shardz", "unknown key"),
            ("kafka: [1, 2]\n" + apps, "kafka", "expected a mapping"),
            ("kafka:\n  dead_letter_max_bytes: 999\n" + apps, "kafka.dead_letter_max_bytes", "expected a whole number in 1000…1000000000"),
            ("redis:\n  url: redis://x\n", "apps", "expected a list of apps"),
            ("apps:\n  - bundle_id: x\n    certificate: /nonexistent.pem\n    key: \(key)\n", "apps[0].certificate", "no such file"),
            ("gateway:\n  addresses: [nohost]\n" + apps, "gateway.addresses", "expected host:port"),
            ("apps:\n  - certificate: \(cert)\n    key: \(key)\n", "apps[0].bundle_id", "missing"),
            // Every numeric key has a range, reported like the whole numbers' ranges.
            ("gateway:\n  linger_ms: 2000\n" + apps, "gateway.linger_ms", "expected a number in 0…1000, found \"2000\""),
            ("gateway:\n  linger_ms: -1\n" + apps, "gateway.linger_ms", "expected a number in 0…1000, found \"-1\""),
            ("gateway:\n  settle_after_ms: 0\n" + apps, "gateway.settle_after_ms", "expected a number in 1…3600000, found \"0\""),
            // The unsettled window fits in the replay buffer; the grace window is a duration.
            ("gateway:\n  max_unsettled_kb: 8\n" + apps, "gateway.max_unsettled_kb", "expected a whole number in 16…16384, found \"8\""),
            (
                "gateway:\n  replay_max_mb: 1\n  max_unsettled_kb: 2048\n" + apps, "gateway.max_unsettled_kb",
                "expected a whole number in 16…1024, found \"2048\""
            ),
            ("gateway:\n  settle_grace_ms: -5\n" + apps, "gateway.settle_grace_ms", "expected a number in 0…3600000, found \"-5\""),
            ("gateway:\n  drain_timeout_s: soon\n" + apps, "gateway.drain_timeout_s", "expected a number in 0…3600, found \"soon\""),
            ("gateway:\n  connect_timeout_s: 0\n" + apps, "gateway.connect_timeout_s", "expected a number in 0.1…600, found \"0\""),
            (
                "gateway:\n  reconnect:\n    initial_ms: 0\n" + apps, "gateway.reconnect.initial_ms",
                "expected a number in 1…60000, found \"0\""
            ),
            (
                "gateway:\n  reconnect:\n    max_ms: 10\n" + apps, "gateway.reconnect.max_ms",
                "expected a number ≥ gateway.reconnect.initial_ms (50), found \"10\""
            ),
            (
                "gateway:\n  reconnect:\n    attempts_per_second_per_gateway: 0\n" + apps,
                "gateway.reconnect.attempts_per_second_per_gateway",
                "expected a number in 0.1…10000, found \"0\""
            ),
            ("feedback:\n  interval_minutes: 2000\n" + apps, "feedback.interval_minutes", "expected a number in 0…1440, found \"2000\""),
            ("redis:\n  dedup_sub_buckets: 0\n" + apps, "redis.dedup_sub_buckets", "expected a whole number in 1…16777216, found \"0\""),
            (
                "apps:\n  - bundle_id: x\n    transport: carrier-pigeon\n    certificate: \(cert)\n    key: \(key)\n",
                "apps[0].transport", "expected http2 or binary"
            ),
            (
                "apps:\n  - bundle_id: x\n    environment: staging\n    certificate: \(cert)\n    key: \(key)\n",
                "apps[0].environment", "expected production or sandbox"
            ),
            (
                "apps:\n  - bundle_id: x\n    token:\n      key: /nonexistent.p8\n      key_id: K\n      team_id: T\n",
                "apps[0].token.key", "no such file"
            ),
            ("apps:\n  - bundle_id: x\n    token:\n      key: \(key)\n      team_id: T\n", "apps[0].token.key_id", "missing"),
            (
                "apps:\n  - bundle_id: x\n    transport: binary\n    token:\n      key: \(key)\n      key_id: K\n      team_id: T\n",
                "apps[0].token", "token authentication is for transport: http2"
            ),
            (
                "apps:\n  - bundle_id: x\n    shards: 3\n    certificate: \(cert)\n    key: \(key)\n", "apps[0].shards",
                "counts its connections in `connections`"
            ),
            ("http2:\n  hosts: [nohost]\n" + apps, "http2.hosts", "expected host:port"),
            ("http2:\n  stream_cap: 0\n" + apps, "http2.stream_cap", "expected a whole number"),
            // Retries are bounded by time now: the old counts are refused with what replaced them.
            ("http2:\n  max_attempts: 3\n" + apps, "http2.max_attempts", "http2.give_up_after_s"),
            ("gateway:\n  max_attempts: 3\n" + apps, "gateway.max_attempts", "gateway.give_up_after_s"),
            ("http2:\n  give_up_after_s: 0\n" + apps, "http2.give_up_after_s", "expected a number in 1…604800"),
        ]
        for (yaml, key, problem) in cases {
            let path = try write(yaml)
            do {
                _ = try PipelineConfiguration.load(file: path)
                Issue.record("\(key): no error")
            } catch let e as ConfigurationError {
                #expect(e.file == path)
                #expect(e.key == key, "\(e)")
                #expect(e.problem.contains(problem), "\(e)")
            }
        }
    }
}

/// The simulator's payload hash: FNV-1a 64 in 16 hex digits.
func fnv1a64(_ bytes: [UInt8]) -> String {
    var h: UInt64 = 0xcbf2_9ce4_8422_2325
    for b in bytes {
        h ^= UInt64(b)
        h &*= 0x0000_0100_0000_01B3
    }
    let s = String(h, radix: 16)
    return String(repeating: "0", count: 16 - s.count) + s
}
