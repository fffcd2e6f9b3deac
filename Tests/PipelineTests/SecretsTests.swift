import Foundation
import Logging
import Pipeline
import TestSupport
import Testing

/// Issue 13 (6): `${NAME}` and `${file:/path}` in the pipeline file; errors name the file and the key;
/// substituted values never reach a log line.
@Suite struct SecretsTests {
    func write(_ text: String, name: String = "pipeline") throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).yaml").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    var apps: String {
        "apps:\n  - bundle_id: x\n    certificate: \"${CERTS}/\(shop).pem\"\n    key: \"${CERTS}/\(shop).key\"\n"
    }

    @Test func variablesAndFilesAreSubstituted() throws {
        let secretFile = try write("s3cr3t-from-a-file\n", name: "secret")
        let yaml = """
            kafka:
              bootstrap_servers: "${KAFKA_BOOTSTRAP}"
              group: "pay-$${literal}-$HOME-${GROUP_SUFFIX}"
              properties:
                security.protocol: SASL_SSL
                sasl.mechanism: SCRAM-SHA-512
                sasl.username: "${KAFKA_USER}"
                sasl.password: "${KAFKA_PASSWORD}"
                ssl.key.password: "${file:\(secretFile)}"
            redis:
              url: "redis://:${REDIS_PASSWORD}@127.0.0.1:6379/2"
            gateway:
              shards: ${SHARDS}

            """ + apps
        let environment = [
            "KAFKA_BOOTSTRAP": "kafka-1:9093,kafka-2:9093", "GROUP_SUFFIX": "blue", "KAFKA_USER": "pipeline",
            "KAFKA_PASSWORD": "hunter2-kafka", "REDIS_PASSWORD": "r3d!s-pass", "SHARDS": "4", "CERTS": TestCertificates.directory,
        ]
        let c = try PipelineConfiguration.load(file: try write(yaml), environment: environment)
        #expect(c.kafka.bootstrapServers == "kafka-1:9093,kafka-2:9093")
        #expect(c.kafka.group == "pay-${literal}-$HOME-blue", "`$${` is a literal `${`; any other `$` is itself")
        #expect(c.kafka.properties["sasl.username"] == "pipeline")
        #expect(c.kafka.properties["sasl.password"] == "hunter2-kafka")
        #expect(c.kafka.properties["ssl.key.password"] == "s3cr3t-from-a-file", "one trailing line break dropped")
        #expect(c.redis.url == "redis://:r3d!s-pass@127.0.0.1:6379/2")
        #expect(c.gateway.shards == 4)
        #expect(
            c.apps[0].authentication
                == .certificate(
                    certificate: "\(TestCertificates.directory)/\(shop).pem", key: "\(TestCertificates.directory)/\(shop).key"))
        #expect(Set(c.secrets).isSuperset(of: ["hunter2-kafka", "r3d!s-pass", "s3cr3t-from-a-file", "pipeline"]))
        // For log lines: secrets by their property name.
        #expect(c.kafka.redactedProperties["sasl.password"] == "***" && c.kafka.redactedProperties["ssl.key.password"] == "***")
        #expect(c.kafka.redactedProperties["security.protocol"] == "SASL_SSL")
    }

    @Test func aMissingVariableOrFileIsAStartUpErrorNamingFileAndKey() throws {
        let env = ["CERTS": TestCertificates.directory]
        let cases: [(String, String, String)] = [
            (
                "kafka:\n  properties:\n    sasl.password: \"${KAFKA_PASSWORD}\"\n", "kafka.properties.sasl.password",
                "environment variable KAFKA_PASSWORD is not set"
            ),
            ("redis:\n  url: \"redis://:${REDIS_PASSWORD}@r:6379\"\n", "redis.url", "environment variable REDIS_PASSWORD is not set"),
            (
                "kafka:\n  properties:\n    ssl.key.password: \"${file:/nonexistent/secret}\"\n", "kafka.properties.ssl.key.password",
                "cannot read the file /nonexistent/secret"
            ),
            ("kafka:\n  group: \"${GROUP\"\n", "kafka.group", "unterminated `${`"),
            ("kafka:\n  group: \"${9LIVES}\"\n", "kafka.group", "neither an environment variable name"),
            ("gateway:\n  addresses: [\"${GATEWAY}\"]\n", "gateway.addresses", "environment variable GATEWAY is not set"),
        ]
        for (yaml, key, problem) in cases {
            let path = try write(yaml + apps)
            do {
                _ = try PipelineConfiguration.load(file: path, environment: env)
                Issue.record("\(key): no error")
            } catch let e as ConfigurationError {
                #expect(e.file == path && e.key == key && e.problem.contains(problem), "\(e)")
            }
        }
        // The whole sentence, as `run` prints it.
        let path = try write("kafka:\n  properties:\n    sasl.password: \"${KAFKA_PASSWORD}\"\n" + apps)
        #expect(throws: ConfigurationError.self) { try PipelineConfiguration.load(file: path, environment: env) }
        do {
            _ = try PipelineConfiguration.load(file: path, environment: env)
        } catch {
            #expect("\(error)" == "\(path): kafka.properties.sasl.password: environment variable KAFKA_PASSWORD is not set")
        }
    }

    /// A substituted value that is wrong for its key is reported as written, not with its value.
    @Test func aBadSubstitutedValueIsNotShownInTheError() throws {
        let path = try write("gateway:\n  shards: \"${SHARDS}\"\n" + apps)
        do {
            _ = try PipelineConfiguration.load(file: path, environment: ["CERTS": TestCertificates.directory, "SHARDS": "topsecret"])
            Issue.record("no error")
        } catch let e as ConfigurationError {
            #expect(e.key == "gateway.shards")
            #expect(!e.description.contains("topsecret"), "\(e)")
            #expect(e.description.contains("${SHARDS}"), "\(e)")
        }
    }

    @Test func logLinesNeverCarryASubstitutedValue() {
        let captured = CapturedLog()
        var logger = Logger(label: "t") { _ in
            RedactingLogHandler(CapturingLogHandler(captured), secrets: ["hunter2-kafka", "r3d!s-pass", "on"])
        }
        logger[metadataKey: "context"] = "user hunter2-kafka"
        logger.warning(
            "could not connect with hunter2-kafka",
            metadata: ["error": "auth failed for r3d!s-pass", "nested": ["list": ["x hunter2-kafka"]], "count": "\(12)", "mode": "on"])
        let line = captured.lines.joined(separator: "\n")
        #expect(!line.contains("hunter2-kafka") && !line.contains("r3d!s-pass"), "\(line)")
        #expect(line.contains("could not connect with ***") && line.contains("auth failed for ***"), "\(line)")
        #expect(line.contains("mode=on"), "values shorter than \(RedactingLogHandler.minimumLength) characters are left alone: \(line)")
    }
}
