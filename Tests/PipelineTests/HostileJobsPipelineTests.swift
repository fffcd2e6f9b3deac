import APNsProtocol
import Foundation
import Kafka
import Pipeline
import Redis
import TestSupport
import Testing

/// Issue 28 (1): against real servers (librdkafka's mock cluster, redis-server, the TLS simulator), a
/// batch mixing jobs with a 400 kB `app`, thousands of unknown apps and valid jobs: every bad job is
/// dead-lettered once with its reason by the decoder, no Redis key names an unknown app, and every
/// valid job is delivered.
@Suite struct HostileJobsPipelineTests {
    @Test func hostileAppsAreDeadLetteredBeforeRedis() async throws {
        let stack = try await Stack()
        let pipeline = RunningPipeline(stack.configuration())
        let valid = (0..<500).map(token)
        let bigApp = String(repeating: "a", count: 400_000)
        let hex = token(9000).hex
        func job(_ id: String, app: String) -> String {
            #"{"id":"\#(id)","app":"\#(app)","token":"\#(hex)","payload":{"aps":{"alert":"x"}}}"#
        }
        // Spread over the partitions, and few enough for the one-partition DLQ: librdkafka's mock keeps
        // ~5 MiB per partition and drops older messages silently.
        let bigJobs = 8
        try await stack.producer.sendBatch(
            (0..<bigJobs).map {
                KafkaProducerMessage(
                    topic: "apns.jobs", partition: Int32($0 % 8), key: nil, value: Array(job("big-\($0)", app: bigApp).utf8))
            })
        try await stack.publish(campaign: "v", template: template, tokens: valid)
        try await stack.publishRaw((0..<2000).map { job("unknown-\($0)", app: "com.hostile.app\($0)") })
        // A campaign published for an app the file does not name: its refusals still count in its progress.
        let misnamed = (0..<10).map {
            #"{"id":"h:\#($0)","app":"com.hostile.campaign","token":"\#(token($0).hex)","campaign":"h","payload":{"aps":{"alert":"x"}}}"#
        }
        try await stack.publishRaw(misnamed)
        // A registration for an unknown app, and one dated far ahead: refused, no keys.
        try await stack.publishRaw(
            [
                #"{"app":"com.hostile.reg","token":"\#(hex)","registered_at":1}"#,
                #"{"app":"\#(shop)","token":"\#(hex)","registered_at":4000000000}"#,
            ], topic: "apns.registrations")

        try await stack.waitAccepted("v", count: 500)
        var counted: Int64 = 0
        do {
            try await eventually("\(bigJobs + 2010) dead letters counted") {
                counted = try await stack.store.readStats().totals[.deadLettered]
                return counted == Int64(bigJobs + 2010)
            }
        } catch {
            Issue.record("dead letters counted: \(counted), failures \(try await stack.store.readStats().totals[.deadLetterFailures])")
            throw error
        }
        #expect(stack.recorded(campaign: "v").count == 500)

        // Every bad job once in the DLQ, with its reason.
        let dlq = try KafkaConsumer.started(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: stack.cluster.bootstrapServers, groupID: "dlq-reader", topics: ["apns.jobs.dlq"],
                sessionTimeout: .seconds(6)), logger: testLogger)
        var letters: [String: [String]] = [:]
        var registrationLetters: [String] = []
        try await eventually("\(bigJobs + 2012) dead letters read") {
            if let batch = await dlq.nextBatch() {
                for m in batch {
                    let reason = m.headers.first(named: "reason")?.stringValue ?? "?"
                    if m.headers.first(named: "source-topic")?.stringValue == "apns.registrations" {
                        registrationLetters.append(reason)
                        continue
                    }
                    let id = String(String(decoding: m.value.prefix(64), as: UTF8.self).split(separator: "\"")[3])
                    letters[id, default: []].append(reason)
                }
            }
            return letters.count + registrationLetters.count >= bigJobs + 2012
        }
        await dlq.close()
        #expect(letters.count == bigJobs + 2010 && letters.values.allSatisfy { $0.count == 1 }, "each once")
        #expect((0..<bigJobs).allSatisfy { letters["big-\($0)"] == ["invalid-app"] })
        #expect((0..<2000).allSatisfy { letters["unknown-\($0)"] == ["no-certificate-for-app"] })
        #expect((0..<10).allSatisfy { letters["h:\($0)"] == ["no-certificate-for-app"] })
        let h = try await stack.campaign("h")
        #expect(h["dead_lettered"] == 10 && h["jobs_dead_lettered"] == 10 && h["jobs_settled"] == 10, "\(h)")
        #expect(registrationLetters.sorted() == ["invalid-registered-at", "no-certificate-for-app"])

        // No key names an unknown app (nor the big one); the valid app's keys are there.
        let keys = try await stack.store.client.send(RedisCommand("KEYS", "*")).array?.compactMap(\.string) ?? []
        #expect(keys.contains { $0.contains(shop) })
        #expect(!keys.contains { $0.contains("hostile") || $0.contains("aaaaaaaa") }, "\(keys.filter { $0.contains("hostile") }.prefix(3))")
        #expect(keys.allSatisfy { $0.utf8.count < 200 })

        try await pipeline.stop()
        await stack.stop()
    }
}
