import Foundation
import Jobs
import Kafka
import Logging
import Redis

/// Applies registration events from their own topic: a registration newer than a suppression lifts
/// it (the gate compares the times), and the token's language picks its localized alert.
struct RegistrationsStage {
    let bootstrap: String
    let configuration: PipelineConfiguration
    let topic: String
    let store: PipelineStore
    let deadLetter: DeadLetter
    let logger: Logger

    func run() async throws {
        // Registrations for other apps are refused (they would be keys no job reads, and per-app state).
        let apps = KnownApps(configuration.apps.map(\.bundleID))
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                bootstrapServers: bootstrap, groupID: configuration.kafka.group + ".registrations", topics: [topic],
                properties: configuration.kafka.properties, sessionTimeout: .milliseconds(configuration.kafka.sessionTimeoutMs),
                maxBatchSize: configuration.kafka.batchSize),
            logger: logger)
        // The consumer polls while its `run()` runs, a child task beside the loop: until the `close()`
        // below, or until this stage is cancelled (the process stops) or fails — its cancellation closes
        // the consumer then, committing what was settled; a batch applied and not yet settled is applied
        // again by the next owner, which changes nothing (a registration's time and language are
        // written as they are).
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await consumer.run() }
            do {
                try await apply(from: consumer, apps: apps)
            } catch {
                await consumer.close()
                throw error
            }
            await consumer.close()
            try await group.waitForAll()
        }
    }

    private func apply(from consumer: KafkaConsumer, apps: KnownApps) async throws {
        // Cancelled at shutdown: nextBatch returns nil, then the consumer commits what was applied.
        while !Task.isCancelled {
            guard let batch = await consumer.nextBatch() else { break }
            if batch.isEmpty { continue }
            var registrations: [Registration] = []
            var refused: [(message: KafkaConsumerMessage, reason: String)] = []
            let now = UInt32(clamping: Int64(Date().timeIntervalSince1970))
            for m in batch {
                do {
                    let r = try RegistrationDecoder.decode(m.value, now: now, apps: apps)
                    registrations.append(
                        Registration(
                            app: r.app, tokenHex: r.token.hex, registeredAt: Int64(r.registeredAt), language: r.language, user: r.user,
                            timeZone: r.timeZone))
                } catch {
                    refused.append((m, error.reason.rawValue))
                }
            }
            if !refused.isEmpty { try await deadLetter.send(refused) }
            try await store.applyRegistrations(registrations)
            _ = consumer.settle(batch.map(\.ref))
        }
    }
}
