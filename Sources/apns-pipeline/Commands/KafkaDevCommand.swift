import ArgumentParser
import Dispatch
import Foundation
import Kafka
import Logging
import Pipeline

/// `apns-pipeline kafka-dev`: librdkafka's mock Kafka cluster on loopback TCP, for development, tests
/// and the demo (`ops/test`, `ops/demo`). Real Kafka protocol, no broker to install.
struct KafkaDevCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kafka-dev",
        abstract: "Run a mock Kafka cluster on loopback until SIGTERM/SIGINT; print its bootstrap servers."
    )

    @Option(help: "Number of brokers.")
    var brokers: Int = 3

    @Option(
        name: .customLong("topic"),
        help: "A topic to create, NAME:PARTITIONS (repeatable). Default: apns.jobs:8, apns.jobs.dlq:1, apns.registrations:2.")
    var topics: [String] = []

    @Option(help: "Write the bootstrap servers to this file (atomically) once the cluster is ready.")
    var bootstrapFile: String?

    /// The pipeline's default topics (`PipelineConfiguration.Kafka`), so `kafka-dev` with no `--topic`
    /// serves what `run` with no `kafka.*_topic` keys reads.
    static let defaultTopics: [String] = {
        let kafka = PipelineConfiguration().kafka
        return ["\(kafka.jobsTopic):8", "\(kafka.deadLetterTopic):1"] + (kafka.registrationsTopic.map { ["\($0):2"] } ?? [])
    }()

    func validate() throws {
        guard brokers > 0 else { throw ValidationError("--brokers must be at least 1") }
        _ = try parsedTopics()
    }

    func parsedTopics() throws -> [MockCluster.Topic] {
        try (topics.isEmpty ? Self.defaultTopics : topics).map { spec in
            guard let colon = spec.lastIndex(of: ":"), let partitions = Int32(spec[spec.index(after: colon)...]),
                partitions > 0, colon != spec.startIndex
            else { throw ValidationError("--topic \(spec): expected NAME:PARTITIONS") }
            return MockCluster.Topic(name: String(spec[..<colon]), partitions: partitions)
        }
    }

    func run() async throws {
        // Logs on stderr: stdout carries only the bootstrap servers, for scripts.
        var logger = Logger(label: "kafka-dev", factory: { label in StreamLogHandler.standardError(label: label) })
        logger.logLevel = .info
        let topics = try parsedTopics()

        // Signals are handled before anything starts, so a TERM right after start-up still stops cleanly.
        let stop = SignalWaiter(signals: [SIGINT, SIGTERM])

        let cluster = try MockCluster(brokers: brokers, topics: topics, logger: logger)
        logger.info(
            "kafka-dev ready",
            metadata: ["topics": "\(topics.map { "\($0.name):\($0.partitions)" }.joined(separator: ","))"])
        // One write(2) to fd 1, unbuffered: a script reading our stdout through a pipe sees it at once.
        FileHandle.standardOutput.write(Data((cluster.bootstrapServers + "\n").utf8))
        if let bootstrapFile {
            // Atomic (temporary file + rename): a script polling for the file never reads half of it.
            try Data((cluster.bootstrapServers + "\n").utf8).write(to: URL(fileURLWithPath: bootstrapFile), options: .atomic)
        }

        let signal = await stop.wait()
        logger.info("kafka-dev stopping", metadata: ["signal": "\(signal)"])
        cluster.stop()
    }
}
