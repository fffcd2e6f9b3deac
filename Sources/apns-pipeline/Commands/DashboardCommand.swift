import ArgumentParser
import Foundation
import Logging
import Operations
import Pipeline
import Sender
import UnixSignals

/// `apns-pipeline dashboard --pipeline F`: the live dashboard alone, for a machine that runs no pipeline
/// (`run` serves the same page at `metrics.listen` beside /metrics).
struct DashboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard",
        abstract: "Serve the live dashboard (totals, rates, campaigns, connections, rejections) over the pipeline's Redis.",
        discussion: """
            Reads the Redis named by the pipeline file (redis.url, redis.prefix) and serves a self-contained page \
            that refreshes itself every 2 s. `run` serves the same page at metrics.listen when that is set. \
            With metrics.auth_token in the file, the page asks for that token once (or takes it from a \
            `#token=` fragment of its address) and the data needs it, as with `run`; the campaign buttons \
            need metrics.control_token. Stops on SIGTERM/SIGINT.
            """
    )

    @Option(help: "The pipeline file (its redis section is used).") var pipeline: String = "Pipelines/default.yaml"
    @Option(help: "host:port to listen on (port 0 picks a free one).") var listen: String = "127.0.0.1:9465"

    func run() async throws {
        let config = try loadPipeline(pipeline)
        guard let address = GatewayAddress(listen) else { throw ValidationError("--listen: expected host:port, found \"\(listen)\"") }
        let logger = Logger(label: "apns.dashboard")
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let served: (server: OperationsServer, data: DashboardData)
        do {
            served = try await OperationsSurface.serveDashboard(
                redis: try config.redis.target(), prefix: config.redis.prefix, host: address.host, port: address.port,
                authToken: config.metricsAuthToken, controlToken: config.metricsControlToken, logger: logger)
        } catch let error as OperationsServer.ListenError {
            throw ValidationError("--listen: \(error): pass a free port (0 picks one).")
        }
        let (server, data) = served
        print("dashboard: http://\(address.host):\(server.port)/")
        for await _ in signals { break }
        await server.stop()
        await data.close()
    }
}
