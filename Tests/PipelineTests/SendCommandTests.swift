import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import HTTP2Simulator
import TestSupport
import Testing

/// `apns-pipeline send` as a real process against the HTTP/2 simulator over TLS with token auth: a file
/// of campaign lines (one shared payload), blank lines, lines that must be refused and a last line
/// without a newline. Every valid line is sent once, every refusal counted with its reason.
@Suite struct SendCommandTests {
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func sendsEveryValidLineOnceAndCountsEveryRefusal() async throws {
        let invalid = token(7)
        var faults = HTTP2FaultScript()
        faults.invalidTokens = [invalid.hex]
        var config = HTTP2SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
        config.faults = faults
        config.keepRecordsInMemory = true
        let key = try ProviderTokenVerifier.publicKey(fromFile: TestCertificates.tokenKeyPath)
        config.tokenKeys = [TestCertificates.tokenKeyID: .init(teamID: TestCertificates.tokenTeamID, publicKey: key)]
        let sim = try HTTP2Simulator(configuration: config)
        try await sim.start()

        let payload = #"{"aps":{"alert":{"title":"Spring sale","body":"20% off"},"sound":"default"}}"#
        func line(_ id: String, _ t: DeviceToken, app: String = shop, payload: String = payload) -> String {
            #"{"id":"\#(id)","app":"\#(app)","token":"\#(t.hex)","payload":\#(payload),"expiry":0}"#
        }
        var lines = (0..<300).map { line("c:\($0)", token($0)) }
        lines.insert("", at: 10)
        lines.insert(" \t\r", at: 20)
        lines.insert(#"{"id":"bad:token","app":"\#(shop)","token":"0a1b","payload":\#(payload)}"#, at: 30)
        lines.insert(line("bad:app", token(400), app: "com.example.other"), at: 40)
        lines.insert(#"{"id":"bad:json","#, at: 50)
        lines.insert(line("c:own", token(401), payload: #"{"aps":{"alert":"hello"}}"#), at: 60)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("send-\(UUID().uuidString).ndjson")
        // No newline after the last line: it is a line all the same.
        try lines.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }

        let (status, out, err) = try await PipelineProcess.command([
            "send", "--protocol", "http2", "--app", shop, "--token-key", TestCertificates.tokenKeyPath,
            "--key-id", TestCertificates.tokenKeyID, "--team-id", TestCertificates.tokenTeamID,
            "--ca", "\(TestCertificates.directory)/ca.pem", "--gateway", "127.0.0.1:\(sim.port)", "--server-hostname", "localhost",
            "--shards", "2", "--embed-job-id", file.path,
        ])
        try await sim.stop()
        #expect(status == 0, "\(err)")
        for expected in [
            "sent 301", "  accepted: 300", "  rejected: 1", "  dead_lettered: 0", "  BadDeviceToken (invalid-token): 1",
            "refused before sending: 3", "  app-mismatch: 1", "  invalid-json: 1", "  invalid-token: 1",
        ] {
            #expect(out.split(separator: "\n").contains { $0 == expected }, "missing \"\(expected)\" in:\n\(out)")
        }
        #expect(
            out.contains("line 31: invalid-token") && out.contains("line 41: app-mismatch") && out.contains("line 51: invalid-json"),
            "\(out)")
        // Each accepted job reached the simulator once, with its own id embedded in the shared payload.
        let recorded = sim.records.reduce(into: [String: Int]()) { counts, r in
            if let id = r.jobID { counts[id, default: 0] += 1 }
        }
        let accepted = Set((0..<300).filter { $0 != 7 }.map { "c:\($0)" } + ["c:own"])
        #expect(accepted.allSatisfy { recorded[$0] == 1 }, "\(accepted.filter { recorded[$0] != 1 }.sorted().prefix(10))")
        #expect(recorded["bad:app"] == nil && recorded["bad:token"] == nil)
    }

    /// Issue 31: `send` speaks HTTP/2 without `--protocol`; priority 1 and a Live Activity update go out
    /// as such, a Live Activity that breaks Apple's rules is refused before sending with its reason.
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func sendDefaultsToHTTP2WithPriorityOneAndLiveActivities() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let update = #"{"aps":{"event":"update","timestamp":1767225600,"content-state":{"home":1}}}"#
        let lines = [
            #"{"id":"p1","app":"\#(shop)","token":"\#(token(1).hex)","payload":{"aps":{"alert":"later"}},"priority":1}"#,
            #"{"id":"la","app":"\#(shop)","token":"\#(token(2).hex)","payload":\#(update),"push_type":"liveactivity","priority":5}"#,
            #"{"id":"bad-la","app":"\#(shop)","token":"\#(token(3).hex)","payload":{"aps":{"event":"update"}},"push_type":"liveactivity"}"#,
        ]
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("send-\(UUID().uuidString).ndjson")
        try lines.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }

        let (status, out, err) = try await PipelineProcess.command([
            "send", "--app", shop, "--token-key", TestCertificates.tokenKeyPath,
            "--key-id", TestCertificates.tokenKeyID, "--team-id", TestCertificates.tokenTeamID,
            "--ca", "\(TestCertificates.directory)/ca.pem", "--gateway", "127.0.0.1:\(sim.port)", "--server-hostname", "localhost",
            "--embed-job-id", file.path,
        ])
        try await sim.stop()
        #expect(status == 0, "\(err)")
        for expected in ["sent 2", "  accepted: 2", "refused before sending: 1", "  invalid-live-activity: 1"] {
            #expect(out.split(separator: "\n").contains { $0 == expected }, "missing \"\(expected)\" in:\n\(out)")
        }
        let records = Dictionary(uniqueKeysWithValues: sim.records.map { ($0.jobID ?? "", $0) })
        #expect(records["p1"]?.priority == 1)
        #expect(records["la"]?.pushType == "liveactivity" && records["la"]?.priority == 5)
    }

