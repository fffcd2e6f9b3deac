import Foundation
import Pipeline
import TestSupport
import Testing

/// Issue 29 (6): `pipeline.event_loop_threads`, default half the machine's cores (at least 1, at most 8;
/// issue 28's A/B in benchmarks §7.1 chose half rather than all of them).
@Suite struct EventLoopThreadsConfigurationTests {
    func load(_ pipeline: String) throws -> PipelineConfiguration {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        let certs = TestCertificates.directory
        try
            ("pipeline:\n" + pipeline
            + "apps:\n  - bundle_id: \(shop)\n    certificate: \(certs)/\(shop).pem\n    key: \(certs)/\(shop).key\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: path, environment: [:])
    }

    @Test func theDefaultIsHalfTheCoresAtMostEight() throws {
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let threads = try load("  max_in_flight: 1000\n").eventLoopThreads
        #expect(threads >= 1 && threads <= min(max(1, cores / 2), 8), "\(threads) loops on \(cores) cores")
        #expect(threads == PipelineConfiguration.defaultEventLoopThreads)
    }

    @Test func givenAndOutOfRange() throws {
        #expect(try load("  event_loop_threads: 3\n").eventLoopThreads == 3)
        do {
            _ = try load("  event_loop_threads: 0\n")
            Issue.record("0 loops loaded")
        } catch let error as ConfigurationError {
            #expect(error.key == "pipeline.event_loop_threads", "\(error)")
        }
    }
}
