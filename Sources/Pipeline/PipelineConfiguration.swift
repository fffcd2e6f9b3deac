import APNsProtocol
import APNsTransport
import Feedback
import Foundation
import Redis
import Sender

/// The Redis defaults' home (see `PipelineConfiguration.Redis`).
private let storeDefaults = PipelineStoreConfiguration()

/// Everything `apns-pipeline run` needs, read from `Pipelines/NAME.yaml`. Each section is documented in
/// `Pipelines/default.yaml`; relative paths are relative to the directory the command runs in.
public struct PipelineConfiguration: Sendable {
    public struct Kafka: Sendable {
        public var bootstrapServers: String?
        /// A file holding the bootstrap servers (kafka-dev writes one); read at start.
        public var bootstrapServersFile: String?
        public var group = "apns-pipeline"
        public var jobsTopic = "apns.jobs"
        public var deadLetterTopic = "apns.jobs.dlq"
        public var registrationsTopic: String? = "apns.registrations"
        public var batchSize = 1000
        public var sessionTimeoutMs = 10_000
        /// The dead-letter producer's `message.max.bytes`: a dead letter larger than this is written
        /// without its body (size and hash in headers). Keep it at or below the topic's `max.message.bytes`.
        public var deadLetterMaxBytes = 1_000_000
        /// The dead-letter producer's `message.timeout.ms`: one write attempt fails (counted, logged,
        /// retried with back-off) after this long.
        public var deadLetterTimeoutMs = 30_000
        /// librdkafka properties passed through unchanged (security.protocol, sasl.*, ssl.*, …).
        public var properties: [String: String] = [:]

        public func resolvedBootstrapServers() throws -> String {
            if let bootstrapServers { return bootstrapServers }
            guard let file = bootstrapServersFile else { return "127.0.0.1:9092" }
            guard let text = try? String(contentsOfFile: file, encoding: .utf8),
                let line = text.split(whereSeparator: \.isNewline).first, !line.isEmpty
            else {
                throw ConfigurationError(
                    file: file, key: "kafka.bootstrap_servers_file",
                    problem: "no bootstrap servers in this file (is `apns-pipeline kafka-dev --bootstrap-file \(file)` running?)")
            }
            return String(line)
        }
    }

    /// Defaults come from their one home, `PipelineStoreConfiguration` (and `RedisConfiguration`).
    public struct Redis: Sendable {
        public var url = RedisConfiguration.defaultURL
        public var prefix = storeDefaults.keyPrefix
        public var dedupTTLHours = Int(storeDefaults.dedupRetention.components.seconds / 3600)
        /// Dedup records are kept in time buckets of this width: the gate looks up ttl ÷ width + 2 buckets
        /// per job, so wider buckets mean fewer lookups (and records living up to one width longer).
        public var dedupBucketHours = Int(storeDefaults.dedupBucketWidth.components.seconds / 3600)
        /// Sets per bucket: keep peak accepted jobs per bucket ÷ sub-buckets under ~400 (compact intsets).
        public var dedupSubBuckets = storeDefaults.dedupSubBuckets
        public var inFlightLeaseSeconds = Int(storeDefaults.inFlightLease.components.seconds)
        /// Lifetime of a `run` process's heartbeat: its leases are void this long after it died.
        public var ownerHeartbeatSeconds = Int(storeDefaults.ownerHeartbeat.components.seconds)
    }

    public struct App: Sendable {
        public var bundleID: String
        public var certificate: String
        public var key: String
        public var shards: Int?
        /// Gateways for this app; the `gateway.addresses` default otherwise.
        public var gateways: [GatewayAddress]?
        /// Its feedback service; `gateway.feedback_address` otherwise (a sandbox app needs the sandbox one).
        public var feedbackAddress: GatewayAddress?

        public init(bundleID: String, certificate: String, key: String, shards: Int? = nil, gateways: [GatewayAddress]? = nil) {
            self.bundleID = bundleID
            self.certificate = certificate
            self.key = key
            self.shards = shards
            self.gateways = gateways
        }
    }

    public struct Gateway: Sendable {
        public var addresses: [GatewayAddress] = [.production]
        public var feedbackAddress = GatewayAddress(host: FeedbackEndpoint.production.host, port: FeedbackEndpoint.production.port)
        public var serverHostname: String?
        public var ca: String?
        public var payloadLimit = PayloadLimits.default.command2
        public var truncateAlert = false
        /// Dev/test only: adds the job id to each payload as `jid`, so the simulator records it.
        public var embedJobID = false
        public var shards = 4
        public var shard = ShardConfiguration()
    }

