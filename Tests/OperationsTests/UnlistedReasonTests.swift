import APNsProtocol
import Foundation
import HTTP2Simulator
import Kafka
import Logging
import Operations
import Pipeline
import Redis
import Sender
import ServiceLifecycle
import TestSupport
import Testing

/// Reads `topic` from its start (group `group`) until `done` says enough; a bound of the test's own keeps
/// a broken pipeline from hanging it.
func readTopic(
    _ cluster: MockCluster, _ topic: String, group: String, until done: @escaping ([KafkaConsumerMessage]) -> Bool
) async throws -> [KafkaConsumerMessage] {
    let consumer = try KafkaConsumer.started(
        configuration: KafkaConsumerConfiguration(
            bootstrapServers: cluster.bootstrapServers, groupID: group, topics: [topic], sessionTimeout: .seconds(6)),
        logger: testLogger)
    var all: [KafkaConsumerMessage] = []
    do {
        try await eventually("\(topic) read (\(all.count) so far)", timeout: .seconds(300)) {
            if let batch = await consumer.nextBatch() { all.append(contentsOf: batch) }
            return done(all)
        }
    } catch {
        await consumer.close()
        throw error
    }
    await consumer.close()
    return all
}

/// A gateway's reason text is the gateway's choice: one Apple does not document is counted `other` in
/// Redis (`rejected:other`) and Prometheus (`code="other"`), never by its text, and the text itself,
/// bounded, goes to the dead letter (`gateway-reason`) and the outcome message (`code`). Against the
/// HTTP/2 simulator answering 400 with such reasons, over TLS, through `run`'s runner, Kafka and Redis.
@Suite(.serialized, .enabled(if: RedisServer.available, RedisServer.skipReason))
struct UnlistedReasonTests {
    static let outcomes = "apns.outcomes"

    @Test func unlistedReasonsAreCountedAsOtherAndKeptBoundedInTheLetters() async throws {
        let long = "NotInApplesList-" + String(repeating: "é", count: 1500)  // ~3 KB: within the client's 4 KiB body
        var faults = HTTP2FaultScript()
        faults.unlistedReasonTokens = [token(1).hex: long, token(2).hex: "TeapotRefusal"]
        faults.invalidTokens = [token(3).hex]
        let simulator = try await HTTP2Simulator.startedForTests(faults: faults)
        let cluster = try MockCluster(
            brokers: 1,
            topics: [
                .init(name: "apns.jobs", partitions: 2), .init(name: "apns.jobs.dlq", partitions: 1),
                .init(name: Self.outcomes, partitions: 1),
            ], logger: testLogger)
        defer { cluster.stop() }
        let redis = try await RedisServer()
        defer { redis.stop() }
        var c = pipelineConfiguration(kafka: cluster, redis: redis, batchSize: 50)
        c.apps = http2Apps()
        c.sendHTTP2(to: simulator)
        c.kafka.outcomesTopic = Self.outcomes
        let served = try await ServedPipeline(c)

        let producer = try KafkaProducer.started(
            configuration: KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers), logger: testLogger)
        try await producer.sendBatch(
            (1...4).map { i in
                KafkaProducerMessage(
                    topic: "apns.jobs", key: Array(token(i).hex.utf8),
                    value: Array(
                        #"{"id":"u-\#(i)","app":"com.example.shop","token":"\#(token(i).hex)","payload":{"aps":{"alert":"x"}}}"#.utf8))
            })
        let client = try redis.client()
        let store = PipelineStore(client: client, logger: testLogger)
        try await eventually("every job settled", timeout: .seconds(300)) {
            let t = try await store.readStats().totals
            return t[.accepted] == 1 && t[.rejected] == 1 && t[.deadLettered] == 2
        }

        // Redis: the two unlisted reasons under `other`, Apple's by name; no field holds a gateway's text.
        let fields = try await store.readStats().totals.fields
        #expect(fields["rejected:other"] == 2, "\(fields)")
        #expect(fields["rejected:BadDeviceToken"] == 1)
        #expect(!fields.keys.contains { $0.contains("NotInApplesList") || $0.contains("Teapot") }, "\(fields.keys.sorted())")
        // Prometheus: the same, one series for both.
        let text = try await get(served.base + "/metrics").body
        #expect(sample(text, #"apns_gateway_refusals_total{app="com.example.shop",transport="http2",code="other"}"#) == 2)
        #expect(sample(text, #"apns_gateway_refusals_total{app="com.example.shop",transport="http2",code="BadDeviceToken"}"#) == 1)
        #expect(!text.contains("NotInApplesList") && !text.contains("Teapot"))

        // The dead letters keep the text, bounded: `gateway-reason` at most 256 bytes, cut with `…`.
        let letters = try await readTopic(cluster, "apns.jobs.dlq", group: "dlq-reader") { $0.count >= 2 }
        func reason(of id: String) throws -> String? {
            let letter = try #require(letters.first { (try? JSONParser.parse($0.value)["id"]?.stringValue) == id })
            return letter.headers.first(named: "gateway-reason")?.stringValue
        }
        let longReason = try #require(try reason(of: "u-1"))
        #expect(longReason.utf8.count <= RefusalCode.maxTextBytes && longReason.hasPrefix("NotInApplesList-é") && longReason.hasSuffix("…"))
        #expect(try reason(of: "u-2") == "TeapotRefusal")
        #expect(letters.allSatisfy { $0.headers.first(named: "reason")?.stringValue == "gateway-bad-request" })

        // The outcome messages too.
        let messages = try await readTopic(cluster, Self.outcomes, group: "outcomes-reader") { $0.count >= 4 }
        func code(of id: String) throws -> String? {
            let m = try #require(messages.first { (try? JSONParser.parse($0.value)["id"]?.stringValue) == id })
            return try JSONParser.parse(m.value)["code"]?.stringValue
        }
        #expect(try code(of: "u-1") == longReason)
        #expect(try code(of: "u-2") == "TeapotRefusal")
        #expect(try code(of: "u-3") == "BadDeviceToken")

        try await served.stop()
        await client.close()
        await producer.close()
        try? await simulator.stop()
    }

    /// What is counted by name: Apple's reasons (provider API and broadcasts), the statuses Apple documents,
    /// Table 5-1's binary statuses, and the pipeline's own codes; anything else is `other`.
    @Test func theCountedCodes() {
        for code in ["Unregistered", "BadDeviceToken", "TooManyRequests", "ChannelNotRegistered", "410", "503", "8", "10", "255"] {
            #expect(RefusalCode.label(code) == code, "\(code)")
        }
        for code in [RetryBudget.gaveUpReason, RetryBudget.expiredReason] { #expect(RefusalCode.label(code) == code) }
        for code in ["9", "502", "unregistered", "Unregistered ", "", String(repeating: "A", count: 4000)] {
            #expect(RefusalCode.label(code) == RefusalCode.other, "\(code)")
        }
        #expect(RefusalCode.bounded("short") == "short")
        let cut = RefusalCode.bounded(String(repeating: "€", count: 200))
        #expect(cut.utf8.count <= RefusalCode.maxTextBytes && cut.hasSuffix("…") && cut.dropLast().allSatisfy { $0 == "€" })
    }
}