    /// Issue 31 (4): Apple, "APNs device tokens are of variable length. Do not hard-code their size."
    /// Over HTTP/2 40-, 8- and 100-byte tokens are sent as their hex; over the binary interface (the
    /// real binary simulator, over TLS) the 40-byte token's line is refused before sending
    /// (`token-size-needs-http2`) and the 32-byte one is sent.
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func tokensOfOtherSizesGoOverHTTP2AndAreRefusedForTheBinaryInterface() async throws {
        let long = String(repeating: "c3", count: 40)
        let short = "fedcba9876543210"
        // 100 bytes: a `:path` of 210 bytes, past HPACK's one-byte string length (127).
        let longest = String(repeating: "d4", count: 100)
        func line(_ id: String, _ hex: String) -> String {
            #"{"id":"\#(id)","app":"\#(shop)","token":"\#(hex)","payload":{"aps":{"alert":"hi"}}}"#
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("send-\(UUID().uuidString).ndjson")
        try [line("long", long.uppercased()), line("short", short), line("std", token(5).hex), line("longest", longest)]
            .joined(separator: "\n")
            .write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }

        let h2 = try await HTTP2Simulator.startedForTests()
        let (status, out, err) = try await PipelineProcess.command([
            "send", "--app", shop, "--token-key", TestCertificates.tokenKeyPath,
            "--key-id", TestCertificates.tokenKeyID, "--team-id", TestCertificates.tokenTeamID,
            "--ca", "\(TestCertificates.directory)/ca.pem", "--gateway", "127.0.0.1:\(h2.port)", "--server-hostname", "localhost",
            "--embed-job-id", file.path,
        ])
        try await h2.stop()
        #expect(status == 0, "\(err)")
        #expect(out.split(separator: "\n").contains { $0 == "  accepted: 4" }, "\(out)")
        let sent = Dictionary(uniqueKeysWithValues: h2.records.map { ($0.jobID ?? "", $0.token) })
        #expect(sent == ["long": long, "short": short, "std": token(5).hex, "longest": longest])

        var config = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
        config.keepRecordsInMemory = true
        let binary = try GatewaySimulator(configuration: config)
        try await binary.start()
        let (bStatus, bOut, bErr) = try await PipelineProcess.command([
            "send", "--protocol", "binary", "--app", shop, "--cert", TestCertificates.pem(shop), "--key", TestCertificates.key(shop),
            "--ca", "\(TestCertificates.directory)/ca.pem", "--gateway", "127.0.0.1:\(binary.ports.gateway)",
            "--server-hostname", "localhost", "--settle-after", "0.5", "--embed-job-id", file.path,
        ])
        try await binary.stop()
        #expect(bStatus == 0, "\(bErr)")
        for expected in ["sent 1", "  accepted: 1", "refused before sending: 3", "  token-size-needs-http2: 3"] {
            #expect(bOut.split(separator: "\n").contains { $0 == expected }, "missing \"\(expected)\" in:\n\(bOut)")
        }
        #expect(bOut.contains("line 1: token-size-needs-http2"), "\(bOut)")
        #expect(binary.records.compactMap(\.jobID) == ["std"])
    }
}

