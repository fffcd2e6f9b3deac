import APNsProtocol
import Foundation
import HTTP2Simulator
import Pipeline
import Sender
import TestSupport
import Testing

/// `apns-pipeline channel` (issue 31 item 3) as a real process against the HTTP/2 simulator over TLS,
/// the app's token key and CA taken from a pipeline file; `--json` read back as a script would.
@Suite struct ChannelCommandTests {
    /// A pipeline file whose app points at the simulator (no Kafka or Redis is contacted by `channel`).
    static func pipelineFile(port: Int) throws -> URL {
        let d = TestCertificates.directory
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("channel-\(UUID().uuidString).yaml")
        try """
        http2:
          hosts: ["127.0.0.1:\(port)"]
          server_hostname: localhost
          ca: \(d)/ca.pem
        apps:
          - bundle_id: \(shop)
            environment: sandbox
            token: { key: \(TestCertificates.tokenKeyPath), key_id: \(TestCertificates.tokenKeyID), team_id: \(TestCertificates.tokenTeamID) }
          - bundle_id: com.example.news
            transport: binary
            certificate: \(d)/com.example.news.pem
            key: \(d)/com.example.news.key

        """.write(to: file, atomically: true, encoding: .utf8)
        return file
    }

    static func json(_ text: String) throws -> JSONValue {
        let lines = text.split(separator: "\n")
        try #require(lines.count == 1, "one JSON object expected, got: \(text)")
        return try JSONParser.parse(String(lines[0]))
    }

    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func createGetListDeleteThenGetFails() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let file = try Self.pipelineFile(port: sim.port)
        defer { try? FileManager.default.removeItem(at: file) }
        let common = ["--pipeline", file.path, "--app", shop]

        let create = try await PipelineProcess.command(["channel", "create"] + common + ["--storage-policy", "most-recent", "--json"])
        #expect(create.status == 0, "\(create.stderr)")
        let created = try Self.json(create.stdout)
        let id = try #require(created["channel_id"]?.stringValue)
        #expect(created["ok"] == true && created["operation"]?.stringValue == "create" && created["environment"]?.stringValue == "sandbox")
        #expect(created["storage_policy"]?.stringValue == "most-recent" && created["message_storage_policy"]?.intValue == 1)
        #expect(created["request_id"]?.stringValue.map(APNsRequestValidator.isCanonicalUUID) == true)
        #expect(sim.channels(app: shop).map(\.id) == [id])

        let get = try await PipelineProcess.command(["channel", "get"] + common + ["--channel", id, "--json"])
        #expect(get.status == 0, "\(get.stderr)")
        let read = try Self.json(get.stdout)
        #expect(read["channel_id"]?.stringValue == id && read["storage_policy"]?.stringValue == "most-recent")
        #expect(read["push_type"]?.stringValue == "LiveActivity")

        let list = try await PipelineProcess.command(["channel", "list"] + common + ["--json"])
        #expect(list.status == 0, "\(list.stderr)")
        #expect(try Self.json(list.stdout)["channel_ids"]?.arrayValue?.compactMap(\.stringValue) == [id])
        // Text output: one id a line.
        let text = try await PipelineProcess.command(["channel", "list"] + common)
        #expect(text.status == 0 && text.stdout == id + "\n", "\(text.stdout)")

        let delete = try await PipelineProcess.command(["channel", "delete"] + common + ["--channel", id, "--json"])
        #expect(delete.status == 0, "\(delete.stderr)")
        #expect(try Self.json(delete.stdout)["deleted"] == true)
        #expect(sim.channels(app: shop).isEmpty)

