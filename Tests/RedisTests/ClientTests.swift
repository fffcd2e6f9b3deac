import Foundation
import Redis
import TestSupport
import Testing

@Suite struct ConfigurationTests {
    @Test func parsesURLs() throws {
        let full = try RedisConfiguration(url: "redis://alice:p%40ss@cache.local:6380/3")
        #expect(full.host == "cache.local")
        #expect(full.port == 6380)
        #expect(full.username == "alice")
        #expect(full.password == "p@ss")
        #expect(full.database == 3)
        #expect(full.redactedURL == "redis://alice:***@cache.local:6380/3")

        let passwordOnly = try RedisConfiguration(url: "redis://:secret@127.0.0.1")
        #expect(passwordOnly.username == nil)
        #expect(passwordOnly.password == "secret")
        #expect(passwordOnly.port == 6379)
        #expect(passwordOnly.database == 0)
        #expect(!passwordOnly.redactedURL.contains("secret"))

        let ipv6 = try RedisConfiguration(url: "redis://[::1]:7000")
        #expect(ipv6.host == "::1")
        #expect(ipv6.port == 7000)

        #expect(try RedisConfiguration(url: "rediss://host:6379").tls != nil)  // TLS (TLSTests)
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "http://host") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis://host:99999") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis://host:6379/x") }
    }

    @Test func backOffGrowsToTheCapWithJitter() {
        let policy = RedisReconnectPolicy(initialDelay: .milliseconds(100), maximumDelay: .seconds(1), multiplier: 2, jitter: 0.5)
        var generator = SystemRandomNumberGenerator()
        for attempt in 1...12 {
            let base = min(1.0, 0.1 * pow(2, Double(attempt - 1)))
            let delay = policy.delay(attempt: attempt, using: &generator)
            #expect(delay >= .milliseconds(Int64(base * 500)) - .microseconds(1))
            #expect(delay <= .milliseconds(Int64(base * 1000)) + .microseconds(1))
        }
    }

    /// `EVALSHA sha numkeys key… arg…`, written once: the layout Redis reads `KEYS` and `ARGV` from.
    @Test func evalshaCommandLaysOutKeysThenArguments() {
        let script = RedisScript("return 1")
        var arguments = RedisArguments()
        arguments.append(42)
        arguments.append("")
        let command = RedisCommand(evalsha: script, keys: RedisArguments(["{t}:a", "{t}:b"]), arguments: arguments)
        #expect(
            command.arguments.elements.map { String(decoding: $0, as: UTF8.self) } == [
                "EVALSHA", script.sha1, "2", "{t}:a", "{t}:b", "42", "",
            ])
        #expect(RedisCommand(evalsha: script, keys: RedisArguments(), arguments: RedisArguments()).arguments.count == 3)
    }

    @Test func minuteStampsAreUTC() {
        #expect(RedisKeys.minuteStamp(0) == "197001010000")
        #expect(RedisKeys.minuteStamp(1_767_225_600) == "202601010000")  // 2026-01-01T00:00Z
        #expect(RedisKeys.minuteStamp(1_709_210_096) == "202402291234")  // leap day 12:34:56Z
        #expect(RedisKeys.minuteStamp(-1) == "196912312359")
    }

    /// The fingerprint is persisted: changing it silently disables dedup for one retention period.
    @Test func jobFingerprintIsStable() {
        let fingerprint = JobFingerprint(jobID: "spring-sale:000001")
        #expect(fingerprint == JobFingerprint(jobID: "spring-sale:000001"))
        #expect(fingerprint != JobFingerprint(jobID: "spring-sale:000002"))
        #expect(fingerprint.member == JobFingerprintGolden.member)
        #expect(fingerprint.subBucket(of: 1024) == JobFingerprintGolden.subBucket)
    }

    /// Both hashes are persisted through stored records and key names; the values here were computed
    /// independently (a Python rendering of FNV-1a + the murmur3 finaliser), not by the code under test.
    @Test func fingerprintsAndTokenBucketsNeverChange() {
        let cases: [(id: String, member: Int64, subBucket: Int)] = [
            ("", -1_166_397_803_181_037_274, 2955),
            ("bench:" + String(repeating: "ab", count: 32), -3_683_531_534_039_822_219, 1098),
            ("é-ünïcode", 2_670_560_333_588_562_425, 3873),
        ]
        for c in cases {
            let fingerprint = JobFingerprint(jobID: c.id)
            #expect(fingerprint.member == c.member, "\(c.id)")
            #expect(fingerprint.subBucket(of: 4096) == c.subBucket, "\(c.id)")
            // A Substring's copy and a string built piece by piece hash the same.
            #expect(JobFingerprint(jobID: String(("x" + c.id).dropFirst())) == fingerprint)
            // …and so do the id's bytes lent without a String.
            #expect(Array(c.id.utf8).withUnsafeBytes { JobFingerprint(jobIDBytes: $0) } == fingerprint)
        }
        let keys = RedisKeys(prefix: "apns", tokenBuckets: 16)
        #expect(keys.tokenBucket(String(repeating: "ab", count: 32)) == 1_315_897_349 % 16)
        #expect(keys.tokenBucket(String(repeating: "AB", count: 32)) == 1_315_897_349 % 16)  // case-blind
        #expect(
            RedisKeys(prefix: "apns", tokenBuckets: 1000).tokenBucket(String(repeating: "0123456789abcdef", count: 4)) == 3_743_373_413
                % 1000)
        // Hex lent as bytes hashes as the String does, in either case.
        #expect(RedisKeys.tokenHash(hex: String(repeating: "ab", count: 32)) == 1_315_897_349)
        #expect(Array(String(repeating: "aB", count: 32).utf8).withUnsafeBytes { RedisKeys.tokenHash(hexBytes: $0) } == 1_315_897_349)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            let hex = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
            #expect(
                Array(hex.uppercased().utf8).withUnsafeBytes { RedisKeys.tokenHash(hexBytes: $0) } == RedisKeys.tokenHash(hex: hex),
                "\(hex)")
            #expect(keys.tokenBucket(hash: RedisKeys.tokenHash(hex: hex)) == keys.tokenBucket(hex))
        }
    }

    @Test func scriptDigestIsSHA1() {
        #expect(RedisScript("abc").sha1 == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(RedisScript("").sha1 == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        let long = String(repeating: "a", count: 1000)
        #expect(RedisScript(long).sha1 == "291e9a6c66994949b57ba5e650361e98fc36b1ba")
    }
}