/// Issue 31 (6): `send` through an HTTPS proxy named by the environment (`HTTPS_PROXY`, as curl), a real
/// tinyproxy with Basic auth; the password never reaches the output.
@Suite(.enabled(if: TinyProxy.available, TinyProxy.skipReason)) struct SendThroughProxyTests {
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func sendGoesThroughTheEnvironmentsProxy() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let proxy = try await TinyProxy(connectPorts: [sim.port], basicAuth: ("apns", "Send-Pr0xy-Pw"))
        let lines = (0..<50).map { #"{"id":"px:\#($0)","app":"\#(shop)","token":"\#(token($0).hex)","payload":{"aps":{"alert":"hi"}}}"# }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("send-\(UUID().uuidString).ndjson")
        try lines.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let arguments = [
            "send", "--app", shop, "--token-key", TestCertificates.tokenKeyPath,
            "--key-id", TestCertificates.tokenKeyID, "--team-id", TestCertificates.tokenTeamID,
            "--ca", "\(TestCertificates.directory)/ca.pem", "--gateway", "127.0.0.1:\(sim.port)", "--server-hostname", "localhost",
            "--shards", "2", "--embed-job-id", file.path,
        ]
        let (status, out, err) = try await PipelineProcess.command(
            arguments,
            environment: [
                "HTTPS_PROXY": "http://apns:Send-Pr0xy-Pw@127.0.0.1:\(proxy.port)", "https_proxy": "", "NO_PROXY": "", "no_proxy": "",
            ])
        #expect(status == 0, "\(err)")
        #expect(out.split(separator: "\n").contains { $0 == "  accepted: 50" }, "\(out)")
        #expect(Set(sim.records.compactMap(\.jobID)) == Set((0..<50).map { "px:\($0)" }))
        #expect(proxy.connectRequests.count == 2, "both connections were tunnels: \(proxy.connectRequests)")
        #expect(!(out + err).contains("Send-Pr0xy-Pw"))

        // NO_PROXY lists the simulator's address: straight there, the proxy sees nothing more.
        let before = proxy.connectRequests.count
        let (direct, directOut, directErr) = try await PipelineProcess.command(
            arguments,
            environment: [
                "HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)", "https_proxy": "", "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "",
            ])
        #expect(direct == 0, "\(directErr)")
        #expect(directOut.split(separator: "\n").contains { $0 == "  accepted: 50" }, "\(directOut)")
        #expect(proxy.connectRequests.count == before)

        // An https:// proxy is refused, naming the variable and never quoting the URL.
        let (bad, _, badErr) = try await PipelineProcess.command(
            arguments, environment: ["HTTPS_PROXY": "https://apns:Send-Pr0xy-Pw@127.0.0.1:\(proxy.port)", "https_proxy": ""])
        #expect(bad != 0)
        #expect(badErr.contains("HTTPS_PROXY: an https:// proxy") && !badErr.contains("Send-Pr0xy-Pw"), "\(badErr)")
        try await sim.stop()
    }
}

