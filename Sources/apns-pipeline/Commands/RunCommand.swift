import ArgumentParser
import CJemallocOptions
import Foundation
import Logging
import Operations
import Pipeline
import Redis
import ServiceLifecycle
import Synchronization
import UnixSignals

/// `apns-pipeline run --pipeline Pipelines/NAME.yaml`: the long-running service.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the pipeline: Kafka → gate → shards → settler, with registrations and feedback beside it.",
        discussion: """
            SIGTERM or SIGINT: stop taking jobs, drain every transport for at most pipeline.drain_timeout_s, \
            record the outcomes, commit the Kafka offsets, exit 0. A stop that is not done 10 s after the \
            drain timeout, or a second signal, exits at once (unsettled jobs are redelivered later).
            """
    )

    @Option(help: "The pipeline file.") var pipeline: String = "Pipelines/default.yaml"

    /// How long jemalloc keeps freed pages in a process with a binary app (see `run()`).
    static let binaryDirtyDecayMs = 100

    func run() async throws {
        let config = try loadPipeline(pipeline)
        let level = Logger.Level(rawValue: config.logLevel) ?? .info
        // Values substituted into the pipeline file (`${NAME}`, `${file:…}`) never reach a log line.
        let secrets = config.secrets
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = level
            return RedactingLogHandler(h, secrets: secrets)
        }
        let logger = Logger(label: "apns.pipeline")
        if config.apps.contains(where: { $0.transport == .binary }) {
            // jemalloc keeps freed pages ten seconds by default. With a binary app (its grace window keeps
            // rate × settle_grace of sent frames) returning them sooner lowers the 1M-job `ops/bench e2e`
            // peak: after 1 s from ~138 to ~128 MiB at the same CPU per job, after 0.1 s by ~5 MiB more
            // for ~0.2 µs per job (0 s: ~2 µs per job). Over HTTP/2 it saved nothing and cost ~0.4 µs of
            // CPU per job, so HTTP/2-only processes keep the default.
            let set = apns_jemalloc_set_dirty_decay_ms(Self.binaryDirtyDecayMs) == 0
            logger.debug(
                "allocator", metadata: ["dirty_decay_ms": set ? "\(Self.binaryDirtyDecayMs)" : "unchanged (MALLOC_CONF or no jemalloc)"])
        }
        // A second SIGTERM/SIGINT while draining: leave now. Installed beside service-lifecycle's own
        // handling of the first, which starts the graceful shutdown.
        // …and a stop that outlives `pipeline.drain_timeout_s` + 10 s (Redis or Kafka not answering the
        // final settle or commit) ends the process anyway: what is unsettled is redelivered (§1.3).
        let second = await SecondSignal.arm(stopWithin: config.drainTimeout + PipelineConfiguration.stopGrace)
        // `metrics.listen`: /metrics, /healthz, /readyz and the dashboard, served beside the pipeline.
        let prometheus = config.metricsListen.map { _ in PrometheusMetrics() }
        let runner = PipelineRunner(configuration: config, logger: logger, metrics: prometheus?.pipelineMetrics(for: config))
        var surface: (server: OperationsServer, data: DashboardData)?
        if let listen = config.metricsListen, let prometheus {
            do {
                surface = try await OperationsSurface.serve(
                    configuration: config, runner: runner, metrics: prometheus, host: listen.host, port: listen.port, logger: logger)
            } catch let error as OperationsServer.ListenError {
                // Most often a second `run` with the same pipeline file on this machine: say which key to change.
                throw ValidationError(
                    "\(pipeline): metrics.listen: \(error). Another process (often a second `run` with the same file) "
                        + "holds that port: give this process another port (0 picks a free one) or remove metrics.listen.")
            }
            logger.info(
                "operations surface listening",
                metadata: [
                    "dashboard": "http://\(listen.host):\(surface!.server.port)/",
                    "metrics": "http://\(listen.host):\(surface!.server.port)/metrics",
                ])
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: runner)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch let error as DedupLayoutMismatch {
            // A configuration error: name the file whose keys to change.
            await surface?.server.stop()
            throw ValidationError("\(pipeline): \(error)")
        } catch {
            await surface?.server.stop()
            throw error
        }
        await surface?.server.stop()
        await surface?.data.close()
        second.disarm()
    }
}

/// Exits the process on the second SIGTERM/SIGINT (the first starts the service group's graceful
/// shutdown), or when the stop the first one started outlives its deadline. swift-service-lifecycle's
/// `UnixSignalsSequence` does the trapping.
struct SecondSignal {
    private let watcher: Task<Void, Never>
    private let deadline: StopDeadline

    /// Returns once the handlers are registered, so no signal after it is missed. After the first signal
    /// the stop has `stopWithin` to finish; past it the process exits (status 1) whatever it waits for.
    static func arm(stopWithin: Duration) async -> SecondSignal {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let deadline = StopDeadline()
        let watcher = Task {
            var seen = 0
            for await _ in signals {
                seen += 1
                if seen == 1 { deadline.start(stopWithin) }
                if seen >= 2 {
                    FileHandle.standardError.write(Data("second signal: exiting now; unsettled jobs will be redelivered\n".utf8))
                    exit(130)
                }
            }
        }
        return SecondSignal(watcher: watcher, deadline: deadline)
    }

    func disarm() {
        watcher.cancel()
        deadline.cancel()
    }
}

/// The stop's deadline timer, started by the first signal.
private final class StopDeadline: Sendable {
    private let timer = Mutex<Task<Void, Never>?>(nil)

    func start(_ limit: Duration) {
        timer.withLock {
            $0 = Task {
                guard (try? await Task.sleep(for: limit)) != nil else { return }
                FileHandle.standardError.write(
                    Data(
                        ("stop not finished \(limit.components.seconds) s after the signal (Redis or Kafka not answering?): "
                            + "exiting now; unsettled jobs will be redelivered\n").utf8))
                exit(1)
            }
        }
    }

    func cancel() { timer.withLock { $0?.cancel() } }
}
