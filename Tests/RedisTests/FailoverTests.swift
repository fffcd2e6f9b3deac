import Foundation
import Redis
import TestSupport
import Testing

@testable import RedisClient

/// A primary of a Redis Cluster with replicas fails over while calls run: the client rides it out (no
/// call fails, none is lost), finds the promoted replica although it was configured with the primaries
/// only, and forgets nothing that had reached the replica. Real clusters of `redis-server`s, 3 primaries
/// and 3 replicas each; the victim is primary 2, whose slots are the last third.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct FailoverTests {
    private static let victim = 2

    /// `kill -9` of a primary in the middle of a stream of pipelines over every primary, then the dead
    /// node started again (it comes back as its successor's replica): every round completes, every key
    /// holds the last round, and the client's map names the promoted replica as the primary.
    @Test func aKilledPrimarysReplicaTakesOverAndNoCallFails() async throws {
        let server = try await RedisClusterServer(masters: 3, replicas: 1, nodeTimeout: .seconds(2))
        defer { server.stop() }
        let successor = server.replicaIndices(of: Self.victim)[0]
        let cluster = try server.client(seeds: server.primaryAddresses, maximumWait: .seconds(120), logLevel: .critical)
        try await cluster.connect()
        let keys = (0..<90).map { "failover:\($0)" }
        #expect(keys.filter { Self.onVictim($0) }.count > 10)

        let rounds = Rounds()
        let writer = Task { () throws -> Int in
            var round = 0
            while await !rounds.stopped {
                round += 1
                let replies = try await cluster.pipeline(keys.map { RedisCommand("SET", $0, String(round)) })
                guard replies.allSatisfy({ $0 == .status("OK") }) else { throw TestFailure("round \(round): \(replies)") }
                await rounds.completed(round)
            }
            return round
        }
        try await rounds.waitFor(5)
        await server.nodes[Self.victim].kill()
        try await server.waitUntilPrimary(successor)
        try await rounds.waitFor(await rounds.count + 5)
        // The old primary back with its nodes.conf: the cluster makes it its successor's replica.
        try await server.nodes[Self.victim].start()
        try await server.waitUntilReady()
        try await rounds.waitFor(await rounds.count + 5)
        await rounds.stop()
        let last = try await writer.value

        let values = try await cluster.pipeline(keys.map { RedisCommand("GET", $0) })
        #expect(values.map(\.string) == Array(repeating: String(last), count: keys.count))
        let primaries = try await cluster.primaryNodes()
        #expect(primaries.contains(RedisNodeAddress(host: "127.0.0.1", port: server.nodes[successor].port)))
        #expect(!primaries.contains(RedisNodeAddress(host: "127.0.0.1", port: server.nodes[Self.victim].port)))
        #expect(await cluster.statistics.slotMapRefreshes > 1)
    }

    /// A graceful fail-over (`CLUSTER FAILOVER` on the replica): the client still holds the old map, and
    /// the old primary, a replica now, answers `MOVED`; the client follows it to the new primary.
    @Test func aDemotedPrimarySendsTheClientToItsSuccessor() async throws {
        let server = try await RedisClusterServer(masters: 3, replicas: 1, nodeTimeout: .seconds(2))
        defer { server.stop() }
        let successor = server.replicaIndices(of: Self.victim)[0]
        let cluster = try server.client(seeds: server.primaryAddresses, maximumWait: .seconds(120), logLevel: .critical)
        try await cluster.connect()
        let key = (0...).lazy.map { "demoted:\($0)" }.first { Self.onVictim($0) }!
        try await cluster.send(RedisCommand("SET", key, "before"))

        try await server.nodeClient(successor).send(RedisCommand("CLUSTER", "FAILOVER"))
        try await server.waitUntilPrimary(successor)
        try await server.waitUntilReady()
        // The old primary answers for the slot only with a redirection now.
        let direct = try await server.nodeClient(Self.victim).pipeline([RedisCommand("SET", key, "direct")])[0]
        #expect(direct.isMoved)

        #expect(try await cluster.send(RedisCommand("SET", key, "after")) == .status("OK"))
        #expect(try await cluster.send(RedisCommand("GET", key)).string == "after")
        #expect(try await server.nodeClient(successor).send(RedisCommand("GET", key)).string == "after")
        #expect(await cluster.statistics.moved >= 1)
    }

    /// The pipeline's own stores through a `kill -9` fail-over: gate and settle calls of 40 jobs each
    /// run on while the victim dies and its replica takes over; every call returns (no job lost). Asked
    /// again afterwards, every job settled before the victim's replica had caught up — and every job
    /// settled after the promotion — is deduped; only jobs settled in between may have been forgotten
    /// (asynchronous replication), and would be sent once more: a duplicate, never a loss.
    @Test func gateAndSettleRunThroughAFailoverAndForgetOnlyWhatWasNotReplicated() async throws {
        let server = try await RedisClusterServer(masters: 3, replicas: 1, nodeTimeout: .seconds(2))
        defer { server.stop() }
        let successor = server.replicaIndices(of: Self.victim)[0]
        let store = PipelineStore(
            client: try server.client(seeds: server.primaryAddresses, maximumWait: .seconds(120), logLevel: .critical))
        let perRound = 40
        func requests(_ round: Int) -> [GateRequest] {
            (0..<perRound).map { GateRequest(jobID: "r\(round)-\($0)", app: app, tokenHex: token(round * perRound + $0)) }
        }

        let rounds = Rounds()
        let writer = Task { () throws -> Int in
            var round = 0
            while await !rounds.stopped {
                await rounds.holdWhilePaused()
                round += 1
                let batch = requests(round)
                let decisions = try await store.gate(batch)
                guard decisions.allSatisfy({ $0 == .admitted(language: nil) }) else {
                    throw TestFailure("round \(round) gated \(decisions)")
                }
                try await store.settle(
                    SettleBatch(outcomes: batch.map { SettledOutcome(jobID: $0.jobID, app: app, tokenHex: $0.tokenHex, kind: .accepted) }))
                await rounds.completed(round)
            }
            return round
        }
        try await rounds.waitFor(5)
        // Everything settled up to `replicated` is on the victim's replica before the kill; the writer
        // then runs on, so that calls are in flight when the victim dies.
        let replicated = try await rounds.pause()
        try await server.waitUntilReplicaCaughtUp(Self.victim)
        await rounds.resume()
        try await rounds.waitFor(replicated + 2)
        await server.nodes[Self.victim].kill()
        let killed = await rounds.count
        try await server.waitUntilPrimary(successor)
        try await rounds.waitFor(await rounds.count + 5)
        await rounds.stop()
        let last = try await writer.value

        var forgotten: [Int] = []
        for round in 1...last {
            let again = try await store.gate(requests(round))
            // Not deduped: its settle was forgotten — admitted again, or in flight when the gate's lease
            // reached the replica and the settle that released it did not.
            let unknown = again.filter { $0 != .deduped }
            #expect(unknown.allSatisfy { $0 == .admitted(language: nil) || $0 == .inFlight }, "round \(round): \(again)")
            if !unknown.isEmpty { forgotten.append(round) }
        }
        print(
            "fail-over: \(last) rounds of \(perRound) jobs; rounds forgotten \(forgotten) (replica caught up at \(replicated), kill at \(killed))"
        )
        // Between the replica's last catch-up and the kill (plus the round in flight at the kill).
        #expect(
            forgotten.allSatisfy { $0 > replicated && $0 <= killed + 1 },
            "forgotten rounds \(forgotten), replicated \(replicated), killed \(killed)")
    }

    /// With `held_replica_acks` 1, a call that holds jobs returns only once each node's replica has
    /// them: with the replicas stopped it fails as an unavailable Redis does (its messages stay
    /// unsettled), where a store without the setting returns at once; with the replicas back it returns.
    @Test func heldJobsWaitForTheirReplicas() async throws {
        let server = try await RedisClusterServer(masters: 3, replicas: 1)
        defer { server.stop() }
        func store(acks: Int) throws -> PipelineStore {
            var configuration = PipelineStoreConfiguration()
            configuration.heldReplicaAcks = acks
            configuration.heldReplicaWait = .seconds(2)
            return PipelineStore(client: try server.client(logLevel: .critical), configuration: configuration)
        }
        let now: Int64 = 1_800_000_000_000
        func hold(_ range: Range<Int>) -> [Deferral] {
            let messages = range.map { n in
                DeferredMessage.member(key: Array(String(format: "%064x", n &* 2_654_435_761).utf8), value: Array("job \(n)".utf8))
            }
            return [Deferral(campaign: "spring", mode: .hold(dueMs: now + 3_600_000), messages: messages)]
        }
        let waiting = try store(acks: 1)
        #expect(try await waiting.deferJobs(hold(0..<200), nowMs: now) == [Array(repeating: .held, count: 200)])

        let replicas = (0..<3).flatMap { server.replicaIndices(of: $0) }
        for replica in replicas { server.nodes[replica].signal(SIGSTOP) }
        defer { for replica in replicas { server.nodes[replica].signal(SIGCONT) } }
        await #expect {
            _ = try await waiting.deferJobs(hold(200..<400), nowMs: now)
        } throws: { error in
            guard case RedisError.unavailable(_, let lastError) = error else { return false }
            return lastError.contains("held_replica_acks")
        }
        #expect(try await store(acks: 0).deferJobs(hold(400..<600), nowMs: now) == [Array(repeating: .held, count: 200)])

        for replica in replicas { server.nodes[replica].signal(SIGCONT) }
        #expect(try await waiting.deferJobs(hold(600..<800), nowMs: now) == [Array(repeating: .held, count: 200)])
        #expect(try await waiting.deferredCount(campaign: "spring") == 800)
    }

    private static func onVictim(_ key: String) -> Bool { RedisSlot(key: key).value >= RedisSlot.count * victim / 3 }
}

