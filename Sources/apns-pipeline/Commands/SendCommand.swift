import APNsProtocol
import APNsTransport
import ArgumentParser
import Foundation
import Logging
import NIOPosix
import Pipeline
import Sender
import Synchronization
import TimeUnits
import Tools

/// `apns-pipeline send`: jobs (`docs/design.md §3.1` JSON, one per line) from a file or stdin, through one app's
/// transport, straight to the gateways — for operators, and for testing without Kafka or Redis.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send jobs (one JSON job per line, from a file or stdin) through the app's transport and print a summary.",
        discussion: "No dedup or suppression here (that is Redis's job in `run`): every valid line is sent."
    )

    @Argument(help: "File of jobs, one per line; '-' or nothing reads stdin.") var input: String = "-"
    @Option(help: "App bundle id (jobs for other apps are refused).") var app: String
    @Option(name: .customLong("protocol"), help: "http2 (Apple's provider API, the default) or binary (the retired legacy gateway).")
    var transport: String = "http2"
    @Option(help: "Provider certificate (PEM); with --protocol http2, or use --token-key.") var cert: String?
    @Option(help: "Its private key (PEM).") var key: String?
    @Option(help: "HTTP/2 token auth: the team's .p8 signing key (PKCS#8 PEM).") var tokenKey: String?
    @Option(help: "HTTP/2 token auth: the key's id (kid).") var keyID: String?
    @Option(help: "HTTP/2 token auth: the team id (iss).") var teamID: String?
    @Option(help: "HTTP/2: streams per connection at most.") var streams: Int = HTTP2TransportConfiguration.defaultStreamCap
    @Option(help: "CA bundle the gateway's certificate must chain to (default: system roots).") var ca: String?
    @Option(help: "Gateway host:port (repeatable; default: Apple's production host for the protocol).") var gateway: [String] = []
    @Option(help: "Name to verify on the gateway's certificate (default: each gateway's host).") var serverHostname: String?
    @Option(help: "Connections (shards).") var shards: Int = BinaryTransportConfiguration.defaultShards
    @Option(help: "Seconds without an error after which a notification counts as accepted.") var settleAfter: Double = ShardConfiguration()
        .settleAfter.seconds
    @Option(help: "Payload limit in bytes (default: 2048 binary, 4096 http2).") var payloadLimit: Int?
    @Flag(help: "Add the job id to each payload as `jid` (for the simulator's records).") var embedJobID = false
    @Option(
        help:
            "HTTP/2: an HTTPS proxy, http://[user:password@]host:port, or none (default: https_proxy / HTTPS_PROXY, with NO_PROXY). A password is better given in HTTPS_PROXY than on a command line."
    )
    var proxy: String?

    /// `--proxy`, else the environment's proxy as `run` reads it when `http2.proxy` is absent.
    func proxySettings(environment: [String: String]) throws -> HTTPSProxySettings? {
        let noProxy = HTTPSProxySettings.noProxyVariable(in: environment).map { HTTPSProxySettings.noProxyList($0.value) } ?? []
        let url: String
        let source: String
        if let proxy {
            if proxy.lowercased() == "none" { return nil }
            (url, source) = (proxy, "--proxy")
        } else if let (name, value) = HTTPSProxySettings.proxyVariable(in: environment) {
            (url, source) = (value, name)
        } else {
            return nil
        }
        do throws(HTTPSProxy.URLError) {
            return HTTPSProxySettings(proxy: try HTTPSProxy(url: url, source: source), noProxy: noProxy)
        } catch {
            // Not the URL: it may hold a password.
            throw ValidationError("\(source): \(error.problem)" + (source == "--proxy" ? "" : " (or --proxy none)"))
        }
    }

    func run() async throws {
        var logger = Logger(label: "apns.send", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .warning
        guard transport == "binary" || transport == "http2" else { throw ValidationError("--protocol: binary or http2") }
        let http2 = transport == "http2"
        var gateways = try gateway.map { g -> GatewayAddress in
            guard let a = GatewayAddress(g) else { throw ValidationError("--gateway \(g): expected host:port") }
            return a
        }
        if gateways.isEmpty { gateways = http2 ? HTTP2TransportConfiguration.production : [.production] }
        let summary = Summary()
        let refusal = FirstRefusal()
        let pool: any NotificationTransport
        do {
            let transportConfiguration: any TransportConfiguration
            if http2 {
                let auth: HTTP2Authentication
                if let tokenKey {
                    guard let keyID, let teamID else { throw ValidationError("--token-key needs --key-id and --team-id") }
                    auth = try .token(keyFile: tokenKey, keyID: keyID, teamID: teamID, trustRootsPath: ca)
                } else if let cert, let key {
                    auth = .certificate(ProviderCredentials(app: app, certificatePath: cert, privateKeyPath: key, trustRootsPath: ca))
                } else {
                    throw ValidationError("--protocol http2 needs --token-key (with --key-id, --team-id) or --cert and --key")
                }
                var configuration = HTTP2TransportConfiguration(app: app, authentication: auth, hosts: gateways)
                configuration.connections = shards
                configuration.streamCap = streams
                configuration.serverHostname = serverHostname
                configuration.proxy = try proxySettings(environment: ProcessInfo.processInfo.environment)
                // A proxy refusing our credentials, a server without h2, a certificate that does not
                // verify: `send` stops at once with the reason rather than retrying for ever.
                configuration.onConnectRefused = { refusal.set($0) }
                transportConfiguration = configuration
            } else {
                guard let cert, let key else { throw ValidationError("--protocol binary needs --cert and --key") }
                var shard = ShardConfiguration()
                shard.settleAfter = .seconds(settleAfter)
                transportConfiguration = BinaryTransportConfiguration(
                    credentials: ProviderCredentials(app: app, certificatePath: cert, privateKeyPath: key, trustRootsPath: ca),
                    gateways: gateways, shards: shards, shard: shard, serverHostname: serverHostname)
            }
            // Built as `run` builds an app's transport (`TransportFactory`).
            pool = try TransportFactory(group: MultiThreadedEventLoopGroup.singleton, logger: logger).make(
                transportConfiguration, onOutcomes: { summary.add($0) })
        } catch let error as ValidationError {
            throw error
        } catch {
            throw ValidationError("\(error)")
        }
        let payloadLimit = self.payloadLimit ?? (http2 ? 4096 : 2048)

        let handle: FileHandle
        if input == "-" {
            handle = .standardInput
        } else {
            guard let h = FileHandle(forReadingAtPath: input) else { throw ValidationError("cannot read \(input)") }
            handle = h
        }
        // Broadcasts go over HTTP/2 with token authentication only (design §3.1).
        let (app, embedJobID, canBroadcast) = (app, embedJobID, http2 && tokenKey != nil)
        // A broadcast's apns-expiration follows its channel's storage policy, read once per channel from
        // the channel-management API of the gateway's environment (design §5.5).
        let policies = canBroadcast ? channelPolicies(gateway: gateways[0], logger: logger) : nil
        let work = Task {
            let lines = JobLineDecoder(
                app: app, payloadLimit: payloadLimit, jobIDKey: embedJobID ? "jid" : nil, binary: !http2, canBroadcast: canBroadcast)
            try await Self.send(from: handle, decoder: lines, policies: policies, through: pool, summary: summary)
            return summary.render(drained: await pool.drainAndClose())
        }
        // The sending waits for connections that a refused connect leaves waiting; the refusal ends the
        // command instead (ArgumentParser prints it as one line and exits 1; the process's exit ends the rest).
        if let refused = await refusal.race(work) { throw refused }
        print(try await work.value)
    }

    /// Every line of `handle` decoded and handed to the transport, in batches of 1000 (refused lines
    /// counted in `summary`); a broadcast's expiration from its channel's policy when it needs one.
    static func send(
        from handle: FileHandle, decoder lines: JobLineDecoder, policies: ChannelPolicies?, through pool: any NotificationTransport,
        summary: Summary
    ) async throws {
        var batch: [PushNotification] = []
        batch.reserveCapacity(1000)
        var lineNumber = 0
        var reader = LineReader(handle: handle)
        while let decoded = try reader.next({ line -> JobLineDecoder.Line? in
            lineNumber += 1
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return nil }
            switch lines.line(line, now: UInt32(Date().timeIntervalSince1970)) {
            case .success(let decoded):
                return decoded
            case .failure(let refusal):
                summary.refuse(line: lineNumber, reason: refusal.reason, detail: refusal.detail)
                return nil
            }
        }) {
            guard var n = decoded?.notification else { continue }
            if let request = decoded?.broadcast, request.needsChannelPolicy, let policies, let channel = n.channel {
                switch await request.expiration(app: n.app, channel: channel, policies: policies, now: UInt32(Date().timeIntervalSince1970))
                {
                case .success(let expiry): n.expiry = expiry
                case .failure(let error):
                    let refusal = lines.refusal(error)
                    summary.refuse(line: lineNumber, reason: refusal.reason, detail: refusal.detail)
                    continue
                }
            }
            batch.append(n)
            if batch.count >= 1000 {
                summary.sent(batch.count)
                try await pool.send(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty {
            summary.sent(batch.count)
            try await pool.send(batch)
        }
    }

    /// The first connect refused for good (`HTTP2ConnectRefusal`), set from an event loop, and a race of
    /// it against the command's work: both ends go into one stream, and the first one counts.
    struct FirstRefusal: Sendable {
        private let ends: AsyncStream<HTTP2ConnectRefusal?>
        private let continuation: AsyncStream<HTTP2ConnectRefusal?>.Continuation

        init() {
            (ends, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(1))
        }

        func set(_ refusal: HTTP2ConnectRefusal) { continuation.yield(refusal) }

        /// Waits for `work` to end or for a refusal, whichever comes first; returns the refusal if one came
        /// first (a refusal after the work ended changes nothing). Does not wait for the work after a
        /// refusal: the command ends with it, and the process's exit ends the work.
        func race<T: Sendable>(_ work: Task<T, any Error>) async -> HTTP2ConnectRefusal? {
            Task { [continuation] in
                _ = await work.result
                continuation.yield(nil)
            }
            for await end in ends { return end }
            return nil
        }
    }

    /// Where `send` reads broadcast channels' storage policies: Apple's channel-management host of the
    /// gateway's environment (the sandbox's for the sandbox host, else production's), or the gateway itself
    /// when it is not Apple's (the HTTP/2 simulator serves both), with the token key, CA and server name
    /// given for the gateway.
    func channelPolicies(gateway: GatewayAddress, logger: Logger) -> ChannelPolicies {
        let app = self.app
        let (tokenKey, keyID, teamID, ca, serverHostname) = (self.tokenKey, self.keyID, self.teamID, self.ca, self.serverHostname)
        return ChannelPolicies(
            logger: logger,
            read: ChannelPolicies.apnsReader(group: MultiThreadedEventLoopGroup.singleton, logger: logger) { _ in
                guard let tokenKey, let keyID, let teamID else { throw ValidationError("--token-key needs --key-id and --team-id") }
                let host = gateway.host.lowercased()
                let apple = host == "push.apple.com" || host.hasSuffix(".push.apple.com")
                let environment: ChannelManagementConfiguration.Environment = host.contains("sandbox") ? .sandbox : .production
                var c = ChannelManagementConfiguration(
                    app: app, environment: environment, host: apple ? ChannelManagementConfiguration.appleHost(environment) : gateway,
                    tokens: try ProviderTokenCache.shared(keyFile: tokenKey, keyID: keyID, teamID: teamID))
                c.trustRootsPath = ca
                if !apple { c.serverHostname = serverHostname }
                return c
            })
    }

    /// Lines of a file (or stdin), read in 1 MiB chunks straight into one buffer (`read(2)`: no `Data`
    /// and no copy per chunk). Each line is lent to the caller in place (no copy, no allocation per
    /// line), and the buffer is only compacted when it is refilled: removing each line from the front
    /// of the buffer moved the rest of the megabyte per line (13% of `send --protocol http2`'s CPU).
    struct LineReader {
        static let chunk = 1 << 20
        /// Held (not just its descriptor): a file's handle closes the descriptor when it is freed.
        let handle: FileHandle
        /// Bytes read live in `buffer[0..<end]`; the rest is room for the next read.
        var buffer = [UInt8](repeating: 0, count: LineReader.chunk)
        var end = 0
        /// Where the unread part starts.
        var start = 0
        /// Where the search for the next newline resumes (everything in start..<scanned has none).
        var scanned = 0
        var done = false

        init(handle: FileHandle) { self.handle = handle }

        struct ReadError: Error, CustomStringConvertible {
            var errno: Int32
            var description: String { "cannot read the input: \(String(cString: strerror(errno)))" }
        }

        /// `body` applied to the next line (without its newline), or nil at the end of the input.
        mutating func next<R>(_ body: (UnsafeRawBufferPointer) -> R) throws(ReadError) -> R? {
            while true {
                let (start, scanned, end) = (self.start, self.scanned, self.end)
                let found = buffer.withUnsafeBytes { raw -> (line: Range<Int>, result: R)? in
                    guard scanned < end, let hit = memchr(raw.baseAddress! + scanned, 0x0A, end - scanned) else { return nil }
                    let nl = raw.baseAddress!.distance(to: UnsafeRawPointer(hit))
                    return (start..<nl, body(UnsafeRawBufferPointer(rebasing: raw[start..<nl])))
                }
                if let found {
                    self.start = found.line.upperBound + 1
                    self.scanned = self.start
                    return found.result
                }
                self.scanned = end
                if done {
                    if start == end { return nil }
                    self.start = end
                    return buffer.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
                }
                try refill()
            }
        }

        /// Moves the unread bytes to the front (once per chunk, not once per line), makes room for a
        /// chunk (a line longer than the buffer doubles it), and reads.
        private mutating func refill() throws(ReadError) {
            if start > 0 {
                let (from, count) = (start, end - start)
                buffer.withUnsafeMutableBytes { raw in
                    if count > 0 { memmove(raw.baseAddress!, raw.baseAddress! + from, count) }
                }
                end = count
                scanned -= from
                start = 0
            }
            if buffer.count - end < Self.chunk / 2 {
                buffer.append(contentsOf: repeatElement(0, count: max(Self.chunk, buffer.count)))
            }
            while true {
                let (fd, end) = (handle.fileDescriptor, self.end)
                let n = buffer.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress! + end, raw.count - end) }
                if n > 0 {
                    self.end += n
                    return
                }
                if n == 0 {
                    done = true
                    return
                }
                if errno != EINTR { throw ReadError(errno: errno) }
            }
        }
    }

    final class Summary: Sendable {
        struct State {
            var sent = 0
            /// Outcomes by kind: accepted, rejected, dead-lettered (plain counters: a dictionary update per
            /// outcome showed in the profile).
            var accepted = 0
            var rejected = 0
            var deadLettered = 0
            /// Refusals by the gateway's code (binary status, HTTP/2 reason) and what they meant.
            var codes: [String: Int] = [:]
            var events = SenderEvents()
            var refused: [String: Int] = [:]
            var examples: [String] = []
        }
        let state = Mutex(State())

        func sent(_ count: Int) { state.withLock { $0.sent += count } }
        func add(_ b: OutcomeBatch) {
            state.withLock { s in
                for o in b.outcomes {
                    guard let rejection = o.rejection else {
                        s.accepted += 1
                        continue
                    }
                    if o.kind == .rejected { s.rejected += 1 } else { s.deadLettered += 1 }
                    s.codes["\(o.code ?? "-") (\(rejection.reason))", default: 0] += 1
                    if s.examples.count < 10 {
                        s.examples.append("  \(o.kind.rawValue) \(o.jobID) \(o.notification.recipient): \(rejection.reason)")
                    }
                }
                s.events += b.events
            }
        }
        func refuse(line: Int, reason: String, detail: String) {
            state.withLock { s in
                s.refused[reason, default: 0] += 1
                if s.examples.count < 10 { s.examples.append("  line \(line): \(reason): \(detail)") }
            }
        }
        func render(drained: [DrainOutcome]) -> String {
            state.withLock { s in
                var out = ["sent \(s.sent)"]
                for (k, n) in [(OutcomeKind.accepted, s.accepted), (.rejected, s.rejected), (.deadLettered, s.deadLettered)] {
                    out.append("  \(k.rawValue): \(n)")
                }
                for (code, n) in s.codes.sorted(by: { $0.key < $1.key }) { out.append("  \(code): \(n)") }
                out.append("refused before sending: \(s.refused.values.reduce(0, +))")
                for (r, n) in s.refused.sorted(by: { $0.key < $1.key }) { out.append("  \(r): \(n)") }
                out.append(
                    "replayed \(s.events.replayed), ambiguous \(s.events.ambiguous), retried \(s.events.retried), reconnects \(s.events.reconnects), sequence_unknown \(s.events.sequenceUnknown)"
                )
                out.append("drain: \(drained.map { "\($0)" }.joined(separator: ", "))")
                if !s.examples.isEmpty {
                    out.append("examples:")
                    out.append(contentsOf: s.examples)
                }
                return out.joined(separator: "\n")
            }
        }
    }
}