/// A sender that is not root connects (issue 32): `.socketOption(.tcp_nodelay)` set `SOL_SOCKET` option 1
/// — `SO_DEBUG`, which only a privileged process may set — so every connection of a non-root process
/// (the OCI image's user, systemd's `DynamicUser=`, a Kubernetes `runAsNonRoot` pod) failed with EACCES.
/// `send` runs here as `nobody` (setpriv) against the HTTP/2 simulator over TLS.
@Suite struct UnprivilegedSenderTests {
    static let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].first { FileManager.default.isExecutableFile(atPath: $0) }

    @Test(.enabled(if: PipelineProcess.binary != nil && getuid() == 0 && setpriv != nil, "needs root, setpriv and the built binary"))
    func sendAsNobodyConnectsAndDelivers() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        // Everything `nobody` needs, readable by it: the binary, the key, the CA, the jobs.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("nobody-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = FileManager.default
        for (from, name) in [
            (PipelineProcess.binary!, "apns-pipeline"), (TestCertificates.tokenKeyPath, "key.p8"),
            ("\(TestCertificates.directory)/ca.pem", "ca.pem"),
        ] {
            try files.copyItem(atPath: from, toPath: dir.appendingPathComponent(name).path)
        }
        let jobs = dir.appendingPathComponent("jobs.ndjson")
        try (0..<20).map { #"{"id":"nb:\#($0)","app":"\#(shop)","token":"\#(token($0).hex)","payload":{"aps":{"alert":"hi"}}}"# }
            .joined(separator: "\n").write(to: jobs, atomically: true, encoding: .utf8)
        for name in ["", "apns-pipeline", "key.p8", "ca.pem", "jobs.ndjson"] {
            try files.setAttributes(
                [.posixPermissions: name == "" || name == "apns-pipeline" ? 0o755 : 0o644],
                ofItemAtPath: dir.appendingPathComponent(name).path)
        }
        let d = dir.path
        var (status, out, err): (Int32, String, String) = (0, "", "")
        // ETXTBSY: a process another test forked while the copy above was open for writing holds that
        // descriptor until it execs; the exec of the fresh copy then fails for a moment. Tried again.
        for attempt in 1...5 {
            (status, out, err) = try await PipelineProcess.command(
                [
                    // A sender that cannot connect retries until its give-up time: bounded here so a regression fails.
                    "120", Self.setpriv!, "--reuid=65534", "--regid=65534", "--clear-groups", "\(d)/apns-pipeline", "send", "--protocol",
                    "http2", "--app", shop,
                    "--token-key", "\(d)/key.p8", "--key-id", TestCertificates.tokenKeyID, "--team-id", TestCertificates.tokenTeamID,
                    "--ca", "\(d)/ca.pem", "--gateway", "127.0.0.1:\(sim.port)", "--server-hostname", "localhost", jobs.path,
                ], executable: "/usr/bin/timeout")
            guard status == 126, err.contains("Text file busy"), attempt < 5 else { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        try await sim.stop()
        #expect(status == 0, "\(err)")
        #expect(out.split(separator: "\n").contains("  accepted: 20"), "\(out)\n\(err)")
        #expect(!err.contains("Permission denied"), "\(err)")
    }
}

/// Connects that retrying cannot fix end `send` at once: exit status 1 and one line on stderr that says
/// what is wrong and what to do, nothing sent. Each `send` runs under `timeout 120`: one that retried
/// for ever (as before) fails the test instead of hanging it.
@Suite struct SendFailsFastTests {
    static func jobs() throws -> URL {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("send-refused-\(UUID().uuidString).ndjson")
        try (0..<20).map { #"{"id":"r:\#($0)","app":"\#(shop)","token":"\#(token($0).hex)","payload":{"aps":{"alert":"hi"}}}"# }
            .joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        return file
    }

    static let tokenAuth = [
        "--token-key", TestCertificates.tokenKeyPath, "--key-id", TestCertificates.tokenKeyID, "--team-id", TestCertificates.tokenTeamID,
    ]
    static let certAuth = ["--cert", TestCertificates.pem(shop), "--key", TestCertificates.key(shop)]

    /// `send` with `arguments` (after the app and before the file) under `timeout 120`, with no proxy
    /// from this environment but `environment`'s.
    static func send(_ arguments: [String], jobs: URL, environment: [String: String] = [:]) async throws -> (Int32, String, String) {
        let noProxy = ["https_proxy": "", "HTTPS_PROXY": "", "no_proxy": "", "NO_PROXY": ""]
        return try await PipelineProcess.command(
            ["120", PipelineProcess.binary!, "send", "--protocol", "http2", "--app", shop] + arguments + [jobs.path],
            environment: noProxy.merging(environment) { $1 }, executable: "/usr/bin/timeout")
    }

    /// One non-empty line on stderr naming the host and holding `fragment`, status 1, nothing on stdout.
    static func expectOneLine(
        _ result: (Int32, String, String), host: String, _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let (status, out, err) = result
        let lines = err.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        #expect(status == 1, "status \(status) (124: still retrying after 120 s): \(err)", sourceLocation: sourceLocation)
        #expect(lines.count == 1, "\(lines)", sourceLocation: sourceLocation)
        #expect(lines.first?.contains("cannot connect to APNs at \(host) for \(shop): ") == true, "\(err)", sourceLocation: sourceLocation)
        #expect(lines.first?.contains(fragment) == true, "expected \"\(fragment)\" in: \(err)", sourceLocation: sourceLocation)
        #expect(out.isEmpty, "\(out)", sourceLocation: sourceLocation)
    }

    /// A server without h2 (the binary gateway simulator: TLS with no ALPN), a server certificate that does
    /// not verify against the trust roots, one that is not for the name checked, and our client
    /// certificate refused by the server (signed by a CA it does not trust).
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func aServerWithoutH2OrACertificateThatDoesNotVerifyEndsSend() async throws {
        let jobs = try Self.jobs()
        defer { try? FileManager.default.removeItem(at: jobs) }
        let binary = try await startBinarySimulator()
        let sim = try await HTTP2Simulator.startedForTests(tokens: false)
        let h2 = "127.0.0.1:\(sim.port)"
        let ca = "\(TestCertificates.directory)/ca.pem"

        let old = "127.0.0.1:\(binary.ports.gateway)"
        Self.expectOneLine(
            try await Self.send(Self.certAuth + ["--ca", ca, "--gateway", old, "--server-hostname", "localhost"], jobs: jobs),
            host: old, "did not negotiate HTTP/2 (ALPN: none)")
        Self.expectOneLine(
            try await Self.send(
                Self.certAuth + ["--ca", TestCertificates.pem("rogue-ca"), "--gateway", h2, "--server-hostname", "localhost"], jobs: jobs),
            host: h2, "does not verify against the trust roots")
        // The name: a certificate matching neither it nor the address (its IP entry is 127.0.0.1's).
        let other = try await HTTP2Simulator.startedForTests(tokens: false) { $0.host = "127.0.0.2" }
        let elsewhere = "127.0.0.2:\(other.port)"
        Self.expectOneLine(
            try await Self.send(Self.certAuth + ["--ca", ca, "--gateway", elsewhere, "--server-hostname", "apns.invalid"], jobs: jobs),
            host: elsewhere, "the server's certificate is not for apns.invalid")
        #expect(other.records.isEmpty)
        try await other.stop()
        Self.expectOneLine(
            try await Self.send(
                [
                    "--cert", TestCertificates.pem("rogue"), "--key", TestCertificates.key("rogue"), "--ca", ca, "--gateway", h2,
                    "--server-hostname", "localhost",
                ], jobs: jobs),
            host: h2, "the server refused our client certificate")
        #expect(sim.records.isEmpty && binary.totals.accepted == 0)
        try await sim.stop()
        try await binary.stop()
    }

    /// Through tinyproxy with the wrong password (its 401) and with none (407): one line naming the
    /// proxy and the fix, never the password.
    @Test(
        .enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"),
        .enabled(if: TinyProxy.available, TinyProxy.skipReason))
    func aProxyRefusingOurCredentialsEndsSend() async throws {
        let jobs = try Self.jobs()
        defer { try? FileManager.default.removeItem(at: jobs) }
        let sim = try await HTTP2Simulator.startedForTests()
        let proxy = try await TinyProxy(connectPorts: [sim.port], basicAuth: ("apns", "Right-Pr0xy-Pass"))
        let args =
            Self.tokenAuth + [
                "--ca", "\(TestCertificates.directory)/ca.pem", "--gateway", "127.0.0.1:\(sim.port)", "--server-hostname", "localhost",
            ]
        let wrong = try await Self.send(args + ["--proxy", "http://apns:Wr0ng-Pr0xy-Pass@127.0.0.1:\(proxy.port)"], jobs: jobs)
        Self.expectOneLine(
            wrong, host: "127.0.0.1:\(sim.port)",
            "the HTTPS proxy 127.0.0.1:\(proxy.port) refused CONNECT 127.0.0.1:\(sim.port): 401 Unauthorized — the user or password in --proxy is wrong"
        )
        #expect(!wrong.2.contains("Pr0xy-Pass"))
        // The password in the environment, as the help advises: the same, naming the variable.
        let none = try await Self.send(args, jobs: jobs, environment: ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"])
        Self.expectOneLine(none, host: "127.0.0.1:\(sim.port)", "407 Proxy Authentication Required — it wants credentials: HTTPS_PROXY")
        #expect(sim.records.isEmpty)
        // The right password goes through.
        let (status, out, err) = try await Self.send(
            args + ["--proxy", "http://apns:Right-Pr0xy-Pass@127.0.0.1:\(proxy.port)"], jobs: jobs)
        #expect(status == 0 && out.split(separator: "\n").contains("  accepted: 20"), "\(out)\n\(err)")
        try await sim.stop()
    }
}

/// The binary gateway simulator over TLS (client certificates from the test CA), on free ports.
func startBinarySimulator() async throws -> GatewaySimulator {
    var config = SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
    config.gatewayPort = 0
    config.feedbackPort = 0
    let simulator = try GatewaySimulator(configuration: config)
    try await simulator.start()
    return simulator
}
