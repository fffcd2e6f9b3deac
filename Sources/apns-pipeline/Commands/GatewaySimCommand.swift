import APNsProtocol
import ArgumentParser
import Foundation
import GatewaySimulator
import Logging

/// `apns-pipeline gateway-sim`: the binary gateway + feedback simulator, for tests, the demo, load
/// tests and rehearsals.
struct GatewaySimCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway-sim",
        abstract: "Run a binary APNs gateway and feedback service simulator over TLS, with scripted faults.",
        discussion: """
            Signals: SIGUSR1 prints the totals per status as JSON; SIGUSR2 makes every open gateway \
            connection answer status 10 (shutdown) naming its last processed notification, then close; \
            SIGTERM/SIGINT stop the simulator, flush records and print the totals.
            Fault file (JSON, every key optional): invalid_tokens, uninstalled_tokens (arrays of hex), \
            processing_error_rate, processing_error_at (array of positions), shutdown_every, drop_every, \
            slow_read_bytes, slow_read_interval_ms, refuse_connections_from_s, refuse_connections_for_s, \
            handshake_delay_ms, seed. Flags override the file.
            """
    )

    @Option(help: "Directory with server.pem, server.key and ca.pem (made by ops/certs).")
    var certs: String = ".run/certs"

    @Option(help: "Listening address.") var host: String = "127.0.0.1"
    @Option(help: "Gateway port (0: any free port).") var gatewayPort: Int = 2195
    @Option(help: "Feedback port (0: any free port).") var feedbackPort: Int = 2196
    @Option(help: "Write the bound ports here as JSON once listening.") var portsFile: String?
    @Option(help: "Append accepted notifications to this NDJSON file.") var records: String?
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

    func run() async throws {
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let signals = SignalWaiter(signals: [SIGINT, SIGTERM])
        var script = FaultScript()
        if let faults {
            do {
                script = try JSONDecoder().decode(FaultScript.self, from: Data(contentsOf: URL(fileURLWithPath: faults)))
            } catch {
                throw ValidationError("fault file \(faults): \(error)")
            }
        }
        if let invalidTokens { script.invalidTokens.formUnion(try Self.tokens(in: invalidTokens)) }
        if let uninstalledTokens { script.uninstalledTokens.formUnion(try Self.tokens(in: uninstalledTokens)) }
        if let processingErrorRate { script.processingErrorRate = processingErrorRate }
        if let shutdownEvery { script.shutdownEvery = shutdownEvery }
        if let dropEvery { script.dropEvery = dropEvery }
        if let seed { script.seed = seed }

        var config = SimulatorConfiguration(tls: .testCertificates(in: certs))
        config.host = host
        config.gatewayPort = gatewayPort
        config.feedbackPort = feedbackPort
        config.recordsPath = records
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

        signals.on(SIGUSR1) { Self.printTotals(simulator) }
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
        Self.printTotals(simulator)
    }

    static func printTotals(_ simulator: GatewaySimulator) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        if let data = try? encoder.encode(simulator.totals) {
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
