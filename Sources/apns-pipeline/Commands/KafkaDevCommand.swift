import ArgumentParser
import Dispatch
import Foundation
import Kafka
import Logging
import Pipeline
import Synchronization

/// `apns-pipeline kafka-dev`: librdkafka's mock Kafka cluster on loopback TCP, for development, tests
/// and the demo (`ops/test`, `ops/demo`). Real Kafka protocol, no broker to install.
struct KafkaDevCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kafka-dev",
        abstract: "Run a mock Kafka cluster on loopback until SIGTERM/SIGINT; print its bootstrap servers.",
        discussion: """
            Broker faults from outside (ops/soak): SIGUSR1 takes broker --signal-broker down (its \
            connections closed, new ones refused; the partitions it leads and the --group coordinators it \
            holds move to the next broker up, as a cluster with replicas fails over), SIGUSR2 brings it up \
            again (leading nothing until another broker fails over to it, as a restarted broker rejoins \
            as a follower). The mock keeps every partition's data outside its brokers, so \
            nothing is lost. SIGHUP makes every --fault-topic refuse all requests \
            (TOPIC_AUTHORIZATION_FAILED) and the next SIGHUP heals them: a failing dead-letter topic.
            """
    )

    @Option(help: "Number of brokers.")
    var brokers: Int = 3

    @Option(
        name: .customLong("topic"),
        help: "A topic to create, NAME:PARTITIONS (repeatable). Default: apns.jobs:8, apns.jobs.dlq:1, apns.registrations:2.")
    var topics: [String] = []

    @Option(help: "Write the bootstrap servers to this file (atomically) once the cluster is ready.")
    var bootstrapFile: String?

    @Option(help: "The broker (1…brokers) that SIGUSR1 takes down and SIGUSR2 brings up again.")
    var signalBroker: Int32 = 1

    @Option(
        name: .customLong("group"),
        help: "A consumer group whose coordinator fails over with its broker (repeatable); the first is on broker 1, the next on 2, …")
    var groups: [String] = []

    /// Topics that SIGHUP turns into ones refusing every request, and the next SIGHUP back (ops/soak's
    /// scenario k: dead letters waiting on a failing dead-letter topic).
    @Option(
        name: .customLong("fault-topic"), help: "A topic that SIGHUP makes refuse every request and the next SIGHUP heals (repeatable).")
    var faultTopics: [String] = []

    /// The pipeline's default topics (`PipelineConfiguration.Kafka`), so `kafka-dev` with no `--topic`
    /// serves what `run` with no `kafka.*_topic` keys reads.
    static let defaultTopics: [String] = {
        let kafka = PipelineConfiguration().kafka
        return ["\(kafka.jobsTopic):8", "\(kafka.deadLetterTopic):1"] + (kafka.registrationsTopic.map { ["\($0):2"] } ?? [])
    }()

    func validate() throws {
        guard brokers > 0 else { throw ValidationError("--brokers must be at least 1") }
        guard (1...Int32(brokers)).contains(signalBroker) else {
            throw ValidationError("--signal-broker must be between 1 and --brokers (\(brokers))")
        }
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
        for (index, group) in groups.enumerated() {
            try cluster.pinGroupCoordinator(group, broker: Int32(index % brokers) + 1)
        }
        let broker = signalBroker
        let faultLogger = logger
        for (signalNumber, up) in [(SIGUSR1, false), (SIGUSR2, true)] {
            stop.on(signalNumber) {
                do {
                    let moved = try cluster.setBroker(broker, up: up)
                    faultLogger.notice(
                        up ? "kafka-dev broker up" : "kafka-dev broker down",
                        metadata: [
                            "kafka.broker": "\(broker)", "kafka.partitions_moved": "\(moved.partitions)",
                            "kafka.groups_moved": "\(moved.groups)",
                        ])
                } catch {
                    faultLogger.error("kafka-dev broker fault failed", metadata: ["kafka.broker": "\(broker)", "error": "\(error)"])
                }
            }
        }
        let faulty = FaultSwitch()
        let faultTopics = faultTopics
        if !faultTopics.isEmpty {
            stop.on(SIGHUP) {
                let failing = faulty.toggle()
                // 29: TOPIC_AUTHORIZATION_FAILED, an error no retry of the client's own gets past; 0 heals.
                for topic in faultTopics { cluster.setTopicError(topic, code: failing ? 29 : 0) }
                faultLogger.notice(
                    failing ? "kafka-dev topics refusing requests" : "kafka-dev topics healed",
                    metadata: ["kafka.topics": "\(faultTopics.joined(separator: ","))"])
            }
        }
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

/// Whether kafka-dev's --fault-topic topics are refusing requests (SIGHUP flips it).
private final class FaultSwitch: Sendable {
    private let on = Mutex(false)

    /// Flips the switch; returns the new state.
    func toggle() -> Bool {
        on.withLock { on in
            on.toggle()
            return on
        }
    }
}
