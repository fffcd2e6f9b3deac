import APNsProtocol
import APNsTransport
import ArgumentParser
import Foundation
import GatewaySimulator
import HTTP2Simulator
import Logging

/// `apns-pipeline gateway-sim`: the binary gateway + feedback simulator (`--protocol binary`, the
/// default) or the HTTP/2 provider API simulator (`--protocol http2`), for tests, the demo, load tests
/// and rehearsals.
struct GatewaySimCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway-sim",
        abstract: "Run an APNs simulator over TLS (binary gateway + feedback, or the HTTP/2 provider API), with scripted faults.",
        discussion: """
            --protocol http2: Apple's HTTP/2 provider API on --port (ALPN h2), certificate auth (client \
            certificate from the CA in --certs) or token auth (--token-key KEYID:TEAMID:FILE, repeatable; FILE \
            is a P-256 public key or the .p8 private key). SIGUSR1 prints totals per status and reason; SIGUSR2 \
            sends GOAWAY {"reason":"Shutdown"} on every connection. HTTP/2 fault file keys: the binary ones \
            below (processing_error_rate = 500 rate, uninstalled_tokens = 410 Unregistered) plus \
            unregistered_tokens ({hex: ms}), unregistered_timestamp_ms, expired_tokens, token_topics ({hex: bundle}), \
            too_many_requests_per_token, too_many_requests_window_s, too_many_requests_rate (--too-many-requests-rate), \
            internal_server_error_rate, service_unavailable_rate, shutdown_interval_s, response_delay_ms, \
            response_delay_max_ms, reset_stream_rate (RST_STREAM INTERNAL_ERROR instead of an answer), \
            never_answer_tokens (hex: streams left unanswered), unlisted_reason_tokens ({hex: text}: 400 with a \
            reason Apple does not document), rates_from_s and rates_for_s (the 429/500/503/reset \
            rates apply only in this window, seconds after the first request: a storm), channel_limit (channels per \
            app, default 10000), key_environments ({key id: sandbox|production}: a token of such a key is answered \
            403 BadEnvironmentKeyIdInToken by a simulator of the other environment; --sandbox makes it the \
            sandbox), channel_subscribers (devices per channel created, default 3). It also serves channel management \
            (/1/apps/<bundle id>/channels and all-channels, as Apple's api-manage-broadcast hosts) and broadcasts \
            (POST /4/broadcasts/apps/<bundle id> with apns-channel-id: one request recorded as reaching the \
            channel's subscribers) on the same port. See docs/testing.md §2, "The HTTP/2 simulator".
            Signals: SIGUSR1 prints the totals per status as JSON; SIGUSR2 makes every open gateway \
            connection answer status 10 (shutdown) naming its last processed notification, then close; \
            SIGTERM/SIGINT stop the simulator, flush records and print the totals.
            Fault file (JSON, every key optional): invalid_tokens, uninstalled_tokens (arrays of hex), \
            processing_error_rate, processing_error_at (array of positions), shutdown_every, drop_every, \
            slow_read_bytes, slow_read_interval_ms, refuse_connections_from_s, refuse_connections_for_s, \
            handshake_delay_ms, seed. Flags override the file.
            """
    )

    enum WireProtocol: String, ExpressibleByArgument, CaseIterable { case binary, http2 }

    @Option(
        name: .customLong("protocol"), help: "binary (gateway + feedback: the legacy binary interface) or http2 (Apple's provider API).")
    var wireProtocol: WireProtocol = .binary

    @Option(help: "Directory with server.pem, server.key and ca.pem (made by ops/certs).")
    var certs: String = ".run/certs"

    @Option(help: "Listening address.") var host: String = "127.0.0.1"
    @Option(help: "Gateway port (0: any free port).") var gatewayPort: Int = 2195
    @Option(help: "Feedback port (0: any free port).") var feedbackPort: Int = 2196
    @Option(help: "Write the bound ports here as JSON once listening.") var portsFile: String?
    @Option(help: "Append accepted notifications to this NDJSON file.") var records: String?
    @Flag(help: "Write each record as it is made rather than every 50 ms, so a kill -9 of the simulator loses none it answered (slower).")
    var recordsSync = false
    @Option(help: "Payload limit of command 2, bytes.") var payloadLimit: Int = 2048
    @Option(help: "Payload limit of commands 0 and 1, bytes.") var legacyPayloadLimit: Int = 2048
    @Option(help: "Event-loop threads.") var threads: Int = 1

    @Option(help: "Fault script, JSON (see below).") var faults: String?
    @Option(help: "File of tokens (one hex per line) answered with status 8.") var invalidTokens: String?
    @Option(help: "File of tokens whose app is uninstalled (accepted; feedback entry queued).") var uninstalledTokens: String?
    @Option(help: "Chance 0…1 of status 1 per notification.") var processingErrorRate: Double?
    @Option(help: "Status 10 every this many accepted notifications (whole simulator).") var shutdownEvery: Int?
    @Option(help: "Abrupt close (no response) every this many accepted (whole simulator).") var dropEvery: Int?
    @Option(help: "Status 10 on every open connection every this many seconds.") var shutdownIntervalSeconds: Double?
    @Option(help: "Seed for the random faults.") var seed: UInt64?

    // HTTP/2 only.
    @Option(help: "HTTP/2: port (0: any free port; Apple's are 443 and 2197).") var port: Int = 2197
    @Option(help: "HTTP/2: a token key, KEYID:TEAMID:FILE (P-256 public key PEM or .p8 private key); repeatable.")
    var tokenKey: [String] = []
    @Option(help: "HTTP/2: SETTINGS_MAX_CONCURRENT_STREAMS after the first authenticated request.")
    var maxConcurrentStreams: Int = 1000
    @Option(
        help:
            "HTTP/2: SETTINGS_MAX_CONCURRENT_STREAMS until then (Apple: 1; a load generator that opens many streams at once, such as h2load, needs more)."
    )
    var initialMaxConcurrentStreams: Int = 1
    @Option(help: "HTTP/2: oldest acceptable token iat, seconds.") var tokenMaxAgeSeconds: Int64 = 3600
    @Option(help: "HTTP/2: 429 TooManyProviderTokenUpdates when a connection changes token sooner than this, seconds.")
    var tokenRefreshIntervalSeconds: Double = 1200
    @Option(help: "HTTP/2: file of tokens (hex per line) answered 410 ExpiredToken.") var expiredTokens: String?
    @Option(help: "HTTP/2: the 410 timestamp (ms) of uninstalled tokens (default: start time).")
    var unregisteredTimestampMs: Int64?
    @Option(help: "HTTP/2: 429 TooManyRequests beyond this many requests per token per window.")
    var tooManyRequestsPerToken: Int?
    @Option(help: "HTTP/2: chance 0…1 of 429 TooManyRequests, whatever the token (too_many_requests_rate).")
    var tooManyRequestsRate: Double?
    @Option(help: "HTTP/2: chance 0…1 of 500 InternalServerError (also --processing-error-rate).")
    var internalServerErrorRate: Double?
    @Option(help: "HTTP/2: chance 0…1 of 503 ServiceUnavailable.") var serviceUnavailableRate: Double?
    @Option(help: "HTTP/2: every response waits this long, ms.") var responseDelayMs: Int?
    @Option(help: "HTTP/2: plus a random 0…this many ms.") var responseDelayMaxMs: Int?
    @Flag(help: "HTTP/2: answer as the sandbox (development) environment: an apns-unique-id on every answer.") var sandbox = false
    @Option(help: "HTTP/2: channels per app (channel management) before 400 CannotCreateChannelConfig (Apple: 10000).")
    var channelLimit: Int?
    @Option(
        help:
            "HTTP/2: devices subscribed to each channel created (a broadcast on it is recorded as one request reaching them; default 3)."
    )
    var channelSubscribers: Int?

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        if wireProtocol == .http2 { return try await runHTTP2() }
        let signals = SignalWaiter(signals: [SIGINT, SIGTERM])
        var script = try faultScript(FaultScript())
        if let processingErrorRate { script.processingErrorRate = processingErrorRate }

        var config = SimulatorConfiguration(tls: .testCertificates(in: certs))
        config.host = host
        config.gatewayPort = gatewayPort
        config.feedbackPort = feedbackPort
        config.recordsPath = records
        config.recordsSynchronous = recordsSync
        config.limits = PayloadLimits(command2: payloadLimit, legacy: legacyPayloadLimit)
        config.faults = script
        config.threads = threads

        let simulator = try GatewaySimulator(configuration: config)
        try await simulator.start()
        let ports = simulator.ports
        let line = #"{"gateway":\#(ports.gateway),"feedback":\#(ports.feedback)}"#
        print(line)
        if let portsFile {
            try Data((line + "\n").utf8).write(to: URL(fileURLWithPath: portsFile), options: .atomic)
        }

        signals.on(SIGUSR1) { Self.printTotals(simulator.totals) }
        signals.on(SIGUSR2) { simulator.shutdownConnections() }
        var ticker: Task<Void, Never>?
        if let seconds = shutdownIntervalSeconds {
            ticker = Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(seconds))
                    simulator.shutdownConnections()
                }
            }
        }
        _ = await signals.wait()
        ticker?.cancel()
        try await simulator.stop()
        Self.printTotals(simulator.totals)
    }

    func runHTTP2() async throws {
        let signals = SignalWaiter(signals: [SIGINT, SIGTERM])
        var script = try faultScript(HTTP2FaultScript())
        if let expiredTokens { script.expiredTokens.formUnion(try Self.tokens(in: expiredTokens)) }
        if let unregisteredTimestampMs { script.unregisteredTimestampMillis = unregisteredTimestampMs }
        if let tooManyRequestsPerToken { script.tooManyRequestsPerToken = tooManyRequestsPerToken }
        if let tooManyRequestsRate { script.tooManyRequestsRate = tooManyRequestsRate }
        if let rate = internalServerErrorRate ?? processingErrorRate { script.internalServerErrorRate = rate }
        if let serviceUnavailableRate { script.serviceUnavailableRate = serviceUnavailableRate }
        if let shutdownIntervalSeconds { script.shutdownIntervalSeconds = shutdownIntervalSeconds }
        if let responseDelayMs { script.responseDelayMillis = responseDelayMs }
        if let responseDelayMaxMs { script.responseDelayMaxMillis = responseDelayMaxMs }
        if let channelLimit { script.channelLimit = channelLimit }
        if let channelSubscribers {
            guard channelSubscribers >= 0 else { throw ValidationError("--channel-subscribers must be ≥ 0, got \(channelSubscribers)") }
            script.channelSubscribers = channelSubscribers
        }

        var config = HTTP2SimulatorConfiguration(tls: .testCertificates(in: certs))
        config.host = host
        config.port = port
        config.recordsPath = records
        config.recordsSynchronous = recordsSync
        config.faults = script
        config.threads = threads
        config.maxConcurrentStreams = maxConcurrentStreams
        config.initialMaxConcurrentStreams = initialMaxConcurrentStreams
        config.tokenMaxAgeSeconds = tokenMaxAgeSeconds
        config.tokenRefreshIntervalSeconds = tokenRefreshIntervalSeconds
        config.sandbox = sandbox
        for spec in tokenKey {
            let parts = spec.split(separator: ":", maxSplits: 2).map(String.init)
            guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ValidationError("--token-key \(spec): expected KEYID:TEAMID:FILE")
            }
            do {
                config.tokenKeys[parts[0]] = .init(teamID: parts[1], publicKey: try ProviderTokenVerifier.publicKey(fromFile: parts[2]))
            } catch {
                throw ValidationError("--token-key \(parts[0]): \(error)")
            }
        }

        let simulator = try HTTP2Simulator(configuration: config)
        try await simulator.start()
        let line = #"{"http2":\#(simulator.port)}"#
        print(line)
        if let portsFile {
            try Data((line + "\n").utf8).write(to: URL(fileURLWithPath: portsFile), options: .atomic)
        }
        signals.on(SIGUSR1) { Self.printTotals(simulator.totals) }
        signals.on(SIGUSR2) { simulator.shutdownConnections() }
        _ = await signals.wait()
        try await simulator.stop()
        Self.printTotals(simulator.totals)
    }

    /// The fault file (`--faults`) read as the script of the protocol simulated, with the flags both
    /// simulators share applied on top (flags win): one place reads the file and the token lists.
    func faultScript<Script: SharedFaultFlags>(_ empty: Script) throws -> Script {
        var script = empty
        if let faults {
            do {
                script = try JSONDecoder().decode(Script.self, from: Data(contentsOf: URL(fileURLWithPath: faults)))
            } catch {
                throw ValidationError("fault file \(faults): \(error)")
            }
        }
        if let invalidTokens { script.invalidTokens.formUnion(try Self.tokens(in: invalidTokens)) }
        if let uninstalledTokens { script.uninstalledTokens.formUnion(try Self.tokens(in: uninstalledTokens)) }
        if let shutdownEvery { script.shutdownEvery = shutdownEvery }
        if let dropEvery { script.dropEvery = dropEvery }
        if let seed { script.seed = seed }
        return script
    }

    static func printTotals(_ totals: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        if let data = try? encoder.encode(totals) {
            FileHandle.standardOutput.write(data + Data("\n".utf8))
        }
    }

    static func tokens(in path: String) throws -> [String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ValidationError("cannot read token file \(path)")
        }
        var out: [String] = []
        for (n, line) in text.split(whereSeparator: \.isNewline).enumerated() {
            let t = line.trimmingCharacters(in: .whitespaces)
            if t.isEmpty { continue }
            do { out.append(try DeviceToken(hex: t).hex) } catch {
                throw ValidationError("\(path):\(n + 1): \(error)")
            }
        }
        return out
    }
}

/// The fault-script fields both simulators have under the same keys and flags.
protocol SharedFaultFlags: Decodable {
    var invalidTokens: Set<String> { get set }
    var uninstalledTokens: Set<String> { get set }
    var shutdownEvery: Int? { get set }
    var dropEvery: Int? { get set }
    var seed: UInt64 { get set }
}

extension FaultScript: SharedFaultFlags {}
extension HTTP2FaultScript: SharedFaultFlags {}
