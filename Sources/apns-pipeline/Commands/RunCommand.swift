import ArgumentParser
import CJemallocOptions
import Foundation
import Logging
import NIOCore
import NIOPosix
import Operations
import Pipeline
import Redis
import Sender
import ServiceLifecycle
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
        if config.apps.contains(where: { $0.transport.capabilities.keepsWrittenNotifications }) {
            // jemalloc keeps freed pages ten seconds by default. With a binary app (its grace window keeps
            // rate × settle_grace of sent frames) returning them sooner lowers the 1M-job `ops/bench e2e`
            // peak: after 1 s from ~138 to ~128 MiB at the same CPU per job, after 0.1 s by ~5 MiB more
            // for ~0.2 µs per job (0 s: ~2 µs per job). Over HTTP/2 it saved nothing and cost ~0.4 µs of
            // CPU per job, so HTTP/2-only processes keep the default.
            let set = apns_jemalloc_set_dirty_decay_ms(Self.binaryDirtyDecayMs) == 0
            logger.debug(
                "allocator", metadata: ["dirty_decay_ms": set ? "\(Self.binaryDirtyDecayMs)" : "unchanged (MALLOC_CONF or no jemalloc)"])
        }
        // The one place `run` handles SIGTERM and SIGINT, trapped before anything starts so that none is
        // missed: the first starts the service group's graceful shutdown, a second exits at once, and a stop
        // that outlives `pipeline.drain_timeout_s` + 10 s (Redis or Kafka not answering the final settle or
        // commit) ends the process anyway: what is unsettled is redelivered (§1.3).
        let signals = await StopSignals.trap(stopWithin: config.drainTimeout + PipelineConfiguration.stopGrace)
        // One event-loop group for the process: every gateway and Redis connection, and the operations port.
        let loops = MultiThreadedEventLoopGroup(numberOfThreads: config.eventLoopThreads)
        // `metrics.listen`: /metrics, /healthz, /readyz and the dashboard, served beside the pipeline.
        let prometheus = config.metricsListen.map { _ in PrometheusMetrics() }
        let runner = PipelineRunner(
            configuration: config, logger: logger, metrics: prometheus?.pipelineMetrics(for: config), eventLoopGroup: loops)
        var data: DashboardData?
        let ended: Result<Void, any Error>
        do {
            // The operations port first: the group stops its services in reverse order, so the port answers
            // while the pipeline drains and closes once it is done.
            var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
            if let listen = config.metricsListen, let prometheus {
                let surface = try await serveOperations(
                    config, runner: runner, metrics: prometheus, listen: listen, loops: loops, logger: logger)
                services.append(.init(service: surface.server))
                data = surface.data
            }
            services.append(.init(service: runner))
            try await signals.run(ServiceGroup(configuration: ServiceGroupConfiguration(services: services, logger: logger)))
            ended = .success(())
        } catch {
            ended = .failure(error)
        }
        await data?.close()
        try? await loops.shutdownGracefully()
        // A configuration error: name the file whose keys to change.
        if case .failure(let error as DedupLayoutMismatch) = ended { throw ValidationError("\(pipeline): \(error)") }
        try ended.get()
    }

    /// The operations surface on `metrics.listen`, on the pipeline's loops; a port it cannot take is an
    /// error naming the key to change.
    private func serveOperations(
        _ config: PipelineConfiguration, runner: PipelineRunner, metrics: PrometheusMetrics, listen: GatewayAddress,
        loops: any EventLoopGroup, logger: Logger
    ) async throws -> (server: OperationsServer, data: DashboardData) {
        let surface: (server: OperationsServer, data: DashboardData)
        do {
            surface = try await OperationsSurface.serve(
                configuration: config, runner: runner, metrics: metrics, host: listen.host, port: listen.port, logger: logger,
                eventLoopGroup: loops)
        } catch let error as OperationsServer.ListenError {
            // Most often a second `run` with the same pipeline file on this machine: say which key to change.
            throw ValidationError(
                "\(pipeline): metrics.listen: \(error). Another process (often a second `run` with the same file) "
                    + "holds that port: give this process another port (0 picks a free one) or remove metrics.listen.")
        }
        logger.info(
            "operations surface listening",
            metadata: [
                "dashboard": "http://\(listen.host):\(surface.server.port)/",
                "metrics": "http://\(listen.host):\(surface.server.port)/metrics",
            ])
        return surface
    }
}

/// `run`'s signal handling, its only one: SIGTERM and SIGINT trapped once (swift-service-lifecycle's
/// `UnixSignalsSequence`), beside a service group that traps none of its own. The first signal starts the
/// group's graceful shutdown and the stop's deadline; a second exits at once (status 130), and so does a
/// stop that outlives its deadline (status 1).
struct StopSignals {
    private let signals: UnixSignalsSequence
    private let stopWithin: Duration

    /// Returns once the handlers are registered, so no signal after it is missed.
    static func trap(stopWithin: Duration) async -> StopSignals {
        StopSignals(signals: await UnixSignalsSequence(trapping: .sigterm, .sigint), stopWithin: stopWithin)
    }

    /// Runs `group` until it ends, stopping it on the first signal.
    func run(_ group: ServiceGroup) async throws {
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            tasks.addTask { await watch(group) }
            defer { tasks.cancelAll() }
            try await tasks.next()
        }
    }

    /// Until cancelled: the first signal stops `group` and starts the deadline, the second exits.
    private func watch(_ group: ServiceGroup) async {
        await withDiscardingTaskGroup { deadline in
            var seen = 0
            for await _ in signals {
                seen += 1
                guard seen == 1 else {
                    FileHandle.standardError.write(Data("second signal: exiting now; unsettled jobs will be redelivered\n".utf8))
                    exit(130)
                }
                await group.triggerGracefulShutdown()
                deadline.addTask { await exitPastDeadline() }
            }
        }
    }

    private func exitPastDeadline() async {
        guard (try? await Task.sleep(for: stopWithin)) != nil else { return }
        FileHandle.standardError.write(
            Data(
                ("stop not finished \(stopWithin.components.seconds) s after the signal (Redis or Kafka not answering?): "
                    + "exiting now; unsettled jobs will be redelivered\n").utf8))
        exit(1)
    }
}