    public var kafka = Kafka()
    public var redis = Redis()
    public var gateway = Gateway()
    public var apps: [App] = []
    /// Jobs taken from Kafka and not yet settled; beyond it, ingest stops taking batches (back-pressure,
    /// `docs/design.md §1.2`).
    public var maxInFlight = 50_000
    /// Feedback polling interval in minutes (the spec asks for at least daily); 0 turns it off.
    public var feedbackIntervalMinutes = FeedbackSchedule.defaultInterval / .seconds(60)
    public var logLevel = "info"

    public init() {}

    /// Reads and checks a pipeline file. Errors name the file, the key and what was expected.
    public static func load(file: String) throws -> PipelineConfiguration {
        let root = try ConfigSection.load(file: file)
        var c = PipelineConfiguration()

        let k = try root.section("kafka")
        c.kafka.bootstrapServers = try k.string("bootstrap_servers")
        c.kafka.bootstrapServersFile = try k.string("bootstrap_servers_file")
        c.kafka.group = try k.string("group", default: c.kafka.group)
        c.kafka.jobsTopic = try k.string("jobs_topic", default: c.kafka.jobsTopic)
        c.kafka.deadLetterTopic = try k.string("dead_letter_topic", default: c.kafka.deadLetterTopic)
        c.kafka.registrationsTopic = try k.string("registrations_topic") ?? c.kafka.registrationsTopic
        if try k.bool("consume_registrations", default: true) == false { c.kafka.registrationsTopic = nil }
        c.kafka.batchSize = try k.int("batch_size", default: c.kafka.batchSize, range: 1...100_000)
        c.kafka.sessionTimeoutMs = try k.int("session_timeout_ms", default: c.kafka.sessionTimeoutMs, range: 1000...300_000)
        // librdkafka's own range for message.max.bytes.
        c.kafka.deadLetterMaxBytes = try k.int(
            "dead_letter_max_bytes", default: c.kafka.deadLetterMaxBytes, range: 1000...1_000_000_000)
        c.kafka.deadLetterTimeoutMs = try k.int(
            "dead_letter_timeout_ms", default: c.kafka.deadLetterTimeoutMs, range: 1000...900_000)
        c.kafka.properties = try k.stringMap("properties")
        try k.finish()

        let r = try root.section("redis")
        c.redis.url = try r.string("url", default: c.redis.url)
        c.redis.prefix = try r.string("prefix", default: c.redis.prefix)
        c.redis.dedupTTLHours = try r.int("dedup_ttl_hours", default: c.redis.dedupTTLHours, range: 1...24 * 365)
        c.redis.dedupBucketHours = try r.int("dedup_bucket_hours", default: c.redis.dedupBucketHours, range: 1...24 * 365)
        c.redis.dedupSubBuckets = try r.int("dedup_sub_buckets", default: c.redis.dedupSubBuckets, range: 1...1 << 24)
        c.redis.inFlightLeaseSeconds = try r.int("in_flight_lease_s", default: c.redis.inFlightLeaseSeconds, range: 1...86_400)
        c.redis.ownerHeartbeatSeconds = try r.int("owner_heartbeat_s", default: c.redis.ownerHeartbeatSeconds, range: 2...600)
        try r.finish()

        let g = try root.section("gateway")
        if let list = try g.strings("addresses") {
            c.gateway.addresses = try list.map { try address($0, file: file, key: "gateway.addresses") }
        }
        if let f = try g.string("feedback_address") {
            c.gateway.feedbackAddress = try address(f, file: file, key: "gateway.feedback_address")
        }
        c.gateway.serverHostname = try g.string("server_hostname")
        c.gateway.ca = try g.string("ca")
        c.gateway.payloadLimit = try g.int("payload_limit", default: c.gateway.payloadLimit, range: 1...65_535)
        c.gateway.truncateAlert = try g.bool("truncate_alert", default: c.gateway.truncateAlert)
        c.gateway.embedJobID = try g.bool("embed_job_id", default: c.gateway.embedJobID)
        c.gateway.shards = try g.int("shards", default: c.gateway.shards, range: 1...256)
        var s = ShardConfiguration()
        s.batchBytes = try g.int("batch_bytes", default: s.batchBytes, range: 512...(16 << 20))
        // Every number has a range, so a wrong unit (seconds for milliseconds) or a stray minus sign is an
        // error at start with the key, not a pipeline that stalls or hammers a gateway.
        s.linger = try g.double("linger_ms", default: s.linger * 1000, range: 0...1000) / 1000
        s.queueCapacity = try g.int("queue_capacity", default: s.queueCapacity, range: 1...10_000_000)
        s.settleAfter = try g.double("settle_after_ms", default: s.settleAfter * 1000, range: 1...3_600_000) / 1000
        s.replayMaxCount = try g.int("replay_max_count", default: s.replayMaxCount, range: 16...100_000_000)
        s.replayMaxBytes = try g.int("replay_max_mb", default: s.replayMaxBytes >> 20, range: 1...65_536) << 20
        s.maxAttempts = try g.int("max_attempts", default: s.maxAttempts, range: 1...100)
        s.drainTimeout = try g.double("drain_timeout_s", default: s.drainTimeout, range: 0...3600)
        s.connectTimeout = try g.double("connect_timeout_s", default: s.connectTimeout, range: 0.1...600)
        let rc = try g.section("reconnect")
        let initialMs = try rc.double("initial_ms", default: s.reconnect.initialDelay * 1000, range: 1...60_000)
        let maxMs = try rc.double("max_ms", default: s.reconnect.maximumDelay * 1000, range: 1...3_600_000)
        if maxMs < initialMs {
            throw ConfigurationError(
                file: file, key: "gateway.reconnect.max_ms",
                problem: "expected a number ≥ gateway.reconnect.initial_ms (\(ConfigSection.text(initialMs))), found \"\(ConfigSection.text(maxMs))\"")
        }
        s.reconnect.initialDelay = initialMs / 1000
        s.reconnect.maximumDelay = maxMs / 1000
        s.reconnect.attemptsPerSecondPerGateway = try rc.double(
            "attempts_per_second_per_gateway", default: s.reconnect.attemptsPerSecondPerGateway, range: 0.1...10_000)
        try rc.finish()
        c.gateway.shard = s
        try g.finish()

        let appSections = try root.sections("apps")
        if appSections.isEmpty {
            throw ConfigurationError(file: file, key: "apps", problem: "expected a list of apps (bundle_id, certificate, key)")
        }
        for a in appSections {
            var gateways: [GatewayAddress]?
            if let list = try a.strings("gateways") {
                gateways = try list.map { try address($0, file: file, key: "\(a.path).gateways") }
            }
            var feedback: GatewayAddress?
            if let f = try a.string("feedback_address") { feedback = try address(f, file: file, key: "\(a.path).feedback_address") }
            c.apps.append(
                App(
                    bundleID: try a.requiredString("bundle_id", "the app's bundle id (its certificate's topic)"),
                    certificate: try a.requiredString("certificate", "path of the provider certificate (PEM)"),
                    key: try a.requiredString("key", "path of the certificate's private key (PEM)"),
                    shards: a.has("shards") ? try a.int("shards", default: 1, range: 1...256) : nil,
                    gateways: gateways))
            c.apps[c.apps.count - 1].feedbackAddress = feedback
            try a.finish()
        }
        let ids = c.apps.map(\.bundleID)
        if Set(ids).count != ids.count {
            throw ConfigurationError(file: file, key: "apps", problem: "each bundle_id may appear once")
        }

        let p = try root.section("pipeline")
        c.maxInFlight = try p.int("max_in_flight", default: c.maxInFlight, range: 1...10_000_000)
        try p.finish()
        let f = try root.section("feedback")
        c.feedbackIntervalMinutes = try f.double("interval_minutes", default: c.feedbackIntervalMinutes, range: 0...1440)
        try f.finish()
        let l = try root.section("logging")
        c.logLevel = try l.string("level", default: c.logLevel)
        if !["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(c.logLevel) {
            throw ConfigurationError(file: file, key: "logging.level", problem: "expected one of trace, debug, info, notice, warning, error, critical")
        }
        try l.finish()
        try root.finish()

        // Files must be there now, not at the first notification.
        for (i, app) in c.apps.enumerated() {
            for (key, path) in [("certificate", app.certificate), ("key", app.key)] where !FileManager.default.fileExists(atPath: path) {
                throw ConfigurationError(file: file, key: "apps[\(i)].\(key)", problem: "no such file: \(path)")
            }
        }
        if let ca = c.gateway.ca, !FileManager.default.fileExists(atPath: ca) {
            throw ConfigurationError(file: file, key: "gateway.ca", problem: "no such file: \(ca)")
        }
        return c
    }

    private static func address(_ text: String, file: String, key: String) throws -> GatewayAddress {
        guard let a = GatewayAddress(text) else {
            throw ConfigurationError(file: file, key: key, problem: "expected host:port, found \"\(text)\"")
        }
        return a
    }

    public func credentials(for app: App) -> ProviderCredentials {
        ProviderCredentials(app: app.bundleID, certificatePath: app.certificate, privateKeyPath: app.key, trustRootsPath: gateway.ca)
    }
}
