import Foundation
import Logging
import Pipeline
import Sender
import TestSupport
import Testing

/// Issue 31 (6): `http2.proxy` / `http2.no_proxy` in the pipeline file, the `HTTPS_PROXY` / `NO_PROXY`
/// environment when they are absent, errors that name file, key and what is expected, and the
/// proxy's password kept out of every log line.
@Suite struct ProxyConfigurationTests {
    func write(_ http2: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        let yaml =
            "http2:\n" + http2
            + "apps:\n  - bundle_id: \(shop)\n    certificate: \(TestCertificates.directory)/\(shop).pem\n    key: \(TestCertificates.directory)/\(shop).key\n"
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func theKeyItsListAndTheTransportConfiguration() throws {
        let c = try PipelineConfiguration.load(
            file: try write("  proxy: \"http://apns:${PROXY_PASSWORD}@proxy.corp.example:3128\"\n  no_proxy: [localhost, .corp.example]\n"),
            environment: ["PROXY_PASSWORD": "Pr0xy-From-Env", "HTTPS_PROXY": "http://other:1", "NO_PROXY": "*"])
        let settings = try #require(c.http2.proxy)
        #expect(settings.proxy == HTTPSProxy(host: "proxy.corp.example", port: 3128, username: "apns", password: "Pr0xy-From-Env"))
        #expect(settings.noProxy == ["localhost", "corp.example"], "the file's list, not NO_PROXY")
        #expect(settings.proxy(for: "api.push.apple.com") != nil && settings.proxy(for: "h2.corp.example") == nil)
        #expect(
            try c.transportConfiguration(for: c.apps[0], as: HTTP2TransportConfiguration.self)?.proxy == settings,
            "every HTTP/2 app's connections use it")
        #expect(c.secrets.contains("Pr0xy-From-Env"))
    }

    @Test func theEnvironmentWhenTheKeyIsAbsent() throws {
        let path = try write("  connections: 1\n")
        let c = try PipelineConfiguration.load(
            file: path, environment: ["HTTPS_PROXY": "http://apns:p%40ss-Word@10.1.2.3:8080", "NO_PROXY": "localhost, 127.0.0.1"])
        let settings = try #require(c.http2.proxy)
        #expect(settings.proxy.address == "10.1.2.3:8080" && settings.proxy.source == "HTTPS_PROXY")
        #expect(settings.noProxy == ["localhost", "127.0.0.1"] && settings.noProxySource == "NO_PROXY")
        #expect(c.secrets.contains("p@ss-Word") && c.secrets.contains("p%40ss-Word"), "as sent and as written")

        #expect(try PipelineConfiguration.load(file: path, environment: [:]).http2.proxy == nil, "no proxy: direct")
        let none = try write("  proxy: none\n")
        #expect(
            try PipelineConfiguration.load(file: none, environment: ["HTTPS_PROXY": "http://p:1"]).http2.proxy == nil,
            "`none` ignores the environment")
    }

    @Test func errorsNameFileKeyAndWhatIsExpectedWithoutThePassword() throws {
        let cases: [(http2: String, environment: [String: String], problem: String)] = [
            ("  proxy: \"https://apns:Hidden-Pw1@proxy:3128\"\n", [:], "https:// proxy (TLS to the proxy itself) is not supported"),
            ("  proxy: \"http://apns:Hidden-Pw1@proxy:70000\"\n", [:], "bad proxy port"),
            ("  proxy: \"socks5://proxy:1080\"\n", [:], "the scheme socks5:// is not supported"),
            ("  proxy: \"http://apns:Hidden/Pw1@proxy:3128\"\n", [:], "no path, query or fragment"),
            ("  connections: 1\n", ["HTTPS_PROXY": "https://apns:Hidden-Pw1@proxy:3128"], "the environment's HTTPS_PROXY is used"),
        ]
        for (http2, environment, problem) in cases {
            let path = try write(http2)
            do {
                _ = try PipelineConfiguration.load(file: path, environment: environment)
                Issue.record("\(http2) \(environment): loaded")
            } catch let error as ConfigurationError {
                #expect(error.file == path && error.key == "http2.proxy", "\(error)")
                #expect(error.problem.contains(problem), "\(error)")
                #expect(error.problem.contains("expected http://[user:password@]host:port"), "\(error)")
                #expect(!error.description.contains("Hidden"), "the password is never quoted: \(error)")
            }
        }
        // A list is expected for no_proxy.
        #expect(throws: ConfigurationError.self) {
            try PipelineConfiguration.load(file: try write("  proxy: http://p:1\n  no_proxy: localhost\n"), environment: [:])
        }
    }

    @Test func thePasswordNeverReachesALogLine() throws {
        let c = try PipelineConfiguration.load(
            file: try write("  proxy: \"http://apns:Literal-Pr0xy-Pw@proxy.corp.example:3128\"\n"), environment: [:])
        let captured = CapturedLog()
        let logger = Logger(label: "t") { _ in RedactingLogHandler(CapturingLogHandler(captured), secrets: c.secrets) }
        let proxy = try #require(c.http2.proxy?.proxy)
        logger.info("proxy \(proxy.password ?? "")", metadata: ["proxy": "\(proxy)", "raw": "\(proxy.password ?? "")"])
        let line = try #require(captured.lines.first)
        #expect(!line.contains("Literal-Pr0xy-Pw"), "\(line)")
        #expect(line.contains("proxy=http://apns:***@proxy.corp.example:3128"), "\(line)")
    }
}
