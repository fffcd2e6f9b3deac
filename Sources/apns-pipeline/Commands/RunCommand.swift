import ArgumentParser
import Foundation
import Logging
import Pipeline
import ServiceLifecycle

/// `apns-pipeline run --pipeline Pipelines/NAME.yaml`: the long-running service.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the pipeline: Kafka → gate → shards → settler, with registrations and feedback beside it.",
        discussion: """
            SIGTERM or SIGINT: stop taking jobs, drain every shard (drain probe), record the outcomes, commit \
            the Kafka offsets, exit 0. A second signal exits at once (unsettled jobs are redelivered later).
            """
    )

    @Option(help: "The pipeline file.") var pipeline: String = "Pipelines/default.yaml"

    func run() async throws {
        let config: PipelineConfiguration
        do {
            config = try PipelineConfiguration.load(file: pipeline)
        } catch let error as ConfigurationError {
            throw ValidationError("\(error)")
        }
        let level = Logger.Level(rawValue: config.logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = level
            return h
        }
        let logger = Logger(label: "apns.pipeline")
        // A second SIGTERM/SIGINT while draining: leave now. Installed beside service-lifecycle's own
        // handling of the first, which starts the graceful shutdown.
        let second = SecondSignal()
        let runner = PipelineRunner(configuration: config, logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: runner)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
        second.disarm()
    }
}

/// Exits the process on the second SIGTERM/SIGINT.
final class SecondSignal: @unchecked Sendable {
    private var sources: [any DispatchSourceSignal] = []
    private let lock = NSLock()
    private var seen = 0

    init() {
        let queue = DispatchQueue(label: "apns.second-signal")
        for s in [SIGTERM, SIGINT] {
            let source = DispatchSource.makeSignalSource(signal: s, queue: queue)
            source.setEventHandler { [weak self] in self?.fired() }
            source.resume()
            sources.append(source)
        }
    }

    private func fired() {
        lock.lock()
        seen += 1
        let n = seen
        lock.unlock()
        if n >= 2 {
            FileHandle.standardError.write(Data("second signal: exiting now; unsettled jobs will be redelivered\n".utf8))
            exit(130)
        }
    }

    func disarm() { for s in sources { s.cancel() } }
}
