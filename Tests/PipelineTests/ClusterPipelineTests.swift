import Foundation
import Pipeline
import ProcessSupport
import Redis
import Testing
import TestSupport

@Suite struct ClusterPipelineConfigurationTests {
    private func load(_ redisSection: String) throws -> PipelineConfiguration {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("cluster-\(UUID().uuidString).yaml").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try """
            redis:
            \(redisSection)
            apps:
              - bundle_id: \(shop)
                certificate: \(TestCertificates.directory)/\(shop).pem
                key: \(TestCertificates.directory)/\(shop).key
            """.write(toFile: file, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: file)
    }

    @Test func redisClusterListsTheNodes() throws {
        let c = try load("  cluster: [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]")
        guard case .cluster(let cluster) = try c.redis.target() else {
            Issue.record("expected a cluster target")
            return
        }
        #expect(cluster.seeds.map(\.description) == ["10.0.0.1:7000", "10.0.0.2:7000"])
        #expect(try load("  url: redis://10.0.0.1:6380/2").redis.target() == .single(try RedisConfiguration(url: "redis://10.0.0.1:6380/2")))
    }

    @Test func badRedisSettingsNameTheKey() throws {
        for (section, key, expected) in [
            ("  cluster: [\"10.0.0.1:x\"]", "redis.cluster", "expected a list of host:port"),
            ("  cluster: [\"10.0.0.1:7000/3\"]", "redis.cluster", "only database 0"),
            ("  cluster: \"10.0.0.1:7000\"", "redis.cluster", "expected a list of strings"),
            ("  url: redis://h:1\n  cluster: [\"10.0.0.1:7000\"]", "redis", "not both"),
            ("  url: http://h", "redis.url", "expected redis://"),
        ] {
            #expect {
                try load(section)
            } throws: { error in
                guard let error = error as? ConfigurationError else { return false }
                return error.key == key && error.problem.contains(expected)
            }
        }
    }
}
