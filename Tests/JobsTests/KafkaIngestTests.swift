import APNsProtocol
import Jobs
import Kafka
import Pipeline
import Testing

/// Jobs through the mock Kafka cluster over TCP: valid ones decode, malformed ones go to the
/// dead-letter topic unchanged with the right reason, and consumption goes on past them.
@Suite struct KafkaIngestTests {
    @Test func malformedJobsAreDeadLetteredAndConsumptionGoesOn() async throws {
        let cluster = try MockCluster(
            brokers: 3, topics: [.init(name: "jobs", partitions: 4), .init(name: "jobs.dlq", partitions: 1)],
            logger: Support.logger)
        defer { cluster.stop() }
        let producer = try Support.producer(cluster)
        let now = Fixtures.now

        // Malformed jobs, each with the reason it must be dead-lettered with.
        let silent = #"{"aps":{"content-available":1}}"#
        let oversized = #"{"aps":{"alert":""# + String(repeating: "x", count: 2100) + #""}}"#
        let malformed: [(value: [UInt8], reason: String)] = [
            (Fixtures.json(#"{"id":"bad-json","app":"x","#), "invalid-json"),
            (Fixtures.job(["id": #""bad-token""#, "token": #""not-hex""#]), "invalid-token"),
            (Fixtures.job(["id": #""oversized""#, "payload": oversized]), "payload-too-large"),
            (Fixtures.job(["id": #""silent-at-10""#, "payload": silent, "priority": "10"]), "priority-10-content-available-only"),
            (Fixtures.job(["id": #""no-aps""#, "payload": #"{"alert":"hi"}"#]), "invalid-payload"),
            (Fixtures.job(["id": #""expired""#, "expiry": "\(now - 60)"]), "expired"),
            (Fixtures.json(#"["not","an","object"]"#), "not-an-object"),
            (Fixtures.job(["id": nil]), "missing-id"),
            ([0xFF, 0xFE, 0x00], "invalid-json"),
        ]
        let validCount = 60
        var messages: [KafkaProducerMessage] = []
        var expectedIDs: Set<String> = []
        var reasonOfValue: [[UInt8]: String] = [:]
        for i in 0..<validCount {
            let id = "job-\(i)"
            expectedIDs.insert(id)
            let token = String(repeating: format2(i), count: 32)
            let value = Fixtures.job([
                "id": Fixtures.quoted(id), "token": Fixtures.quoted(token), "alerts": #"{"fr":"Soldes"}"#,
                "expiry": "0", "campaign": #""c""#,
            ])
            messages.append(.init(topic: "jobs", key: Array(token.utf8), value: value))
            // Interleave the malformed ones with the valid ones.
            if i % 6 == 5, i / 6 < malformed.count {
                let bad = malformed[i / 6]
                reasonOfValue[bad.value] = bad.reason
                messages.append(
                    .init(
                        topic: "jobs", key: Array("bad-\(i)".utf8), value: bad.value,
                        headers: [KafkaHeader(key: "trace-id", string: "t-\(i)")]))
            }
        }
        #expect(reasonOfValue.count == malformed.count, "every malformed job is produced (and distinct)")
        try await producer.sendBatch(messages)

        // Ingest: decode each batch, dead-letter the failures in one batch, settle everything.
        let deadLetter = DeadLetter(producer: producer, topic: "jobs.dlq")
        let consumer = try KafkaConsumer.started(
            configuration: Support.consumerConfig(cluster, group: "ingest", topics: ["jobs"], maxBatchSize: 50, maxBuffered: 1000),
            logger: Support.logger)
        let decoder = JobDecoder()
        var decodedIDs: [String] = []
        var refused: [(ref: MessageRef, reason: String)] = []
        var seen = 0
        while seen < messages.count {
            let batch = try #require(await Support.nextBatch(consumer), "only \(seen) of \(messages.count) consumed")
            seen += batch.count
            var failures: [(message: KafkaConsumerMessage, reason: String)] = []
            for message in batch {
                do {
                    let job = try decoder.decode(message.value, now: now)
                    decodedIDs.append(job.id)
                    #expect(job.token.hex == Fixtures.string(message.key ?? []), "key = token hex")
                } catch {
                    failures.append((message, error.reason.rawValue))
                    refused.append((message.ref, error.reason.rawValue))
                }
            }
            if !failures.isEmpty { try await deadLetter.send(failures) }
            #expect(consumer.settle(batch.map(\.ref)) == batch.count)
        }
        #expect(seen == messages.count)
        #expect(decodedIDs.count == validCount)
        #expect(Set(decodedIDs) == expectedIDs, "every valid job decoded, past the malformed ones")
        #expect(refused.count == malformed.count)
        try await consumer.commit()
        #expect(consumer.commitPositions.values.reduce(0, +) == Int64(messages.count), "everything settled and committed")
        await consumer.close()

        // The dead-letter topic: each malformed job, unchanged, with its reason and source.
        let dlqConsumer = try KafkaConsumer.started(
            configuration: Support.consumerConfig(cluster, group: "dlq-reader", topics: ["jobs.dlq"], maxBatchSize: 50, maxBuffered: 1000),
            logger: Support.logger)
        var letters: [KafkaConsumerMessage] = []
        while letters.count < malformed.count {
            let batch = try #require(await Support.nextBatch(dlqConsumer), "only \(letters.count) dead letters")
            letters += batch
            dlqConsumer.settle(batch.map(\.ref))
        }
        await dlqConsumer.close()
        #expect(letters.count == malformed.count)
        let refusedAt = Dictionary(uniqueKeysWithValues: refused.map { ($0.ref, $0.reason) })
        for letter in letters {
            let info = try #require(DeadLetter.info(of: letter), "dead-letter headers present")
            let expected = try #require(reasonOfValue[letter.value], "value unchanged: \(Fixtures.string(letter.value))")
            #expect(info.reason == expected, "reason of \(Fixtures.string(letter.value).prefix(60))")
            #expect(info.source.topic == "jobs")
            #expect(refusedAt[info.source] == expected, "source partition/offset point at the refused message")
            #expect(Fixtures.string(letter.key ?? []).hasPrefix("bad-"), "key unchanged")
            let trace = letter.headers.first(named: "trace-id")?.stringValue
            #expect(trace == "t-" + Fixtures.string(letter.key ?? []).dropFirst(4), "original headers kept")
        }
        #expect(Set(letters.map { DeadLetter.info(of: $0)?.reason ?? "" }) == Set(malformed.map(\.reason)))
        await producer.close()
    }

    /// Two hex digits for a test token (`i` < 256).
    private func format2(_ i: Int) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[(i >> 4) & 0xF], digits[i & 0xF]])
    }
}
