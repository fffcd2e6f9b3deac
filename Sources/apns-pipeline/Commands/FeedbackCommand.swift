import ArgumentParser
import Feedback
import Foundation
import Logging
import Redis
import TimeUnits

/// `apns-pipeline feedback poll`: reads one app's feedback service list once and suppresses its tokens
/// in Redis (`<prefix>:suppressed:<app>` token → `<time>:feedback`). `run` polls on a schedule; this is
/// for operators, cron and rehearsals.
struct FeedbackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "feedback",
        abstract: "Read the APNs feedback service and suppress the tokens it lists.",
        subcommands: [Poll.self]
    )

    struct Poll: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "poll",
            abstract: "Poll one app's feedback service once and write its tuples to Redis as they arrive.",
            discussion: """
                The service clears its list once it has sent it, so each tuple is written to Redis as it \
                arrives (in batches), and Redis is checked before the service is contacted. A token \
                registered after its feedback time is not suppressed by the gate. \
                Production: --host feedback.push.apple.com; sandbox: --host feedback.sandbox.push.apple.com \
                (port 2196). Exit status 1 when the poll did not finish (the error says what was kept).
                """
        )

        @Option(
            help: "Take the apps, certificates, feedback address and Redis from this pipeline file (then --app picks one app; default all)."
        )
        var pipeline: String?
        @Option(help: "The app's bundle id (= the certificate's topic).") var app: String?
        @Option(help: "The app's provider certificate, PEM.") var cert: String?
        @Option(help: "The certificate's private key, PEM.") var key: String?
        @Option(help: "CA bundle (PEM) the service's certificate must chain to; default: the system's roots.") var ca: String?
        @Option(help: "Feedback service host.") var host: String = FeedbackEndpoint.production.host
        @Option(help: "Feedback service port.") var port: Int = FeedbackEndpoint.production.port
        @Option(help: "Name to verify the service's certificate against (default: the host).") var serverName: String?
        @Option(help: "Redis URL: redis://[user:password@]host:port[/db].") var redis: String = RedisConfiguration.defaultURL
        @Option(help: "Redis Cluster nodes instead of --redis: host:port,host:port,… (any primaries; the rest are found).")
        var redisCluster: String?
        @Option(help: "Prefix of the Redis keys.") var prefix: String = RedisKeys.defaultPrefix
        @Option(help: "Token buckets per app (the pipeline file's redis.token_buckets): where a token's suppressions live.")
        var tokenBuckets: Int = RedisKeys.defaultTokenBuckets
        @Option(
            help:
                "How the token buckets' hash tags are spelled (the pipeline file's redis.token_tags): plain or spread. Default: spread with --redis-cluster, else plain."
        )
        var tokenTags: RedisKeys.TokenTags?
        @Option(help: "Suppressions per Redis round trip at most.") var batchSize: Int = FeedbackPollerConfiguration().batchSize
        @Option(help: "Seconds without data from the service before giving up.") var readTimeout: Double =
            FeedbackPollerConfiguration().readTimeout / .seconds(1)
        @Option(help: "Seconds to keep retrying Redis before giving up.") var redisWait: Double = 30
        @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.") var logLevel: String = "info"

        func validate() throws {
            if pipeline == nil && (app == nil || cert == nil || key == nil) {
                throw ValidationError("give --pipeline FILE, or --app, --cert and --key")
            }
            guard (1...65_535).contains(port) else { throw ValidationError("--port must be 1…65535") }
            guard batchSize > 0 else { throw ValidationError("--batch-size must be positive") }
            guard readTimeout > 0, redisWait >= 0 else { throw ValidationError("--read-timeout and --redis-wait must be positive") }
            guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("unknown --log-level \(logLevel)") }
        }

        func run() async throws {
            let level = Logger.Level(rawValue: logLevel) ?? .info
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
            var targets: [FeedbackApp] = []
            var storeRedis: RedisTarget
            var keyPrefix = prefix
            var buckets = tokenBuckets
            var tags = tokenTags ?? .defaultFor(cluster: redisCluster != nil)
            if let pipeline {
                let config = try loadPipeline(pipeline)
                // The file's Redis, one server or a cluster, as `run` uses it: the suppressions go
                // where the gate looks for them.
                do {
                    storeRedis = try config.redis.target()
                } catch {
                    throw ValidationError("\(pipeline): redis: \(error)")
                }
                keyPrefix = config.redis.prefix
                buckets = config.redis.tokenBuckets
                tags = config.redis.effectiveTokenTags
                // The feedback service exists only beside the binary interface; HTTP/2 apps learn of
                // dead tokens from 410 answers instead.
                let chosen = config.apps.filter { (app == nil || $0.bundleID == app) && $0.transport.capabilities.hasFeedbackService }
                if chosen.isEmpty {
                    throw ValidationError("\(pipeline): no binary app \(app ?? "") in apps (HTTP/2 apps have no feedback service)")
                }
                targets = chosen.compactMap { a in
                    guard let credentials = config.credentials(for: a) else { return nil }
                    let address = a.feedbackAddress ?? config.gateway.feedbackAddress
                    return FeedbackApp(
                        credentials: credentials,
                        endpoint: FeedbackEndpoint(host: address.host, port: address.port, serverHostname: config.gateway.serverHostname))
                }
            } else if let app, let cert, let key {
                storeRedis = try redisTarget(url: redis, cluster: redisCluster)
                targets = [
                    FeedbackApp(
                        app: app, certificatePath: cert, privateKeyPath: key, trustRootsPath: ca,
                        endpoint: FeedbackEndpoint(host: host, port: port, serverHostname: serverName))
                ]
            } else {
                throw ValidationError("give --pipeline FILE, or --app, --cert and --key")  // as validate() says
            }
            storeRedis.maximumWait = .milliseconds(Int64(redisWait * 1000))
            let client = storeRedis.makeConnection()
            var storeConfiguration = PipelineStoreConfiguration(keyPrefix: keyPrefix, tokenBuckets: buckets)
            storeConfiguration.tokenTags = tags
            let store = PipelineStore(client: client, configuration: storeConfiguration)
            var configuration = FeedbackPollerConfiguration()
            configuration.batchSize = batchSize
            configuration.readTimeout = .milliseconds(Int64(readTimeout * 1000))
            let poller = FeedbackPoller(store: store, configuration: configuration)
            var failed = false
            for target in targets {
                do throws(FeedbackPollError) {
                    let summary = try await poller.poll(target)
                    print(Self.render(summary, prefix: keyPrefix))
                } catch {
                    print(Self.render(error.summary, prefix: keyPrefix))
                    FileHandle.standardError.write(
                        Data("error: \(error.stage.rawValue): \(error.underlying)\n  what now: \(error.advice)\n".utf8))
                    failed = true
                }
            }
            await client.close()
            if failed { throw ExitCode(1) }
        }

        static func render(_ summary: FeedbackPollSummary, prefix: String) -> String {
            func time(_ epoch: Int64?) -> String {
                guard let epoch else { return "–" }
                let formatter = ISO8601DateFormatter()
                return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(epoch)))
            }
            let rows: [(String, String)] = [
                ("app", summary.app),
                ("feedback service", summary.endpoint),
                ("tuples read", "\(summary.tuplesRead)"),
                ("suppressed", "\(summary.suppressed)  → {\(prefix):\(summary.app):<n>}:suppressed"),
                ("malformed (skipped)", "\(summary.malformed)"),
                ("ended mid-tuple", summary.endedMidTuple ? "yes (partial tuple dropped)" : "no"),
                (
                    "feedback times",
                    summary.oldestTimestamp == nil ? "–" : "\(time(summary.oldestTimestamp)) … \(time(summary.newestTimestamp))"
                ),
                ("Redis batches", "\(summary.batches)"),
                ("duration", "\(summary.duration.milliseconds) ms"),
            ]
            let width = rows.map(\.0.count).max() ?? 0
            return rows.map { $0.0.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + $0.1 }.joined(separator: "\n")
        }
    }
}

/// `--token-tags plain|spread`: ArgumentParser checks the value and lists the choices.
extension RedisKeys.TokenTags: ExpressibleByArgument {}
