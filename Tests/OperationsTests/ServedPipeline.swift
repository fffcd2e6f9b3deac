import Logging
import NIOPosix
import Operations
import Pipeline
import ServiceLifecycle

/// `run` as these tests start it: one event-loop group for the pipeline and its operations port (on a
/// free port of 127.0.0.1, `base`), both services of one service group, the port first. `stop()` ends
/// them in `run`'s order: the pipeline drains, then the port closes.
struct ServedPipeline {
    let runner: PipelineRunner
    let server: OperationsServer
    let data: DashboardData
    /// `http://127.0.0.1:<port>`, to GET `/readyz`, `/metrics`, … from.
    let base: String
    private let loops: MultiThreadedEventLoopGroup
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    /// `logger` is the pipeline's (a test that reads its lines passes its own); the port logs to `testLogger`.
    init(_ configuration: PipelineConfiguration, logger: Logger = testLogger) async throws {
        let prometheus = PrometheusMetrics()
        loops = MultiThreadedEventLoopGroup(numberOfThreads: configuration.eventLoopThreads)
        runner = PipelineRunner(
            configuration: configuration, logger: logger, metrics: prometheus.pipelineMetrics(for: configuration), eventLoopGroup: loops)
        (server, data) = try await OperationsSurface.serve(
            configuration: configuration, runner: runner, metrics: prometheus, host: "127.0.0.1", port: 0, logger: testLogger,
            eventLoopGroup: loops)
        base = "http://127.0.0.1:\(server.port)"
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(services: [.init(service: server), .init(service: runner)], logger: testLogger))
        self.group = group
        running = Task { try await group.run() }
    }

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await running.value
        await data.close()
        try await loops.shutdownGracefully()
    }
}
