import Foundation
import Pipeline
import Redis
import TestSupport
import Testing

/// `redis.tls` in the pipeline file (issue 29): the files are read at load, and a bad one fails there,
/// naming the file, the key and what was expected.
@Suite struct RedisTLSConfigurationTests {
    @Test func tlsSectionMakesEveryConnectionTLS() throws {
        let ca = TestCertificates.pem("ca")
        let single = try PipelineConfiguration.load(
            file: try pipelineFile(
                redis: """
                      url: "redis://127.0.0.1:6380"
                      tls:
                        ca: "\(ca)"
                        server_name: redis.internal
                    """))
        guard case .single(let server) = try single.redis.target() else {
            Issue.record("expected one server")
            return
        }
        #expect(server.tls == RedisTLSConfiguration(ca: ca, serverName: "redis.internal"))
        #expect(server.redactedURL.hasPrefix("rediss://"))

        let cluster = try PipelineConfiguration.load(
            file: try pipelineFile(
                redis: """
                      cluster: ["10.0.0.1:7000", "10.0.0.2:7000"]
                      tls: {ca: "\(ca)", cert: "\(TestCertificates.pem(shop))", key: "\(TestCertificates.key(shop))"}
                    """))
        guard case .cluster(let nodes) = try cluster.redis.target() else {
            Issue.record("expected a cluster")
            return
        }
        #expect(nodes.configuration(of: nodes.seeds[1]).tls?.certificate == TestCertificates.pem(shop))

        // rediss:// alone: TLS against the system's roots.
        let plain = try PipelineConfiguration.load(file: try pipelineFile(redis: "  url: \"rediss://cache.example.com:6380\""))
        #expect(try plain.redis.target().tls == RedisTLSConfiguration())
    }

    @Test(arguments: [
        ("ca: /nonexistent/ca.pem", "redis.tls.ca"),
        ("cert: \"\(TestCertificates.pem(shop))\"", "redis.tls.key"),
        ("{cert: \"\(TestCertificates.pem(shop))\", key: \"\(TestCertificates.key("rogue"))\"}", "redis.tls.key"),
        ("server_name: 10.0.0.1", "redis.tls.server_name"),
        ("{ca: x, colour: blue}", "redis.tls.colour"),
    ])
    func badTLSSettingsFailAtLoad(setting: String, key: String) throws {
        let body = setting.hasPrefix("{") ? "  tls: \(setting)" : "  tls:\n    \(setting)"
        let file = try pipelineFile(redis: "  url: \"redis://127.0.0.1:6380\"\n" + body)
        do {
            _ = try PipelineConfiguration.load(file: file)
            Issue.record("loaded \(setting)")
        } catch {
            let message = "\(error)"
            #expect(message.contains(file) && message.contains(key), "\(message)")
            if key != "redis.tls.colour" { #expect(message.contains("expected"), "\(message)") }
        }
    }
}