/// FNV-1a 64 + murmur3 fmix64 of the UTF-8 id (offset basis 0xcbf29ce484222325 for the member, that
/// basis xor 0x9e3779b97f4a7c15 for the sub-bucket), cross-checked with an independent Python version.
enum JobFingerprintGolden {
    static let member: Int64 = 3_989_578_878_884_704_773
    static let subBucket = 956
}

@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct ClientTests {
    @Test func typedRepliesAndPipelining() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let binary: [UInt8] = [0, 1, 2, 0xFF, 13, 10]
        var set = RedisArguments(["k"])
        set.append(bytes: binary)
        let replies = try await client.pipeline([
            RedisCommand("SET", arguments: set),
            RedisCommand("GET", "k"),
            RedisCommand("GET", "missing"),
            RedisCommand("INCRBY", "n", "5"),
            RedisCommand("HSET", "k", "f", "v"),
            RedisCommand("RPUSH", "l", "a", "b"),
            RedisCommand("LRANGE", "l", "0", "-1"),
        ])
        #expect(replies[0] == .status("OK"))
        #expect(replies[1] == .bulk(binary))
        #expect(replies[2] == .null)
        #expect(replies[3] == .integer(5))
        guard case .error(let message) = replies[4] else {
            Issue.record("expected WRONGTYPE, got \(replies[4])")
            return
        }
        #expect(message.hasPrefix("WRONGTYPE"))
        #expect(replies[6] == .array([.bulk(Array("a".utf8)), .bulk(Array("b".utf8))]))
        await #expect(throws: RedisError.server("ERR unknown command 'NOPE', with args beginning with: ")) {
            try await client.send(RedisCommand("NOPE"))
        }
    }

    /// A round trip written before its caller is cancelled still waits for its reply (a feedback poller
    /// stopping mid-read records what it read), unless the task runs with `RedisWait.endsOnCancellation`
    /// (the pipeline's lanes, abandoned at the drain deadline): then the wait ends at once, and the
    /// connection goes on serving the calls after it.
    @Test func aCancelledCallWaitsForItsReplyUnlessItMayBeAbandoned() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let other = try server.client()
        _ = try await client.send(RedisCommand("PING"))
        // The cancellation comes while BLPOP waits in the server (seen from another connection, not after
        // a fixed sleep a loaded machine can outlast); an LPUSH then answers it.
        func blockedInTheServer() async throws {
            let deadline = ContinuousClock.now + .seconds(300)  // a guard against a hang only
            while !((try await other.send(RedisCommand("INFO", "clients")).string ?? "").contains("blocked_clients:1")) {
                guard ContinuousClock.now < deadline else { throw TestFailure("BLPOP never waited in the server") }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        let waiting = Task { try await client.send(RedisCommand("BLPOP", "empty", "600")) }
        try await blockedInTheServer()
        waiting.cancel()
        _ = try await other.send(RedisCommand("LPUSH", "empty", "one"))
        #expect(
            try await waiting.value == .array([.bulk(Array("empty".utf8)), .bulk(Array("one".utf8))]),
            "the reply came, though the caller was cancelled")
        let abandoned = Task {
            try await RedisWait.$endsOnCancellation.withValue(true) { try await client.send(RedisCommand("BLPOP", "empty", "600")) }
        }
        try await blockedInTheServer()
        abandoned.cancel()
        await #expect(throws: CancellationError.self) { try await abandoned.value }
        _ = try await other.send(RedisCommand("LPUSH", "empty", "two"))
        // The abandoned call's reply still comes to its own promise: the next call gets its own.
        #expect(try await client.send(RedisCommand("ECHO", "after")) == .bulk(Array("after".utf8)))
    }

    @Test func scriptsRunByDigestAndReloadAfterFlush() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let script = RedisScript("return tonumber(ARGV[1]) + 1")
        #expect(try await client.eval(script, arguments: RedisArguments(["41"])) == .integer(42))
        let loaded = try await client.send(RedisCommand("SCRIPT", "EXISTS", script.sha1))
        #expect(loaded == .array([.integer(1)]))
        try await client.send(RedisCommand("SCRIPT", "FLUSH"))
        #expect(try await client.eval(script, arguments: RedisArguments(["1"])) == .integer(2))
        await #expect(throws: RedisError.self) {
            try await client.eval(RedisScript("return redis.call('NOPE')"))
        }
    }

    @Test func authenticatesAndSelectsDatabase() async throws {
        let server = try await RedisServer(extraArguments: ["--requirepass", "s3cret"])
        defer { server.stop() }
        let admin = try RedisClient(url: "redis://:s3cret@127.0.0.1:\(server.port)/0")
        try await admin.send(RedisCommand("ACL", "SETUSER", "alice", "on", ">pw", "~*", "&*", "+@all"))

        let inDatabase3 = try RedisClient(url: "redis://:s3cret@127.0.0.1:\(server.port)/3")
        try await inDatabase3.send(RedisCommand("SET", "where", "three"))
        try await admin.send(RedisCommand("SELECT", "3"))
        #expect(try await admin.send(RedisCommand("GET", "where")) == .bulk(Array("three".utf8)))

        let alice = try RedisClient(url: "redis://alice:pw@127.0.0.1:\(server.port)/0")
        #expect(try await alice.send(RedisCommand("ACL", "WHOAMI")) == .bulk(Array("alice".utf8)))

        let wrong = try RedisClient(url: "redis://alice:nope@127.0.0.1:\(server.port)/0")
        await #expect {
            try await wrong.connect()
        } throws: { error in
            guard case RedisError.authentication(let message) = error else { return false }
            return !message.contains("nope")
        }
        // A wrong password is a configuration error: calls fail instead of retrying forever.
        await #expect(throws: RedisError.self) { try await wrong.send(RedisCommand("PING")) }
    }

    @Test func callGivesUpAfterMaximumWait() async throws {
        let server = try await RedisServer()
        let client = try server.client(maximumWait: .milliseconds(300))
        server.stop()
        await #expect {
            try await client.send(RedisCommand("PING"))
        } throws: { error in
            guard case RedisError.unavailable = error else { return false }
            return true
        }
    }
}