        let gone = try await PipelineProcess.command(["channel", "get"] + common + ["--channel", id, "--json"])
        #expect(gone.status == 1)
        let refused = try Self.json(gone.stdout)
        #expect(refused["ok"] == false && refused["reason"]?.stringValue == "ChannelNotRegistered" && refused["status"]?.intValue == 400)
        #expect(refused["channel_id"]?.stringValue == id)
        #expect(gone.stderr.contains("no channel \(id)") && gone.stderr.contains("channel list"), "\(gone.stderr)")
        try await sim.stop()
    }

    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func theChannelLimitFailsWithWhatToDo() async throws {
        let sim = try await HTTP2Simulator.startedForTests { $0.faults.channelLimit = 2 }
        let file = try Self.pipelineFile(port: sim.port)
        defer { try? FileManager.default.removeItem(at: file) }
        let common = ["--pipeline", file.path, "--app", shop]
        for _ in 0..<2 {
            let r = try await PipelineProcess.command(["channel", "create"] + common)
            #expect(r.status == 0 && r.stdout.hasPrefix("created channel "), "\(r.stdout) \(r.stderr)")
        }
        let third = try await PipelineProcess.command(["channel", "create"] + common + ["--json"])
        #expect(third.status == 1)
        #expect(try Self.json(third.stdout)["reason"]?.stringValue == "CannotCreateChannelConfig")
        #expect(third.stderr.contains("channel limit") && third.stderr.contains("channel delete --channel"), "\(third.stderr)")
        #expect(sim.channels(app: shop).count == 2)
        try await sim.stop()
    }

    /// The app's key is restricted to the sandbox and the app says production: APNs's
    /// BadEnvironmentKeyIdInToken, and a message that names the key and the way out.
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func aKeyOfTheOtherEnvironmentSaysSo() async throws {
        let sim = try await HTTP2Simulator.startedForTests { $0.faults.keyEnvironments = [TestCertificates.tokenKeyID: "sandbox"] }
        let file = try Self.pipelineFile(port: sim.port)
        defer { try? FileManager.default.removeItem(at: file) }
        let r = try await PipelineProcess.command(
            ["channel", "list", "--pipeline", file.path, "--app", shop, "--environment", "production", "--json"])
        #expect(r.status == 1)
        let refused = try Self.json(r.stdout)
        #expect(refused["reason"]?.stringValue == "BadEnvironmentKeyIdInToken" && refused["environment"]?.stringValue == "production")
        #expect(
            r.stderr.contains("\(TestCertificates.tokenKeyID) is not enabled for the production environment")
                && r.stderr.contains("--environment sandbox"), "\(r.stderr)")
        try await sim.stop()
    }

    /// Refused before anything is sent: usage errors (exit 64) naming what is wrong.
    @Test(.enabled(if: PipelineProcess.binary != nil, "the apns-pipeline binary is not built"))
    func badArgumentsAreRefusedBeforeSending() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let file = try Self.pipelineFile(port: sim.port)
        defer { try? FileManager.default.removeItem(at: file) }
        let common = ["--pipeline", file.path, "--app", shop]
        let cases: [([String], String)] = [
            (["channel", "create"] + common + ["--storage-policy", "forever"], "forever"),
            (["channel", "create"] + common + ["--storage-policy", "1"], "--storage-policy"),
            (["channel", "list"] + common + ["--environment", "staging"], "staging"),
            (["channel", "get"] + common + ["--channel", "not base64!"], "is not a channel id"),
            (["channel", "get"] + common, "--channel"),
            (["channel", "list", "--pipeline", file.path, "--app", "com.example.nope"], "not an app of"),
            (["channel", "list", "--pipeline", file.path, "--app", "com.example.news"], "token authentication"),
        ]
        for (arguments, expected) in cases {
            let r = try await PipelineProcess.command(arguments)
            #expect(r.status == 64 && r.stderr.contains(expected), "\(arguments.suffix(2)): \(r.status) \(r.stderr)")
        }
        #expect(sim.totals.channelAnswers.isEmpty)
        try await sim.stop()
    }

    /// Where the requests go: Apple's channel-management host of the environment, unless the file points
    /// the app elsewhere than Apple.
    @Test func hostAndEnvironmentFollowThePipelineFile() throws {
        let d = TestCertificates.directory
        func load(_ http2: String, environment: String = "production") throws -> PipelineConfiguration {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("channel-\(UUID().uuidString).yaml")
            defer { try? FileManager.default.removeItem(at: file) }
            try """
            \(http2)
            apps:
              - bundle_id: \(shop)
                environment: \(environment)
                token: { key: \(TestCertificates.tokenKeyPath), key_id: \(TestCertificates.tokenKeyID), team_id: \(TestCertificates.tokenTeamID) }

            """.write(to: file, atomically: true, encoding: .utf8)
            return try PipelineConfiguration.load(file: file.path)
        }
        let apple = try load("http2: {}")
        let a = try apple.channelManagementConfiguration(for: apple.apps[0])
        #expect(a.environment == .production && a.host.description == "api-manage-broadcast.push.apple.com:2196" && a.serverHostname == nil)
        let sandbox = try apple.channelManagementConfiguration(for: apple.apps[0], environment: .sandbox)
        #expect(sandbox.host.description == "api-manage-broadcast.sandbox.push.apple.com:2195")
        // Apple's provider API hosts named explicitly still mean Apple: channel management has its own hosts.
        let explicit = try load("http2:\n  hosts: [\"api.sandbox.push.apple.com:443\"]", environment: "sandbox")
        #expect(
            try explicit.channelManagementConfiguration(for: explicit.apps[0]).host.description
                == "api-manage-broadcast.sandbox.push.apple.com:2195")
        let sim = try load("http2:\n  hosts: [\"127.0.0.1:4443\"]\n  server_hostname: localhost\n  ca: \(d)/ca.pem", environment: "sandbox")
        let s = try sim.channelManagementConfiguration(for: sim.apps[0])
        #expect(
            s.environment == .sandbox && s.host.description == "127.0.0.1:4443" && s.serverHostname == "localhost"
                && s.trustRootsPath == "\(d)/ca.pem")
    }
}
