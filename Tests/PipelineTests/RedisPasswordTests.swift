import Foundation
import Pipeline
import Redis
import TestSupport
import Testing

/// Issue 28 (6): Redis URLs read as RFC 3986 says (percent-encoded user info), `redis.password` for a
/// secret with any characters, and no error message quoting any part of a password.
@Suite struct RedisPasswordTests {
    /// Characters a URL's user info cannot hold unencoded, and a few more.
    static let password = "p/@:?#% x\"'ü\\end"

    static func encoded(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }

    func write(_ text: String, name: String = "pipeline") throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).yaml").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func percentEncodedUserInfoDecodes() throws {
        let c = try RedisConfiguration(url: "redis://al%69ce:\(Self.encoded(Self.password))@cache.local:6380/3")
        #expect(c.username == "alice" && c.password == Self.password && c.host == "cache.local" && c.port == 6380 && c.database == 3)
        // A raw ":" after the first one belongs to the password (RFC 3986 §3.2.1), as does a raw "@"
        // before the last one.
        let raw = try RedisConfiguration(url: "redis://bob:a:b@c@[::1]:7000")
        #expect(raw.username == "bob" && raw.password == "a:b@c" && raw.host == "::1" && raw.port == 7000)
        #expect(try RedisConfiguration(url: "REDIS://h").host == "h")
    }

    /// A malformed URL with a password: whatever is wrong, the error quotes no part of it.
    @Test(arguments: [
        "redis://:hunter2/secret@127.0.0.1:6379",  // an unencoded "/" moves the rest into the path
        "redis://:hunter2?secret@127.0.0.1",
        "redis://:hunter2#secret@127.0.0.1",
        "redis://:hunter2%zzsecret@127.0.0.1",  // bad percent-encoding
        "redis://:hunter2%ffsecret@127.0.0.1",  // not UTF-8
        "redis://hunter2:secret",  // read as host "hunter2", port "secret"
        "redis://u:hunter2secret@127.0.0.1:hunter2",
        "redis://u:hunter2secret@127.0.0.1/hunter2secret",
        "redis://u:hunter2secret@[::1",
        "redis://u:hunter2secret@[::1]hunter2",
    ])
    func errorsQuoteNoPartOfTheSecret(url: String) throws {
        let error = #expect(throws: RedisError.self) { try RedisConfiguration(url: url) }
        let text = "\(error.map { "\($0)" } ?? "")"
        for fragment in ["hunter", "secret", "unter2", "2/s", "zz", "ff"] {
            #expect(!text.contains(fragment), "\(text)")
        }
        // Through the pipeline file: the error names file and key, and still no fragment.
        let file = try pipelineFile(redis: "  url: \"\(url)\"")
        do {
            _ = try PipelineConfiguration.load(file: file)
            Issue.record("loaded \(url)")
        } catch {
            let message = "\(error)"
            #expect(message.contains("redis.url") && message.contains(file), "\(message)")
            for fragment in ["hunter", "secret", "unter2"] { #expect(!message.contains(fragment), "\(message)") }
        }
    }

    /// `redis.password` from a file (any characters, no encoding) or the environment replaces the URL's,
    /// and is a secret (redacted from logs) even when written in the URL.
    @Test func passwordKeyFromAFileOrTheEnvironment() throws {
        let secretFile = try write(Self.password + "\n", name: "redis-secret")
        let fromFile = try PipelineConfiguration.load(
            file: try pipelineFile(redis: "  url: \"redis://:old@127.0.0.1:6379\"\n  password: \"${file:\(secretFile)}\""))
        #expect(try fromFile.redis.target().password == Self.password)
        #expect(fromFile.secrets.contains(Self.password))
        let fromEnvironment = try PipelineConfiguration.load(
            file: try pipelineFile(redis: "  cluster: [\"127.0.0.1:7000\"]\n  password: \"${REDIS_PASSWORD}\""),
            environment: ["REDIS_PASSWORD": "env/@:pw"])
        #expect(try fromEnvironment.redis.target().password == "env/@:pw")
        let inURL = try PipelineConfiguration.load(file: try pipelineFile(redis: "  url: \"redis://:lit%2Feral@127.0.0.1:6379\""))
        #expect(inURL.secrets.contains("lit/eral"))
        #expect(try inURL.redis.target().redactedDescription.contains("lit") == false)
        let empty = try write("", name: "empty")
        #expect(throws: (any Error).self) {
            try PipelineConfiguration.load(file: try pipelineFile(redis: "  password: \"${file:\(empty)}\""))
        }
    }

    /// Against a real redis-server whose password holds `/ @ : % ?` and more: the percent-encoded URL
    /// and `redis.password` both authenticate.
    @Test func realServerWithAPasswordOfEveryCharacter() async throws {
        let server = try await RedisServer(extraArguments: ["--requirepass", Self.password])
        defer { server.stop() }
        let viaURL = try RedisClient(url: "redis://:\(Self.encoded(Self.password))@127.0.0.1:\(server.port)/0")
        #expect(try await viaURL.send(RedisCommand("PING")) == .status("PONG"))
        await viaURL.close()

        let secretFile = try write(Self.password, name: "redis-secret")
        let c = try PipelineConfiguration.load(
            file: try pipelineFile(redis: "  url: \"redis://127.0.0.1:\(server.port)\"\n  password: \"${file:\(secretFile)}\""))
        let connection = try c.redis.makeConnection(logger: .init(label: "test"))
        try await connection.connect()
        #expect(try await connection.send(RedisCommand("PING")) == .status("PONG"))
        await connection.close()
    }
}
