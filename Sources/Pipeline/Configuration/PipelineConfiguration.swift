import APNsProtocol
import APNsTransport
import Feedback
import Foundation
import Kafka
import Logging
import NIOCore
import NIOPosix
import Redis
import Sender
import TimeUnits

/// The Redis defaults' home (see `PipelineConfiguration.Redis`).
private let storeDefaults = PipelineStoreConfiguration()
/// The HTTP/2 transport's tunables as `HTTP2TransportConfiguration` defines them: their one home (the
/// credentials and hosts here are placeholders; only the defaults are read).
private let http2Defaults = HTTP2TransportConfiguration(
    app: "", authentication: .certificate(ProviderCredentials(app: "", certificatePath: "", privateKeyPath: "", trustRootsPath: nil)),
    hosts: HTTP2TransportConfiguration.production)
private let consumerDefaults = KafkaConsumerConfiguration(bootstrapServers: "", groupID: "", topics: [])

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
        /// `kafka.outcomes_topic`: one message per settled job (design.md §3.5), delivered before the job's
        /// offset is committed. nil (the default): no outcomes stream, and nothing of it is built.
        public var outcomesTopic: String?
        /// `kafka.priority_topic`: the priority lane's topic (nil: no priority lane). Its jobs are consumed
        /// beside the jobs topic's, with their own in-flight budget and gate calls, and every transport
        /// writes them ahead of the jobs topic's (`docs/design.md §1.4`).
        public var priorityTopic: String?
        public var batchSize = consumerDefaults.maxBatchSize
        public var sessionTimeoutMs = Int(consumerDefaults.sessionTimeout.milliseconds)
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
        /// `redis.cluster`: the nodes (`host:port`, or `redis://[user:password@]host:port` for credentials)
        /// of a Redis Cluster to use instead of the one server at `url`; a few are enough, the client reads
        /// the rest from the cluster.
        public var cluster: [String]?
        /// `redis.password`: replaces the password of `url` (or of the cluster nodes). Any characters,
        /// no encoding: the place for a secret (`${file:/run/secrets/redis}`, `${REDIS_PASSWORD}`).
        public var password: String?
        /// `redis.tls`: TLS for every connection, with these files (`ca`, `cert`, `key`) and `server_name`;
        /// a `rediss://` URL alone means TLS verified against the system's roots.
        public var tls: RedisTLSConfiguration?
        public var prefix = storeDefaults.keyPrefix
        public var dedupTTLHours = Int(storeDefaults.dedupRetention.components.seconds / 3600)
        /// Dedup records are kept in time buckets of this width: the gate looks up ttl ÷ width + 1 buckets
        /// per job (+1 near a bucket's end), so wider buckets mean fewer lookups (and records living up to
        /// one width longer).
        public var dedupBucketHours = Int(storeDefaults.dedupBucketWidth.components.seconds / 3600)
        /// Sets per bucket: keep peak accepted jobs per bucket ÷ sub-buckets under ~400 (compact intsets).
        public var dedupSubBuckets = storeDefaults.dedupSubBuckets
        /// Token buckets per app (`token_buckets`): the Redis Cluster hash tags one app's per-token keys
        /// spread over. Fixed for the life of the data (it is in the key names).
        public var tokenBuckets = storeDefaults.tokenBuckets
        /// `token_tags`: how the token buckets' hash tags are spelled (``RedisKeys/TokenTags``). nil: spread
        /// on a Redis Cluster (its primaries take equal shares), plain on one server (as before tags could
        /// be spread, so an existing single Redis keeps its keys).
        public var tokenTags: RedisKeys.TokenTags?
        public var effectiveTokenTags: RedisKeys.TokenTags { tokenTags ?? .defaultFor(cluster: cluster != nil) }
        public var inFlightLeaseSeconds = Int(storeDefaults.inFlightLease.components.seconds)
        /// Lifetime of a `run` process's heartbeat: its leases are void this long after it died.
        public var ownerHeartbeatSeconds = Int(storeDefaults.ownerHeartbeat.components.seconds)
        /// `campaign_ttl_hours`: a campaign's keys (its hash, its job mark sets) expire this long after
        /// its last activity. nil: `dedup_ttl_hours` + `dedup_bucket_hours`, the least it may be (a job's
        /// mark must outlive its dedup record).
        public var campaignTTLHours: Int?

        /// `held_max_bytes`: the most held jobs (paused, scheduled, paced, `apps[].max_rate`) may take in
        /// Redis, all campaigns together (design §2.11, operations §3).
        public var heldMaxBytes = storeDefaults.heldCaps.totalBytes
        /// `held_campaign_max_bytes`: the same for one campaign (or one app's `max_rate`).
        public var heldCampaignMaxBytes = storeDefaults.heldCaps.campaignBytes
        /// `held_replica_acks`: replicas that must have a held job before its message settles (design §2.4).
        public var heldReplicaAcks = storeDefaults.heldReplicaAcks

        /// `campaignTTLHours`, or its default.
        public var effectiveCampaignTTLHours: Int { campaignTTLHours ?? dedupTTLHours + dedupBucketHours }

        /// The store settings these keys fix (what every command's store needs to agree with `run`).
        public func apply(to store: inout PipelineStoreConfiguration) {
            store.campaignRetention = .seconds(effectiveCampaignTTLHours * 3600)
            store.heldCaps = HeldCaps(totalBytes: heldMaxBytes, campaignBytes: heldCampaignMaxBytes)
            store.heldReplicaAcks = heldReplicaAcks
            store.tokenBuckets = tokenBuckets
            store.tokenTags = effectiveTokenTags
        }

        /// The one server or the cluster these keys name (checked by ``PipelineConfiguration/load(file:environment:)``).
        public func target() throws -> RedisTarget {
            var target = try RedisTarget(url: url, cluster: cluster)
            if let password { target.password = password }
            if let tls { target.tls = tls }
            return target
        }

        /// A new, unconnected client of ``target()``.
        /// `eventLoopGroup`: the loops the connection's channel runs on (`run` passes its own, so Redis shares
        /// the transports' loops and owns no thread).
        public func makeConnection(
            logger: Logger, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
        ) throws -> any RedisConnection {
            try target().makeConnection(logger: logger, eventLoopGroup: eventLoopGroup)
        }
    }

    /// How an app's notifications reach Apple.
    public enum Transport: String, Sendable, CaseIterable {
        /// Apple's HTTP/2 provider API: the only one Apple runs since March 2021.
        case http2
        /// The legacy binary interface (commands 0/1/2 on port 2195) and its feedback service.
        case binary

        /// The transport's configuration type, whose static members say what the protocol can do (push
        /// types, token sizes, payload limits, a feedback service, …): what the pipeline asks instead of
        /// switching on the kind.
        public var capabilities: any TransportConfiguration.Type { configurationType }

        /// The same type as the pipeline file configures it (``ConfigurableTransport``): the app entry's
        /// keys of the kind, and the transport's configuration built from the app and the file. The one
        /// place a `transport:` value becomes a type.
        var configurationType: any ConfigurableTransport.Type {
            switch self {
            case .http2: HTTP2TransportConfiguration.self
            case .binary: BinaryTransportConfiguration.self
            }
        }

        /// The kinds whose apps may authenticate with a provider token, as a message names them ("http2").
        static var tokenAuthenticationKinds: String {
            allCases.filter { $0.capabilities.hasTokenAuthentication }.map(\.rawValue).joined(separator: " or ")
        }
    }

    /// Which of Apple's environments an app's device tokens belong to (a development build's tokens
    /// are sandbox tokens, and production refuses them).
    public enum Environment: String, Sendable, CaseIterable {
        case production, sandbox
    }

    /// How the pipeline proves it may send for an app.
    public enum Authentication: Sendable, Equatable {
        /// A provider client certificate (PEM) and its private key: binary apps, or HTTP/2 certificate auth.
        case certificate(certificate: String, key: String)
        /// HTTP/2 token auth: the team's signing key (`.p8`, PKCS#8 PEM), its key id and the team id.
        case token(keyFile: String, keyID: String, teamID: String)
    }

    public struct App: Sendable {
        public var bundleID: String
        public var transport: Transport
        public var environment: Environment = .production
        public var authentication: Authentication
        /// Connections for this app (binary: shards); `gateway.shards` / `http2.connections` otherwise.
        public var shards: Int?
        /// Binary: gateways for this app (`gateway.addresses` otherwise). HTTP/2: hosts for this app
        /// (`http2.hosts`, else Apple's hosts of the app's environment).
        public var gateways: [GatewayAddress]?
        /// Binary: its feedback service; `gateway.feedback_address` otherwise (a sandbox app needs the sandbox one).
        public var feedbackAddress: GatewayAddress?
        /// `push_types`: the push types this app is configured to send (nil: not said). Checked at start
        /// against its authentication: a file that names one this app cannot send is refused, naming the
        /// app (`checkPushTypes`). A job of another push type is still judged per job (`checkCanSend`).
        public var pushTypes: [APNsPushType]?
        /// `max_rate`: at most this many of the app's jobs per second over every `run` process (design
        /// §2.13); nil: no limit. Jobs beyond it are held in Redis until their slot.
        public var maxRate: Int?
        /// `frequency_caps` and `frequency_caps_exempt` (design §2.15); nil: no app-wide cap.
        public var frequencyCaps: FrequencyCapSettings?
        /// `quiet_hours` (design §2.16); nil: none.
        public var quietHours: QuietHoursSettings?
        /// `default_time_zone`: the zone of a recipient whose job and registration name none (local-time
        /// delivery, quiet hours when they name no default of their own); nil: UTC.
        public var defaultTimeZone: TimeZone?

        /// A binary app with a provider certificate.
        public init(bundleID: String, certificate: String, key: String, shards: Int? = nil, gateways: [GatewayAddress]? = nil) {
            self.init(
                bundleID: bundleID, transport: .binary, authentication: .certificate(certificate: certificate, key: key), shards: shards,
                gateways: gateways)
        }

        public init(
            bundleID: String, transport: Transport, environment: Environment = .production, authentication: Authentication,
            shards: Int? = nil, gateways: [GatewayAddress]? = nil
        ) {
            self.bundleID = bundleID
            self.transport = transport
            self.environment = environment
            self.authentication = authentication
            self.shards = shards
            self.gateways = gateways
        }

        /// The files this app's credentials are read from (checked at start), with their keys.
        var credentialFiles: [(key: String, path: String)] {
            switch authentication {
            case .certificate(let certificate, let key): [("certificate", certificate), ("key", key)]
            case .token(let keyFile, _, _): [("token.key", keyFile)]
            }
        }
    }

    /// Settings of the HTTP/2 provider API connections, shared by every `transport: http2` app.
    public struct HTTP2: Sendable {
        /// Where to connect instead of Apple's hosts (the simulator); nil: Apple's, by each app's environment.
        public var hosts: [GatewayAddress]?
        public var serverHostname: String?
        /// PEM roots the server's certificate must chain to; nil: the system's (Apple's hosts).
        public var ca: String?
        public var connections = http2Defaults.connections
        public var streamCap = http2Defaults.streamCap
        public var batchBytes = http2Defaults.batchBytes
        public var linger = http2Defaults.linger
        public var queueCapacity = http2Defaults.queueCapacity
        public var requestTimeout = http2Defaults.requestTimeout
        public var pingInterval = http2Defaults.pingInterval
        /// Retries end this long after a job's first failure (`gateway-gave-up`), or at its expiration.
        public var giveUpAfter = http2Defaults.giveUpAfter
        public var retry = http2Defaults.retry
        public var reconnect = http2Defaults.reconnect
        /// `http2.proxy` (else `https_proxy` / `HTTPS_PROXY`) with `http2.no_proxy` (else `no_proxy` /
        /// `NO_PROXY`): the HTTPS proxy every HTTP/2 connection goes through but to the hosts listed.
        /// nil: direct (no proxy configured, or `proxy: none`).
        public var proxy: HTTPSProxySettings?

        /// Apple's hosts for an environment ("api.push.apple.com:443"; port 2197 is the alternative
        /// where 443 is blocked).
        public static func appleHosts(_ environment: Environment) -> [GatewayAddress] {
            switch environment {
            case .production: HTTP2TransportConfiguration.production
            case .sandbox: HTTP2TransportConfiguration.sandbox
            }
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
        public var shards = BinaryTransportConfiguration.defaultShards
        public var shard = ShardConfiguration()
    }

    public var kafka = Kafka()
    public var redis = Redis()
    public var gateway = Gateway()
    public var http2 = HTTP2()
    public var apps: [App] = []
    /// Jobs taken from Kafka and not yet settled; beyond it, ingest stops taking batches (back-pressure,
    /// `docs/design.md §1.2`).
    public var maxInFlight = 50_000
    /// Gate calls in flight at once, each on a Redis connection of its own (`pipeline.gate_calls_in_flight`):
    /// Redis decides on the next batches while this process sends the current one.
    public var gateCallsInFlight = 2
    /// The priority lane's own in-flight budget (`pipeline.priority_max_in_flight`): priority jobs taken
    /// and not settled, apart from `maxInFlight` (a campaign filling that budget never holds them back).
    public var priorityMaxInFlight = 1_000
    /// Bytes of large messages (over 4 KiB) taken from Kafka and not yet settled
    /// (`pipeline.max_in_flight_bytes`): with `maxInFlight`, what bounds `run`'s memory (design §1.2).
    public var maxInFlightBytes = 256 << 20
    /// Event-loop threads of `run` (`pipeline.event_loop_threads`): every app's connections (HTTP/2
    /// connections, binary shards) are spread over them, each connection on one loop for its life;
    /// the feedback poller and `run`'s Redis connections use them too. Kafka's clients keep threads of
    /// their own, and decoding, the gate and the settle run on Swift's cooperative pool (operations §4).
    public var eventLoopThreads = PipelineConfiguration.defaultEventLoopThreads
    /// Half the machine's cores (at least 1, at most 8). The other half is for Swift's cooperative pool,
    /// which decodes, gates and settles every job: on 2 cores, a loop per core made `run` spend ~9 % more
    /// CPU per HTTP/2 job at the same rate than one loop did (benchmarks §7.1). Beyond 8, one
    /// process is better split in two (operations §4).
    public static var defaultEventLoopThreads: Int { min(max(1, System.coreCount / 2), 8) }
    /// How long a stop (SIGTERM) waits for the batches already taken to be sent and for every transport's
    /// answers (`pipeline.drain_timeout_s`); what is unanswered then stays unsettled and Kafka redelivers
    /// it. The process exits within this plus `stopGrace` whatever Apple, Redis or Kafka do (§1.3).
    public var drainTimeout: Duration = .seconds(10)
    /// What a stop may take beyond `drainTimeout`: settling, the final commit, closing.
    public static let stopGrace: Duration = .seconds(10)
    /// How long a topic the pipeline must write to (the outcomes topic, the dead-letter topic) may refuse
    /// writes before `/readyz` says not ready (`pipeline.readiness_grace_s`). Shorter than that is a
    /// broker's leader election or a client's retry, which heals by itself.
    public var readinessGrace = PipelineConfiguration.defaultReadinessGrace
    public static let defaultReadinessGrace: Duration = .seconds(60)
    /// Feedback polling interval in minutes (the spec asks for at least daily); 0 turns it off.
    public var feedbackIntervalMinutes = FeedbackSchedule.defaultInterval / .seconds(60)
    public var logLevel = "info"
    /// `metrics.listen`: where `run` serves /metrics, /healthz, /readyz and the dashboard (nil: off).
    public var metricsListen: GatewayAddress?
    /// `metrics.auth_token`: the bearer token every path of the operations surface but `/healthz` asks
    /// for (nil: open, as before). A secret: kept in ``secrets`` even when written in clear.
    public var metricsAuthToken: String?
    /// `metrics.control_token`: the bearer token the campaign controls of the operations surface
    /// (`POST /api/campaigns/<id>/<action>`) ask for, and only they (nil: those answer 403). Another
    /// value than ``metricsAuthToken``; it reads the other paths too. A secret, as that one.
    public var metricsControlToken: String?
    /// The values `${NAME}` and `${file:/path}` put into the file (ConfigReader's `Substitution`): never
    /// logged in clear (``RedactingLogHandler``).
    public var secrets: [String] = []

    public init() {}

    /// Reads and checks a pipeline file. Errors name the file, the key and what was expected.
    /// `environment` is what `${NAME}` reads (the process's environment; tests pass their own).
    public static func load(
        file: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> PipelineConfiguration {
        let root = try ConfigSection.load(file: file, environment: environment)
        var c = PipelineConfiguration()
        try readKafka(root, into: &c, file: file)
        try readRedis(root, into: &c, file: file)
        try readGateway(root, into: &c, file: file)
        try readHTTP2(root, into: &c, file: file, environment: environment)
        try readApps(root, into: &c, file: file)
        try readPipeline(root, into: &c)
        try readFeedback(root, into: &c)
        try readLogging(root, into: &c, file: file)
        try readMetrics(root, into: &c, file: file)
        try root.finish()
        collectSecrets(root.substitution, into: &c)
        try checkFilesExist(c, file: file)
        return c
    }

    /// The `kafka` section: where jobs come from and where outcomes and dead letters go.
    private static func readKafka(_ root: ConfigSection, into c: inout PipelineConfiguration, file: String) throws {
        let k = try root.section("kafka")
        c.kafka.bootstrapServers = try k.string("bootstrap_servers")
        c.kafka.bootstrapServersFile = try k.string("bootstrap_servers_file")
        c.kafka.group = try k.string("group", default: c.kafka.group)
        c.kafka.jobsTopic = try k.string("jobs_topic", default: c.kafka.jobsTopic)
        c.kafka.deadLetterTopic = try k.string("dead_letter_topic", default: c.kafka.deadLetterTopic)
        c.kafka.registrationsTopic = try k.string("registrations_topic") ?? c.kafka.registrationsTopic
        if try k.bool("consume_registrations", default: true) == false { c.kafka.registrationsTopic = nil }
        if let topic = try k.string("priority_topic") {
            c.kafka.priorityTopic = try priorityTopic(topic, kafka: c.kafka, file: file)
        }
        if let topic = try k.string("outcomes_topic") {
            c.kafka.outcomesTopic = try outcomesTopic(topic, kafka: c.kafka, file: file)
        }
        c.kafka.batchSize = try k.int("batch_size", default: c.kafka.batchSize, range: 1...100_000)
        c.kafka.sessionTimeoutMs = try k.int("session_timeout_ms", default: c.kafka.sessionTimeoutMs, range: 1000...300_000)
        // librdkafka's own range for message.max.bytes.
        c.kafka.deadLetterMaxBytes = try k.int(
            "dead_letter_max_bytes", default: c.kafka.deadLetterMaxBytes, range: 1000...1_000_000_000)
        c.kafka.deadLetterTimeoutMs = try k.int(
            "dead_letter_timeout_ms", default: c.kafka.deadLetterTimeoutMs, range: 1000...900_000)
        c.kafka.properties = try k.stringMap("properties")
        try k.finish()
    }

    /// `kafka.priority_topic`, checked: a lane of its own needs a topic no other key already names.
    private static func priorityTopic(_ topic: String, kafka: Kafka, file: String) throws -> String {
        let others = [
            ("kafka.jobs_topic", kafka.jobsTopic), ("kafka.dead_letter_topic", kafka.deadLetterTopic),
            ("kafka.registrations_topic", kafka.registrationsTopic ?? ""),
        ]
        if topic.isEmpty {
            throw ConfigurationError(file: file, key: "kafka.priority_topic", problem: "expected a topic name (or leave the key out)")
        }
        if let (key, _) = others.first(where: { $0.1 == topic }) {
            throw ConfigurationError(
                file: file, key: "kafka.priority_topic", problem: "expected a topic of its own: \(topic) is already \(key)")
        }
        return topic
    }

    /// The `redis` section: which server(s) and how to reach them, then the gate's and the hold's sizes.
    private static func readRedis(_ root: ConfigSection, into c: inout PipelineConfiguration, file: String) throws {
        let r = try root.section("redis")
        try readRedisServer(r, into: &c.redis, file: file)
        try readRedisLimits(r, into: &c.redis, file: file)
        try r.finish()
    }

    /// `redis.url` or `redis.cluster`, the password and TLS: checked together, since a target is only
    /// known once all are read.
    private static func readRedisServer(_ r: ConfigSection, into redis: inout Redis, file: String) throws {
        redis.url = try r.string("url", default: redis.url)
        redis.cluster = try r.strings("cluster")
        if let password = try r.string("password") {
            guard !password.isEmpty else {
                throw ConfigurationError(
                    file: file, key: "redis.password", problem: "expected a password (is the file or variable it names empty?)")
            }
            redis.password = password
        }
        if r.has("tls") {
            redis.tls = try redisTLS(try r.section("tls"), file: file)
        }
        if r.has("url") && redis.cluster != nil {
            throw ConfigurationError(
                file: file, key: "redis", problem: "give redis.url (one server) or redis.cluster (a Redis Cluster's nodes), not both")
        }
        do {
            _ = try redis.target()
        } catch let RedisError.invalidURL(problem) {
            let key = redis.cluster != nil ? "redis.cluster" : "redis.url"
            let expected =
                redis.cluster != nil
                ? "a list of host:port (or redis[s]://[user:password@]host:port)"
                : "redis://[user:password@]host:port[/db] or rediss://… (TLS)"
            throw ConfigurationError(file: file, key: key, problem: "expected \(expected): \(problem)")
        }
    }

    /// `redis.tls`, with its files read now: a wrong path fails at start, naming the key, not at the
    /// first call.
    private static func redisTLS(_ t: ConfigSection, file: String) throws -> RedisTLSConfiguration {
        let tls = RedisTLSConfiguration(
            ca: try t.string("ca"), certificate: try t.string("cert"), key: try t.string("key"),
            serverName: try t.string("server_name"))
        try t.finish()
        do {
            _ = try tls.checkedContext()
        } catch let problem as RedisTLSConfiguration.Problem {
            throw ConfigurationError(file: file, key: "redis.tls.\(problem.key)", problem: problem.problem)
        }
        return tls
    }

    /// The key prefix, the dedup and token-bucket shapes, leases and the hold's byte budgets, with the
    /// checks that tie them to one another.
    private static func readRedisLimits(_ r: ConfigSection, into redis: inout Redis, file: String) throws {
        redis.prefix = try r.string("prefix", default: redis.prefix)
        redis.dedupTTLHours = try r.int("dedup_ttl_hours", default: redis.dedupTTLHours, range: 1...24 * 365)
        redis.dedupBucketHours = try r.int("dedup_bucket_hours", default: redis.dedupBucketHours, range: 1...24 * 365)
        redis.dedupSubBuckets = try r.int("dedup_sub_buckets", default: redis.dedupSubBuckets, range: 1...1 << 24)
        redis.tokenBuckets = try r.int("token_buckets", default: redis.tokenBuckets, range: 1...16_384)
        if let tags = try r.string("token_tags") {
            guard let known = RedisKeys.TokenTags(rawValue: tags) else {
                throw ConfigurationError(
                    file: file, key: "redis.token_tags",
                    problem: "expected \(RedisKeys.TokenTags.allCases.map(\.rawValue).joined(separator: " or ")), got '\(tags)'")
            }
            redis.tokenTags = known
        }
        redis.inFlightLeaseSeconds = try r.int("in_flight_lease_s", default: redis.inFlightLeaseSeconds, range: 1...86_400)
        redis.ownerHeartbeatSeconds = try r.int("owner_heartbeat_s", default: redis.ownerHeartbeatSeconds, range: 2...600)
        if r.has("campaign_ttl_hours") {
            let least = redis.dedupTTLHours + redis.dedupBucketHours
            redis.campaignTTLHours = try r.int("campaign_ttl_hours", default: least, range: 1...24 * 3650)
            guard redis.campaignTTLHours! >= least else {
                throw ConfigurationError(
                    file: file, key: "redis.campaign_ttl_hours",
                    problem:
                        "expected at least dedup_ttl_hours + dedup_bucket_hours = \(least) (a campaign's job marks must outlive its dedup records), got \(redis.campaignTTLHours!)"
                )
            }
        }
        redis.heldMaxBytes = Int64(
            try r.int("held_max_bytes", default: Int(redis.heldMaxBytes), range: (1 << 16)...(1 << 40)))
        redis.heldCampaignMaxBytes = Int64(
            try r.int(
                "held_campaign_max_bytes", default: Int(min(redis.heldCampaignMaxBytes, redis.heldMaxBytes)),
                range: (1 << 16)...(1 << 40)))
        guard redis.heldCampaignMaxBytes <= redis.heldMaxBytes else {
            throw ConfigurationError(
                file: file, key: "redis.held_campaign_max_bytes",
                problem: "expected at most redis.held_max_bytes (\(redis.heldMaxBytes)), got \(redis.heldCampaignMaxBytes)")
        }
        redis.heldReplicaAcks = try r.int("held_replica_acks", default: redis.heldReplicaAcks, range: 0...16)
    }

    /// The `gateway` section: the binary interface's gateways and what every shard is built with.
    private static func readGateway(_ root: ConfigSection, into c: inout PipelineConfiguration, file: String) throws {
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
        c.gateway.shard = try shardConfiguration(g, file: file)
        try g.finish()
    }

    /// The per-shard keys of `gateway` (batching, replay, settling, give-up, reconnect): one
    /// ``ShardConfiguration`` every binary shard shares.
    private static func shardConfiguration(_ g: ConfigSection, file: String) throws -> ShardConfiguration {
        var s = ShardConfiguration()
        s.batchBytes = try g.int("batch_bytes", default: s.batchBytes, range: 512...(16 << 20))
        // Every number has a range, so a wrong unit (seconds for milliseconds) or a stray minus sign is an
        // error at start with the key, not a pipeline that stalls or hammers a gateway.
        s.linger = try g.milliseconds("linger_ms", default: s.linger, range: 0...1000)
        s.queueCapacity = try g.int("queue_capacity", default: s.queueCapacity, range: 1...10_000_000)
        s.settleAfter = try g.milliseconds("settle_after_ms", default: s.settleAfter, range: 1...3_600_000)
        s.replayMaxCount = try g.int("replay_max_count", default: s.replayMaxCount, range: 16...100_000_000)
        s.replayMaxBytes = try g.int("replay_max_mb", default: s.replayMaxBytes >> 20, range: 1...65_536) << 20
        // The unsettled window per shard: absent, it is sized from settle_after (ShardConfiguration).
        let unsettledKB = try g.int("max_unsettled_kb", default: -1, range: 16...(s.replayMaxBytes >> 10))
        if unsettledKB > 0 { s.maxUnsettledBytes = unsettledKB << 10 }
        s.settleGrace = try g.milliseconds("settle_grace_ms", default: s.settleGrace, range: 0...3_600_000)
        if g.has("max_attempts") {
            throw ConfigurationError(
                file: file, key: "gateway.max_attempts",
                problem: "no longer used: status 1 / 255 are retried until gateway.give_up_after_s (default 3600) after the first")
        }
        s.giveUpAfter = try g.seconds("give_up_after_s", default: s.giveUpAfter ?? RetryBudget.defaultGiveUpAfter, range: 1...(7 * 86400))
        s.drainTimeout = try g.seconds("drain_timeout_s", default: s.drainTimeout, range: 0...3600)
        s.connectTimeout = try g.seconds("connect_timeout_s", default: s.connectTimeout, range: 0.1...600)
        s.reconnect = try gatewayReconnect(try g.section("reconnect"), default: s.reconnect, file: file)
        return s
    }

    /// `gateway.reconnect`: a shard's back-off between connection attempts, whose ceiling may not be
    /// below its start.
    private static func gatewayReconnect(_ rc: ConfigSection, default d: ReconnectPolicy, file: String) throws -> ReconnectPolicy {
        var policy = d
        let initial = try rc.milliseconds("initial_ms", default: d.initialDelay, range: 1...60_000)
        let maximum = try rc.milliseconds("max_ms", default: d.maximumDelay, range: 1...3_600_000)
        if maximum < initial {
            let (initialMs, maxMs) = (initial / .milliseconds(1), maximum / .milliseconds(1))
            throw ConfigurationError(
                file: file, key: "gateway.reconnect.max_ms",
                problem:
                    "expected a number ≥ gateway.reconnect.initial_ms (\(ConfigSection.text(initialMs))), found \"\(ConfigSection.text(maxMs))\""
            )
        }
        policy.initialDelay = initial
        policy.maximumDelay = maximum
        policy.attemptsPerSecondPerGateway = try rc.double(
            "attempts_per_second_per_gateway", default: d.attemptsPerSecondPerGateway, range: 0.1...10_000)
        try rc.finish()
        return policy
    }

    /// The `http2` section: the provider API's hosts, connections, timeouts, back-offs and proxy.
    private static func readHTTP2(
        _ root: ConfigSection, into c: inout PipelineConfiguration, file: String, environment: [String: String]
    ) throws {
        let h = try root.section("http2")
        if let list = try h.strings("hosts") {
            c.http2.hosts = try list.map { try address($0, file: file, key: "http2.hosts") }
        }
        c.http2.serverHostname = try h.string("server_hostname")
        c.http2.ca = try h.string("ca")
        c.http2.connections = try h.int("connections", default: c.http2.connections, range: 1...256)
        c.http2.streamCap = try h.int("stream_cap", default: c.http2.streamCap, range: 1...100_000)
        c.http2.batchBytes = try h.int("batch_bytes", default: c.http2.batchBytes, range: 512...(16 << 20))
        c.http2.linger = try h.milliseconds("linger_ms", default: c.http2.linger, range: 0...1000)
        c.http2.queueCapacity = try h.int("queue_capacity", default: c.http2.queueCapacity, range: 1...10_000_000)
        c.http2.requestTimeout = try h.seconds("request_timeout_s", default: c.http2.requestTimeout, range: 0.1...3600)
        c.http2.pingInterval = try h.seconds("ping_interval_s", default: c.http2.pingInterval, range: 0.1...3600)
        if h.has("max_attempts") {
            throw ConfigurationError(
                file: file, key: "http2.max_attempts",
                problem:
                    "no longer used: HTTP/2 retries are bounded by time (http2.give_up_after_s, default \(c.http2.giveUpAfter.components.seconds))"
            )
        }
        c.http2.giveUpAfter = try h.seconds("give_up_after_s", default: c.http2.giveUpAfter, range: 1...(7 * 86400))
        try readHTTP2Backoffs(h, into: &c.http2)
        c.http2.proxy = try proxySettings(h, file: file, environment: environment)
        try h.finish()
    }

    /// `http2.retry` and `http2.reconnect`: the back-off between a request's attempts and between a
    /// connection's.
    private static func readHTTP2Backoffs(_ h: ConfigSection, into http2: inout HTTP2) throws {
        let hretry = try h.section("retry")
        http2.retry.initialDelay = try hretry.milliseconds("initial_ms", default: http2.retry.initialDelay, range: 1...600_000)
        http2.retry.maximumDelay = try hretry.milliseconds("max_ms", default: http2.retry.maximumDelay, range: 1...3_600_000)
        try hretry.finish()
        let hr = try h.section("reconnect")
        http2.reconnect.initialDelay = try hr.milliseconds("initial_ms", default: http2.reconnect.initialDelay, range: 1...600_000)
        http2.reconnect.maximumDelay = try hr.milliseconds("max_ms", default: http2.reconnect.maximumDelay, range: 1...3_600_000)
        http2.reconnect.attemptsPerSecondPerGateway = try hr.double(
            "attempts_per_second_per_host", default: http2.reconnect.attemptsPerSecondPerGateway, range: 0.01...100_000)
        try hr.finish()
    }

    /// The `apps` list: at least one, each bundle id once.
    private static func readApps(_ root: ConfigSection, into c: inout PipelineConfiguration, file: String) throws {
        let appSections = try root.sections("apps")
        if appSections.isEmpty {
            throw ConfigurationError(
                file: file, key: "apps", problem: "expected a list of apps (bundle_id, and a token or a certificate + key)")
        }
        for a in appSections {
            c.apps.append(try app(a, file: file))
        }
        let ids = c.apps.map(\.bundleID)
        if Set(ids).count != ids.count {
            throw ConfigurationError(file: file, key: "apps", problem: "each bundle_id may appear once")
        }
    }

    /// The `pipeline` section: in-flight budgets, threads and the stop's timings.
    private static func readPipeline(_ root: ConfigSection, into c: inout PipelineConfiguration) throws {
        let p = try root.section("pipeline")
        c.maxInFlight = try p.int("max_in_flight", default: c.maxInFlight, range: 1...10_000_000)
        c.gateCallsInFlight = try p.int("gate_calls_in_flight", default: c.gateCallsInFlight, range: 1...8)
        c.priorityMaxInFlight = try p.int("priority_max_in_flight", default: c.priorityMaxInFlight, range: 1...1_000_000)
        c.maxInFlightBytes = try p.int("max_in_flight_bytes", default: c.maxInFlightBytes, range: (1 << 20)...(64 << 30))
        c.eventLoopThreads = try p.int("event_loop_threads", default: c.eventLoopThreads, range: 1...64)
        c.drainTimeout = .milliseconds(
            Int64(try p.double("drain_timeout_s", default: Double(c.drainTimeout.components.seconds), range: 0...3600) * 1000))
        c.readinessGrace = .milliseconds(
            Int64(try p.double("readiness_grace_s", default: Double(c.readinessGrace.components.seconds), range: 1...3600) * 1000))
        try p.finish()
    }

    /// The `feedback` section: how often the binary feedback service is polled.
    private static func readFeedback(_ root: ConfigSection, into c: inout PipelineConfiguration) throws {
        let f = try root.section("feedback")
        c.feedbackIntervalMinutes = try f.double("interval_minutes", default: c.feedbackIntervalMinutes, range: 0...1440)
        try f.finish()
    }

    /// The `logging` section: a level swift-log knows, so a typo fails at start rather than logging all.
    private static func readLogging(_ root: ConfigSection, into c: inout PipelineConfiguration, file: String) throws {
        let l = try root.section("logging")
        c.logLevel = try l.string("level", default: c.logLevel)
        if !["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(c.logLevel) {
            throw ConfigurationError(
                file: file, key: "logging.level", problem: "expected one of trace, debug, info, notice, warning, error, critical")
        }
        try l.finish()
    }

    /// The `metrics` section: where the operations surface listens and the tokens it asks for.
    private static func readMetrics(_ root: ConfigSection, into c: inout PipelineConfiguration, file: String) throws {
        let m = try root.section("metrics")
        if let listen = try m.string("listen") {
            c.metricsListen = try address(listen, file: file, key: "metrics.listen")
        }
        if let token = try m.string("auth_token") {
            c.metricsAuthToken = try checkedMetricsAuthToken(token, file: file)
        }
        if let token = try m.string("control_token") {
            c.metricsControlToken = try checkedMetricsControlToken(token, readToken: c.metricsAuthToken, file: file)
        }
        try m.finish()
    }

    /// Every value the logs must not show in clear: what was substituted into the file, the tokens, and
    /// passwords wherever they were written.
    private static func collectSecrets(_ substitution: Substitution, into c: inout PipelineConfiguration) {
        c.secrets = substitution.secrets + [c.metricsAuthToken, c.metricsControlToken].compactMap { $0 }
        // Redis passwords are secrets however they were written (in the URL or the key, literally or
        // substituted): never logged in clear.
        if let password = try? c.redis.target().password, !c.secrets.contains(password) { c.secrets.append(password) }
        // So is the proxy's password, wherever it came from (the file, HTTPS_PROXY), as written
        // (percent-encoded) and as sent.
        if let proxy = c.http2.proxy?.proxy, let password = proxy.password {
            for form in [password, password.addingPercentEncoding(withAllowedCharacters: .urlPasswordAllowed) ?? password]
            where !c.secrets.contains(form) {
                c.secrets.append(form)
            }
        }
    }

    /// Files must be there now, not at the first notification.
    private static func checkFilesExist(_ c: PipelineConfiguration, file: String) throws {
        for (i, app) in c.apps.enumerated() {
            for (key, path) in app.credentialFiles where !FileManager.default.fileExists(atPath: path) {
                throw ConfigurationError(file: file, key: "apps[\(i)].\(key)", problem: "no such file: \(path)")
            }
        }
        for (key, path) in [("gateway.ca", c.gateway.ca), ("http2.ca", c.http2.ca)] {
            if let path, !FileManager.default.fileExists(atPath: path) {
                throw ConfigurationError(file: file, key: key, problem: "no such file: \(path)")
            }
        }
    }

    /// One entry of `apps`. `transport` (default http2) decides which keys apply: a binary app needs a
    /// certificate and key; an HTTP/2 app a `token` (key, key_id, team_id) or a certificate and key.
    private static func app(_ a: ConfigSection, file: String) throws -> App {
        let bundleID = try a.requiredString("bundle_id", "the app's bundle id (its topic)")
        let transportName = try a.string("transport", default: Transport.http2.rawValue)
        guard let transport = Transport(rawValue: transportName) else {
            throw ConfigurationError(
                file: file, key: "\(a.path).transport",
                problem: "expected \(Transport.allCases.map(\.rawValue).joined(separator: " or ")), found \"\(transportName)\"")
        }
        let environmentName = try a.string("environment", default: Environment.production.rawValue)
        guard let environment = Environment(rawValue: environmentName) else {
            throw ConfigurationError(
                file: file, key: "\(a.path).environment", problem: "expected production or sandbox, found \"\(environmentName)\"")
        }
        let authentication: Authentication
        if a.has("token") {
            guard transport.capabilities.hasTokenAuthentication else {
                throw ConfigurationError(
                    file: file, key: "\(a.path).token",
                    problem:
                        "token authentication is for transport: \(Transport.tokenAuthenticationKinds); a \(transport.rawValue) app needs a certificate and key"
                )
            }
            if a.has("certificate") || a.has("key") {
                throw ConfigurationError(
                    file: file, key: "\(a.path)", problem: "give either token or certificate + key, not both")
            }
            let t = try a.section("token")
            authentication = .token(
                keyFile: try t.requiredString("key", "path of the team's signing key (.p8, PKCS#8 PEM)"),
                keyID: try t.requiredString("key_id", "the signing key's id (10 characters, from the developer account)"),
                teamID: try t.requiredString("team_id", "the team id that owns the key"))
            try t.finish()
        } else {
            authentication = .certificate(
                certificate: try a.requiredString(
                    "certificate",
                    transport.capabilities.hasTokenAuthentication
                        ? "path of the provider certificate (PEM), or a token section" : "path of the provider certificate (PEM)"),
                key: try a.requiredString("key", "path of the certificate's private key (PEM)"))
        }
        let connectionsKey = transport.configurationType.connectionsKey
        // Another kind's key for the same count is a mistake worth naming.
        let otherKeys = Transport.allCases.map { $0.configurationType.connectionsKey }.filter { $0 != connectionsKey }
        for wrong in otherKeys where a.has(wrong) {
            throw ConfigurationError(
                file: file, key: "\(a.path).\(wrong)", problem: "a \(transport.rawValue) app counts its connections in `\(connectionsKey)`")
        }
        let addressesKey = transport.configurationType.addressesKey
        var gateways: [GatewayAddress]?
        if let list = try a.strings(addressesKey) {
            gateways = try list.map { try address($0, file: file, key: "\(a.path).\(addressesKey)") }
        }
        var app = App(
            bundleID: bundleID, transport: transport, environment: environment, authentication: authentication,
            shards: a.has(connectionsKey) ? try a.int(connectionsKey, default: 1, range: 1...256) : nil, gateways: gateways)
        if transport.capabilities.hasFeedbackService, let f = try a.string("feedback_address") {
            app.feedbackAddress = try address(f, file: file, key: "\(a.path).feedback_address")
        }
        if let names = try a.strings("push_types") {
            app.pushTypes = try names.map { name in
                guard let type = APNsPushType(rawValue: name) else {
                    throw ConfigurationError(
                        file: file, key: "\(a.path).push_types",
                        problem:
                            "expected push types among \(APNsPushType.allCases.map(\.rawValue).joined(separator: ", ")), found \"\(name)\"")
                }
                return type
            }
            if let problem = app.pushTypeProblem {
                throw ConfigurationError(file: file, key: "\(a.path).push_types", problem: problem)
            }
        }
        if a.has("max_rate") { app.maxRate = try a.int("max_rate", default: 1, range: 1...1_000_000) }
        // The audience rules' settings (design §2.14).
        app.frequencyCaps = try FrequencyCapSettings.parse(a, file: file)
        app.quietHours = try QuietHoursSettings.parse(a, file: file)
        app.defaultTimeZone = try QuietHoursSettings.timeZone(a, "default_time_zone", file: file)
        try a.finish()
        return app
    }

    /// `http2.proxy` (a URL, or `none` for no proxy whatever the environment says) and `http2.no_proxy`
    /// (a list); each absent key is taken from the environment as curl reads it.
    private static func proxySettings(_ h: ConfigSection, file: String, environment: [String: String]) throws -> HTTPSProxySettings? {
        let expected = "expected http://[user:password@]host:port or none"
        let proxy: HTTPSProxy
        if let text = try h.string("proxy") {
            if text.lowercased() == "none" {
                _ = try h.strings("no_proxy")
                return nil
            }
            do throws(HTTPSProxy.URLError) {
                proxy = try HTTPSProxy(url: text, source: "http2.proxy")
            } catch {
                // The URL is not quoted: it may hold a password.
                throw ConfigurationError(file: file, key: "http2.proxy", problem: "\(error.problem) (\(expected); the value is not shown)")
            }
        } else if let (name, value) = HTTPSProxySettings.proxyVariable(in: environment) {
            do throws(HTTPSProxy.URLError) {
                proxy = try HTTPSProxy(url: value, source: name)
            } catch {
                throw ConfigurationError(
                    file: file, key: "http2.proxy",
                    problem: "absent, so the environment's \(name) is used, and it is not usable: \(error.problem) "
                        + "(fix \(name), or set http2.proxy to a URL or to none; the value is not shown)")
            }
        } else {
            _ = try h.strings("no_proxy")
            return nil
        }
        if let list = try h.strings("no_proxy") {
            return HTTPSProxySettings(proxy: proxy, noProxy: list, noProxySource: "http2.no_proxy")
        }
        if let (name, value) = HTTPSProxySettings.noProxyVariable(in: environment) {
            return HTTPSProxySettings(proxy: proxy, noProxy: HTTPSProxySettings.noProxyList(value), noProxySource: name)
        }
        return HTTPSProxySettings(proxy: proxy)
    }

    private static func address(_ text: String, file: String, key: String) throws -> GatewayAddress {
        guard let a = GatewayAddress(text) else {
            throw ConfigurationError(file: file, key: key, problem: "expected host:port, found \"\(text)\"")
        }
        return a
    }

    /// `kafka.outcomes_topic`, checked: a legal Kafka topic name (1…249 of `a-z A-Z 0-9 . _ -`, not `.`
    /// or `..`), and none of the topics the pipeline reads or dead-letters to — outcome messages written
    /// to the jobs topic would come back as jobs, each refused and settled with another outcome message.
    static func outcomesTopic(_ topic: String, kafka: Kafka, file: String) throws -> String {
        let key = "kafka.outcomes_topic"
        let legal = topic.utf8.allSatisfy { b in
            (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
                || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || b == UInt8(ascii: ".") || b == UInt8(ascii: "_")
                || b == UInt8(ascii: "-")
        }
        guard !topic.isEmpty, topic.utf8.count <= 249, legal, topic != ".", topic != ".." else {
            throw ConfigurationError(
                file: file, key: key,
                problem: "expected a Kafka topic name (1…249 characters of a-z, A-Z, 0-9, '.', '_', '-'), found \"\(topic)\"")
        }
        for (other, name) in [("kafka.jobs_topic", kafka.jobsTopic), ("kafka.dead_letter_topic", kafka.deadLetterTopic)]
            + (kafka.registrationsTopic.map { [("kafka.registrations_topic", $0)] } ?? [])
            + (kafka.priorityTopic.map { [("kafka.priority_topic", $0)] } ?? []) where name == topic
        {
            throw ConfigurationError(
                file: file, key: key, problem: "expected a topic of its own, found \(other)'s (\"\(topic)\")")
        }
        return topic
    }

    /// An app's provider certificate credentials (nil for a token-auth app), trusting its kind's `ca`.
    public func credentials(for app: App) -> ProviderCredentials? {
        guard case .certificate(let certificate, let key) = app.authentication else { return nil }
        return ProviderCredentials(
            app: app.bundleID, certificatePath: certificate, privateKeyPath: key,
            trustRootsPath: app.transport.configurationType.trustRoots(in: self))
    }

    /// The payload limit of a job for `app`: Apple's per push type on HTTP/2 (4096, 5120 for voip and for
    /// a broadcast), the configured `gateway.payload_limit` on the binary interface.
    public func payloadLimit(app: App?, pushType: APNsPushType?, broadcast: Bool = false) -> Int {
        app?.transport.capabilities.payloadLimit(pushType: pushType, broadcast: broadcast) ?? gateway.payloadLimit
    }

    /// The largest payload any app here takes: what the decoder lets through before the per-app check.
    public var largestPayloadLimit: Int {
        apps.map { $0.transport.capabilities.largestPayloadLimit ?? gateway.payloadLimit }.max() ?? gateway.payloadLimit
    }

    /// What `app`'s transport is built from (``TransportFactory``): its protocol's configuration, from
    /// the app's entry and the file's section of its kind (``ConfigurableTransport/make(for:in:)``).
    public func transportConfiguration(for app: App) throws -> any TransportConfiguration {
        try app.transport.configurationType.make(for: app, in: self)
    }

    /// `app`'s transport configuration as `type`, nil when the app is of another kind (tests, tools).
    public func transportConfiguration<T: TransportConfiguration>(for app: App, as type: T.Type) throws -> T? {
        guard app.transport.capabilities == type else { return nil }
        return try transportConfiguration(for: app) as? T
    }
}

extension PipelineConfiguration {
    /// Where `apns-pipeline channel` sends an app's channel management requests, and as whom.
    /// `environment` nil: the app's. The host is Apple's channel-management host of that environment,
    /// unless the pipeline file points the app at a server outside Apple's (the app's `hosts` or
    /// `http2.hosts` naming a host that does not end in `push.apple.com`: a simulator, a test double),
    /// which then serves channel management too (the HTTP/2 simulator does). The TLS trust
    /// (`http2.ca`), server name and request timeout are the app's HTTP/2 settings; the provider token
    /// is the app's `.p8` key, signed by the same cache as the sender's. Token authentication only:
    /// throws, naming the app, for a binary or certificate-auth app.
    public func channelManagementConfiguration(
        for app: App, environment: ChannelManagementConfiguration.Environment? = nil, file: String = "pipeline file"
    ) throws -> ChannelManagementConfiguration {
        guard app.transport.capabilities.hasTokenAuthentication, case .token(let keyFile, let keyID, let teamID) = app.authentication
        else {
            throw ConfigurationError(
                file: file, key: "apps[\(app.bundleID)]",
                problem: "channel management needs token authentication: give the app a token section (key, key_id, team_id) "
                    + "and transport: \(Transport.tokenAuthenticationKinds)")
        }
        let environment = environment ?? (app.environment == .sandbox ? .sandbox : .production)
        var host = ChannelManagementConfiguration.appleHost(environment)
        if let configured = (app.gateways ?? http2.hosts)?.first, !Self.isApple(configured.host) {
            host = configured
        }
        let tokens = try ProviderTokenCache.shared(keyFile: keyFile, keyID: keyID, teamID: teamID)
        var c = ChannelManagementConfiguration(app: app.bundleID, environment: environment, host: host, tokens: tokens)
        c.trustRootsPath = http2.ca
        // The configured name belongs to the configured hosts; Apple's hosts are checked by their own name.
        if !Self.isApple(host.host) { c.serverHostname = http2.serverHostname }
        c.requestTimeout = http2.requestTimeout * 2
        // Through the HTTPS proxy the provider API's connections take (corporate egress), unless NO_PROXY
        // lists the host.
        c.proxy = http2.proxy?.proxy(for: host.host)
        return c
    }

    /// Where `run` reads a broadcast channel's storage policy (`ChannelPolicies`, design §5.5): as
    /// `apns-pipeline channel get` would (the app's channel-management host, key, trust and proxy), the
    /// whole read bounded by `http2.request_timeout_s` (not twice it: the batch the broadcast came in waits
    /// for it).
    public func channelPolicyReadConfiguration(forApp bundleID: String) throws -> ChannelManagementConfiguration {
        guard let app = apps.first(where: { $0.bundleID == bundleID }) else {
            throw ConfigurationError(file: "pipeline file", key: "apps", problem: "no app \(bundleID)")
        }
        var c = try channelManagementConfiguration(for: app)
        c.requestTimeout = http2.requestTimeout
        c.connectTimeout = min(c.connectTimeout, http2.requestTimeout)
        return c
    }

    private static func isApple(_ host: String) -> Bool {
        let h = host.lowercased()
        return h == "push.apple.com" || h.hasSuffix(".push.apple.com")
    }
}