private let app = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064x", n) }

/// The writer's progress, shared with the test that injects the fault.
private actor Rounds {
    private(set) var count = 0
    private(set) var stopped = false
    private var paused = false
    private var holding = false

    func completed(_ round: Int) { count = round }
    func stop() { stopped = true }

    /// Stops the writer between two rounds; returns the rounds completed by then.
    func pause() async throws -> Int {
        paused = true
        while !holding { try await Task.sleep(for: .milliseconds(5)) }
        return count
    }

    func resume() { paused = false }

    /// The writer's side of ``pause()``.
    func holdWhilePaused() async {
        while paused {
            holding = true
            try? await Task.sleep(for: .milliseconds(5))
        }
        holding = false
    }

    /// Until `round` rounds completed; a bound of its own, generous: a slow machine makes it slower,
    /// and only a writer that stopped for good fails it.
    func waitFor(_ round: Int, timeout: Duration = .seconds(180)) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while count < round {
            guard clock.now < deadline else { throw TestFailure("\(count) of \(round) rounds after \(timeout)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

extension RedisClusterServer {
    /// Until node `index`'s replicas have acknowledged every write it had when asked
    /// (`master_repl_offset` against each `slaveN`'s `offset`).
    func waitUntilReplicaCaughtUp(_ index: Int, timeout: Duration = .seconds(60)) async throws {
        let target = Int(try await replicationInfo(index)["master_repl_offset"] ?? "") ?? .max
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            let offsets = try await replicationInfo(index).filter { $0.key.hasPrefix("slave") }.values.compactMap { value in
                value.split(separator: ",").first { $0.hasPrefix("offset=") }.flatMap { Int($0.dropFirst(7)) }
            }
            if !offsets.isEmpty, offsets.allSatisfy({ $0 >= target }) { return }
            guard clock.now < deadline else { throw TestFailure("replicas of node \(index) at \(offsets), primary at \(target)") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
