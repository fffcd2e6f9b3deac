import Foundation
import Pipeline
import TestSupport
import Testing

/// The deployment examples (`ops/deploy`) against the pipeline files they run: what the file lets `run`
/// hold at worst (``PipelineConfiguration/MemoryBudget``, design §1.2) fits the memory the example gives
/// it, and the systemd unit's start limit is one a crash loop reaches.
@Suite struct DeploymentExamplesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// A Kubernetes or systemd quantity in bytes: `512Mi`, `1Gi` (Kubernetes), `1536M`, `2G` (systemd: powers of 1024).
    static func bytes(_ quantity: String) throws -> Int {
        let units: [String: Int] = ["Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "": 1]
        let digits = quantity.prefix { $0.isNumber }
        guard let n = Int(digits), let unit = units[String(quantity.dropFirst(digits.count))] else {
            throw TestFailure("not a memory quantity: \(quantity)")
        }
        return n * unit
    }

    /// A systemd time span in seconds: `5s`, `300s`, `5min`, `30` (seconds).
    static func seconds(_ span: String) throws -> Int {
        let digits = span.prefix { $0.isNumber }
        guard let n = Int(digits) else { throw TestFailure("not a time span: \(span)") }
        switch span.dropFirst(digits.count) {
        case "", "s": return n
        case "min": return n * 60
        default: throw TestFailure("unexpected unit in \(span)")
        }
    }

    /// `yaml` loaded as `run` loads it, its secrets and key files (absent here) stood in for: `paths` are
    /// replaced in order, and `$SECRETS/` then names a directory holding stand-in secret files.
    static func load(
        _ yaml: String, replacing paths: KeyValuePairs<String, String> = [:], environment: [String: String] = [:]
    ) throws
        -> PipelineConfiguration
    {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        var yaml = yaml
        for (from, to) in paths { yaml = yaml.replacingOccurrences(of: from, with: to) }
        for name in ["kafka-password", "redis-password", "proxy-password"] {
            try "secret-\(name)\n".write(toFile: dir.appendingPathComponent(name).path, atomically: true, encoding: .utf8)
        }
        yaml = yaml.replacingOccurrences(of: "$SECRETS/", with: dir.path + "/")
        let file = dir.appendingPathComponent("pipeline.yaml").path
        try yaml.write(toFile: file, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: file, environment: environment)
    }

    @Test func theKubernetesExampleFitsItsMemoryLimit() throws {
        let deployment = try Self.text("ops/deploy/kubernetes/deployment.yaml")
        let configMap = try Self.text("ops/deploy/kubernetes/configmap.yaml")
        // The container runs the ConfigMap's pipeline.yaml, mounted where its args say.
        #expect(deployment.contains(#"args: ["run", "--pipeline", "/etc/apns-pipeline/pipeline.yaml"]"#))
        #expect(deployment.contains("configMap: { name: apns-pipeline }") && configMap.contains("name: apns-pipeline"))
        let limit = try Self.bytes(
            String(try #require(deployment.firstMatch(of: /limits:\s*\{\s*memory:\s*([0-9]+[KMG]i)\s*\}/)).output.1))
        // The pipeline file: the block under `pipeline.yaml: |`, indented four spaces.
        let lines = configMap.split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(lines.firstIndex { $0.hasSuffix("pipeline.yaml: |") })
        let block = lines[(start + 1)...].prefix { $0.isEmpty || $0.hasPrefix("    ") }.map { $0.dropFirst(min(4, $0.count)) }
        let configuration = try Self.load(
            block.joined(separator: "\n"),
            replacing: [
                "/etc/apns-pipeline/secrets/apns-key.p8": "\(TestCertificates.directory)/AuthKey_TESTKEY123.p8",
                "/etc/apns-pipeline/secrets/": "$SECRETS/",
            ])
        let budget = configuration.memoryBudget
        print("kubernetes example: \(budget) against a limit of \(limit >> 20) MiB")
        #expect(budget.total <= limit, "\(budget) > the container's limit \(limit >> 20) MiB")
        // The check can fail: the example as it was (max_in_flight 200 000, the default 256 MiB) did not fit.
        var before = configuration
        before.maxInFlight = 200_000
        before.maxInFlightBytes = 256 << 20
        #expect(before.memoryBudget.total > limit)
    }

    @Test func theSystemdUnitCapsMemoryAndStopsACrashLoop() throws {
        let unit = try Self.text("ops/deploy/systemd/apns-pipeline.service")
        var sections: [String: [String: String]] = [:]
        var section = ""
        for line in unit.split(separator: "\n") where !line.hasPrefix("#") {
            if line.hasPrefix("[") {
                section = String(line)
            } else if let eq = line.firstIndex(of: "=") {
                sections[section, default: [:]][String(line[..<eq])] = String(line[line.index(after: eq)...])
            }
        }
        let service = sections["[Service]"] ?? [:]
        let unitSection = sections["[Unit]"] ?? [:]
        #expect(service["Restart"] == "on-failure")
        let restart = try Self.seconds(try #require(service["RestartSec"]))
        // systemd reads the start limit in [Unit] only.
        let interval = try Self.seconds(try #require(unitSection["StartLimitIntervalSec"], "StartLimitIntervalSec in [Unit]"))
        let burst = try #require(unitSection["StartLimitBurst"].flatMap { Int($0) }, "StartLimitBurst in [Unit]")
        #expect(restart > 0 && burst >= 2)
        // More than `burst` starts within `interval` stop the unit. Starts come RestartSec plus the run's
        // own time apart: a process failing within RestartSec of its start (a bad file, a refused
        // credential) must reach it, so burst × 2 × RestartSec fits the interval.
        #expect(burst * 2 * restart <= interval, "a crash loop \(restart) s apart makes \(interval / restart) starts in \(interval) s")

        // The file the unit runs is production.example.yaml, adapted: it fits MemoryMax.
        let memoryMax = try Self.bytes(try #require(service["MemoryMax"], "MemoryMax in [Service]"))
        let configuration = try Self.load(
            try Self.text("Pipelines/production.example.yaml"),
            replacing: [
                "/etc/apns/AuthKey_ABC123DEFG.p8": "\(TestCertificates.directory)/AuthKey_TESTKEY123.p8",
                "/run/secrets/": "$SECRETS/",
            ],
            environment: ["KAFKA_PASSWORD": "secret"])
        let budget = configuration.memoryBudget
        print("systemd unit with production.example.yaml: \(budget) against MemoryMax \(memoryMax >> 20) MiB")
        #expect(budget.total <= memoryMax, "\(budget) > MemoryMax \(memoryMax >> 20) MiB")
    }

    /// The budget adds what design §1.2 counts, the priority lane's own share with it.
    @Test func theBudgetAddsWhatDesignCounts() {
        var c = PipelineConfiguration()
        c.maxInFlight = 1000
        c.maxInFlightBytes = 64 << 20
        let plain = c.memoryBudget
        #expect(plain.smallJobs == 1000 * 4096 && plain.largeJobs == 64 << 20 && plain.priorityLane == 0)
        #expect(plain.buffers == (32 << 20) + 2 * (8 << 20))
        #expect(plain.total == plain.smallJobs + plain.largeJobs + plain.buffers + PipelineConfiguration.processMemory)
        c.kafka.properties["queued.max.messages.kbytes"] = "16384"
        #expect(c.memoryBudget.buffers == (32 << 20) + 2 * (16 << 20))
        c.kafka.priorityTopic = "apns.priority"
        #expect(c.memoryBudget.priorityLane > 0 && c.memoryBudget.total > plain.total)
    }
}
