import CoreMetrics
import Logging
import NIOCore
import NIOPosix
import Pipeline
import Prometheus
import Redis

/// A Prometheus registry for one pipeline, and the factory that feeds it with the pipeline's buckets.
/// One per runner (not `MetricsSystem.bootstrap`, which a process may call once): tests run several
/// pipelines in one process, each scraped on its own.
/// Every metric carries the HELP text of ``PipelineMetrics/help`` (``DescribedMetricsFactory``).
public struct PrometheusMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    public let factory: any MetricsFactory

    public init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = [
            PipelineMetrics.Name.settlementLatency: PipelineMetrics.latencyBuckets,
            PipelineMetrics.Name.answerLatency: PipelineMetrics.answerLatencyBuckets,
            PipelineMetrics.Name.priorityLatency: PipelineMetrics.priorityLatencyBuckets,
        ]
        factory.valueHistogramBuckets = [
            PipelineMetrics.Name.kafkaBatch: PipelineMetrics.batchBuckets,
            PipelineMetrics.Name.settleBatch: PipelineMetrics.batchBuckets,
        ]
        self.factory = DescribedMetricsFactory(registry: registry, buckets: factory, help: { PipelineMetrics.help[$0] ?? "" })
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
/// (Kafka assigned, Redis reachable, a gateway connection per app, no sink refusing writes), the
/// dashboard and its data; behind `metrics.auth_token` when the pipeline file sets it, the campaign
/// buttons behind `metrics.control_token`.
public enum OperationsSurface {
    /// Connections and requests the operations port turned away, by reason (``OperationsServer/Refusal``).
    public static let refusalsMetric = "apns_ops_refusals_total"
    static let refusalsHelp =
        "Connections or requests the operations port refused: over the connection cap or a peer's share, timed out, too large, or without the bearer token."

    /// `eventLoopGroup`: the loops the port and its Redis connections run on (`run` passes the pipeline's,
    /// so the process has one group); nil: the server's own loop, and NIO's shared loops for Redis.
    public static func serve(
        configuration: PipelineConfiguration, runner: PipelineRunner, metrics: PrometheusMetrics, host: String, port: Int,
        logger: Logger, limits: OperationsServer.Limits = .init(), cacheFor: Duration = DashboardData.defaultCacheDuration,
        eventLoopGroup: (any EventLoopGroup)? = nil
    ) async throws -> (server: OperationsServer, data: DashboardData) {
        let data = try DashboardData(
            redis: try configuration.redis.target(), prefix: configuration.redis.prefix, logger: logger, cacheFor: cacheFor,
            controls: configuration.metricsControlToken != nil, eventLoopGroup: eventLoopGroup ?? MultiThreadedEventLoopGroup.singleton)
        let refusals = Dictionary(
            uniqueKeysWithValues: OperationsServer.Refusal.allCases.map { reason in
                (
                    reason,
                    metrics.registry.makeCounter(
                        descriptor: MetricNameDescriptor(metricName: refusalsMetric, unitName: "", helpText: refusalsHelp),
                        labels: [("reason", reason.rawValue)])
                )
            })
        let routes = OperationsServer.Routes(
            metrics: { metrics.text() },
            readiness: {
                var problems = await runner.readiness()
                if let redis = await data.redisProblem() { problems.append(redis) }
                return problems
            },
            dashboard: { await data.snapshotJSON() }, campaignControl: data.controlRoute)
        let server: OperationsServer
        do {
            server = try await OperationsServer(
                host: host, port: port, routes: routes, authToken: configuration.metricsAuthToken,
                controlToken: configuration.metricsControlToken, limits: limits, logger: logger, eventLoopGroup: eventLoopGroup,
                onRefusal: { refusals[$0]?.increment() })
        } catch {
            await data.close()
            throw error
        }
        warnIfOpen(host: host, authToken: configuration.metricsAuthToken, logger: logger)
        return (server, data)
    }

    /// The dashboard alone (`apns-pipeline dashboard`): the page and its data, no pipeline.
    /// `authToken`: the pipeline file's `metrics.auth_token`, asked for as by `run`; `controlToken`: its
    /// `metrics.control_token`, which the campaign buttons need.
    public static func serveDashboard(
        redisURL: String, prefix: String, host: String, port: Int, authToken: String? = nil, controlToken: String? = nil,
        logger: Logger, limits: OperationsServer.Limits = .init(), cacheFor: Duration = DashboardData.defaultCacheDuration,
        confirmationWait: Duration = CampaignControlRoute.defaultConfirmationWait
    ) async throws -> (server: OperationsServer, data: DashboardData) {
        try await serveDashboard(
            redis: .single(try RedisConfiguration(url: redisURL)), prefix: prefix, host: host, port: port, authToken: authToken,
            controlToken: controlToken, logger: logger, limits: limits, cacheFor: cacheFor, confirmationWait: confirmationWait)
    }

    /// The same for one server or a cluster (the pipeline file's `redis.url` or `redis.cluster`).
    public static func serveDashboard(
        redis: RedisTarget, prefix: String, host: String, port: Int, authToken: String? = nil, controlToken: String? = nil,
        logger: Logger, limits: OperationsServer.Limits = .init(), cacheFor: Duration = DashboardData.defaultCacheDuration,
        confirmationWait: Duration = CampaignControlRoute.defaultConfirmationWait
    ) async throws -> (server: OperationsServer, data: DashboardData) {
        let data = try DashboardData(
            redis: redis, prefix: prefix, logger: logger, cacheFor: cacheFor, controls: controlToken != nil,
            confirmationWait: confirmationWait)
        let routes = OperationsServer.Routes(
            readiness: { await data.redisProblem().map { [$0] } ?? [] },
            dashboard: { await data.snapshotJSON() }, campaignControl: data.controlRoute)
        let server: OperationsServer
        do {
            server = try await OperationsServer(
                host: host, port: port, routes: routes, authToken: authToken, controlToken: controlToken, limits: limits, logger: logger)
        } catch {
            await data.close()
            throw error
        }
        warnIfOpen(host: host, authToken: authToken, logger: logger)
        return (server, data)
    }

    /// An address other machines may reach, served without a token: say so at start (it stays allowed:
    /// a cluster network may be trusted, and the behaviour without the key is as before).
    static func warnIfOpen(host: String, authToken: String?, logger: Logger) {
        guard authToken == nil, !isLoopback(host) else { return }
        logger.warning(
            "operations surface: listening beyond loopback without metrics.auth_token; anyone who reaches the port reads the metrics and the dashboard",
            metadata: ["listen": "\(host)"])
    }

    /// 127.0.0.0/8, ::1 and `localhost`: only this machine connects.
    static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        return h == "localhost" || h == "::1" || h == "[::1]" || h.hasPrefix("127.")
    }
}
