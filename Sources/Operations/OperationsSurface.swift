import CoreMetrics
import Logging
import Pipeline
import Prometheus
import Redis

/// A Prometheus registry for one pipeline, and the factory that feeds it with the pipeline's buckets.
/// One per runner (not `MetricsSystem.bootstrap`, which a process may call once): tests run several
/// pipelines in one process, each scraped on its own.
public struct PrometheusMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    public let factory: PrometheusMetricsFactory

    public init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = [
            PipelineMetrics.Name.settlementLatency: PipelineMetrics.latencyBuckets,
            PipelineMetrics.Name.answerLatency: PipelineMetrics.answerLatencyBuckets,
        ]
        factory.valueHistogramBuckets = [
            PipelineMetrics.Name.kafkaBatch: PipelineMetrics.batchBuckets,
            PipelineMetrics.Name.settleBatch: PipelineMetrics.batchBuckets,
        ]
        self.factory = factory
    }

    /// The pipeline's metrics, labelled with each app's transport.
    public func pipelineMetrics(for configuration: PipelineConfiguration) -> PipelineMetrics {
        PipelineMetrics(
            factory: factory,
            transports: Dictionary(uniqueKeysWithValues: configuration.apps.map { ($0.bundleID, $0.transport.rawValue) }))
    }

    /// The exposition text (Prometheus 0.0.4).
    public func text() -> [UInt8] { registry.emitToBuffer() }
}

/// What `run` serves beside the pipeline when `metrics.listen` is set: /metrics, /healthz, /readyz
/// (Kafka assigned, Redis reachable, a gateway connection per app), the dashboard and its data.
public enum OperationsSurface {
    public static func serve(
        configuration: PipelineConfiguration, runner: PipelineRunner, metrics: PrometheusMetrics, host: String, port: Int,
        logger: Logger
    ) async throws -> (server: OperationsServer, data: DashboardData) {
        let data = try DashboardData(redis: try configuration.redis.target(), prefix: configuration.redis.prefix, logger: logger)
        let routes = OperationsServer.Routes(
            metrics: { metrics.text() },
            readiness: {
                var problems = await runner.readiness()
                if let redis = await data.redisProblem() { problems.append(redis) }
                return problems
            },
            dashboard: { await data.snapshotJSON() })
        let server = try await OperationsServer(host: host, port: port, routes: routes, logger: logger)
        return (server, data)
    }

    /// The dashboard alone (`apns-pipeline dashboard`): the page and its data, no pipeline.
    public static func serveDashboard(redisURL: String, prefix: String, host: String, port: Int, logger: Logger) async throws
        -> (server: OperationsServer, data: DashboardData)
    {
        try await serveDashboard(redis: .single(try RedisConfiguration(url: redisURL)), prefix: prefix, host: host, port: port, logger: logger)
    }

    /// The same for one server or a cluster (the pipeline file's `redis.url` or `redis.cluster`).
    public static func serveDashboard(redis: RedisTarget, prefix: String, host: String, port: Int, logger: Logger) async throws
        -> (server: OperationsServer, data: DashboardData)
    {
        let data = try DashboardData(redis: redis, prefix: prefix, logger: logger)
        let routes = OperationsServer.Routes(
            readiness: { await data.redisProblem().map { [$0] } ?? [] },
            dashboard: { await data.snapshotJSON() })
        return (try await OperationsServer(host: host, port: port, routes: routes, logger: logger), data)
    }
}
