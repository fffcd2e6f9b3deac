import ArgumentParser
import Foundation
import Logging
import Pipeline
import Redis

// Helpers every subcommand may use: reading a pipeline file, a quiet logger, Redis from a pipeline
// file, a progress bar.

/// Reads a pipeline file; a file that cannot be used is a usage error naming the file, key and problem.
func loadPipeline(_ path: String) throws -> PipelineConfiguration {
    do {
        return try PipelineConfiguration.load(file: path)
    } catch let error as ConfigurationError {
        throw ValidationError("\(error)")
    }
}

/// Warnings and errors only, on stderr: for commands whose stdout is their result.
func quietLogger() -> Logger {
    var l = Logger(label: "apns", factory: { StreamLogHandler.standardError(label: $0) })
    l.logLevel = .warning
    return l
}

/// The Redis a command names without a pipeline file: the cluster of `--redis-cluster` (comma-separated
/// `host:port` nodes, as the pipeline file's `redis.cluster`) when given, else the server at `--redis`.
func redisTarget(url: String, cluster: String?) throws -> RedisTarget {
    let nodes = cluster.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
    do {
        return try RedisTarget(url: url, cluster: nodes)
    } catch {
        throw ValidationError(cluster != nil ? "--redis-cluster: \(error) (expected host:port,host:port,…)" : "--redis: \(error)")
    }
}

/// A connected client for the pipeline file's Redis, and the store on it with the file's key prefix.
func openStore(_ config: PipelineConfiguration, logger: Logger) async throws -> (any RedisConnection, PipelineStore) {
    let redis = try config.redis.makeConnection(logger: logger)
    try await redis.connect()
    var storeConfiguration = PipelineStoreConfiguration(keyPrefix: config.redis.prefix)
    // The dedup settings fix how long a campaign's job marks live (PipelineStore.jobMarkRetention).
    storeConfiguration.dedupRetention = .seconds(config.redis.dedupTTLHours * 3600)
    storeConfiguration.dedupBucketWidth = .seconds(config.redis.dedupBucketHours * 3600)
    // Where registrations and suppressions of a token live (its token bucket is in the key names).
    storeConfiguration.tokenBuckets = config.redis.tokenBuckets
    storeConfiguration.dedupSubBuckets = config.redis.dedupSubBuckets
    config.redis.apply(to: &storeConfiguration)
    let store = PipelineStore(client: redis, configuration: storeConfiguration, logger: logger)
    return (redis, store)
}

/// A progress bar with count, rate and ETA, on stderr, redrawn in place.
final class Progress {
    let total: Int
    let label: String
    let enabled: Bool
    let start = Date()

    init(total: Int, label: String, enabled: Bool) {
        self.total = total
        self.label = label
        self.enabled = enabled && isatty(2) != 0 || enabled && ProcessInfo.processInfo.environment["APNS_PROGRESS"] == "1"
    }

    func update(_ done: Int) {
        guard enabled else { return }
        last = done
        let elapsed = max(0.001, Date().timeIntervalSince(start))
        let rate = Double(done) / elapsed
        let fraction = total > 0 ? Double(done) / Double(total) : 1
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
        let eta = rate > 0 ? Double(total - done) / rate : 0
        let line = String(format: "\r%@ %@ %d/%d  %.0f/s  ETA %.0fs ", label, bar, done, total, rate, eta)
        FileHandle.standardError.write(Data(line.utf8))
    }

    private var last = -1

    func finish() {
        guard enabled else { return }
        if last != total { update(total) }
        FileHandle.standardError.write(Data("\n".utf8))
    }
}
