import Foundation
import ProcessSupport
import TestSupport
import Testing

@testable import Redis

private let shop = "com.example.shop"
private let news = "com.example.news"
private func token(_ n: Int) -> String { String(format: "%064X", n) }

/// Issue 15's key layout, checked on a real redis-server: every key a script touches is declared in
/// its KEYS, and with one slot per call (the Redis Cluster path) every call's keys share one slot.
/// `MONITOR` shows each script call and every command the script ran, with their keys.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct ClusterLayoutTests {
    /// One script call as `MONITOR` showed it: its KEYS and the keys its commands touched.
    struct ScriptCall {
        var declared: [String]
        var touched: [String] = []
    }

    /// Runs `workload` while `redis-cli monitor` records, and returns the script calls it made.
    func monitored(_ server: RedisServer, _ workload: () async throws -> Void) async throws -> [ScriptCall] {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("monitor-\(UUID().uuidString).txt")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        // Through a shell: redis-cli writes straight to the file, and ChildProcess ends it with SIGKILL.
        let cli = URL(fileURLWithPath: RedisServer.executable ?? "/usr/bin/redis-server").deletingLastPathComponent()
            .appendingPathComponent("redis-cli").path
        let monitor = try ChildProcess(
            executable: "/bin/sh", arguments: ["-c", "exec '\(cli)' -p \(server.port) monitor > '\(output.path)'"])
        defer { monitor.killWithoutWaiting() }
        try await waitUntil { (try? String(contentsOf: output, encoding: .utf8))?.hasPrefix("OK") == true }
        try await workload()
        // A marker command, so everything before it has been written out.
        let client = try server.client()
        _ = try await client.send(RedisCommand("ECHO", "end-of-workload"))
        try await waitUntil { (try? String(contentsOf: output, encoding: .utf8))?.contains("end-of-workload") == true }
        await monitor.kill()

        var calls: [ScriptCall] = []
        for line in try String(contentsOf: output, encoding: .utf8).split(separator: "\n") {
            guard let open = line.firstIndex(of: "["), let close = line.firstIndex(of: "]") else { continue }
            let source = line[line.index(after: open)..<close]
            let words = Self.words(line[line.index(after: close)...])
            guard let name = words.first?.uppercased() else { continue }
            if source.hasSuffix(" lua") {
                guard !calls.isEmpty else { continue }
                let arguments = Array(words.dropFirst())
                // The commands the scripts use: DEL and EXISTS take only keys, the others one key first.
                calls[calls.count - 1].touched += ["DEL", "EXISTS"].contains(name) ? arguments : Array(arguments.prefix(1))
            } else if name == "EVALSHA" || name == "EVAL", words.count >= 3, let count = Int(words[2]) {
                calls.append(ScriptCall(declared: Array(words.dropFirst(3).prefix(count))))
            }
        }
        return calls
    }

    /// The quoted words of a `MONITOR` line (`"a" "b\"c"`).
    static func words(_ text: Substring) -> [String] {
        var words: [String] = []
        var current: [UInt8] = []
        var inside = false
        var bytes = Array(text.utf8)[...]
        while let byte = bytes.popFirst() {
            if !inside {
                if byte == UInt8(ascii: "\"") {
                    inside = true
                    current = []
                }
            } else if byte == UInt8(ascii: "\\"), let next = bytes.popFirst() {
                switch next {
                case UInt8(ascii: "n"): current.append(10)
                case UInt8(ascii: "r"): current.append(13)
                case UInt8(ascii: "t"): current.append(9)
                case UInt8(ascii: "x"):
                    let hex = String(decoding: [bytes.popFirst() ?? 48, bytes.popFirst() ?? 48], as: UTF8.self)
                    current.append(UInt8(hex, radix: 16) ?? 0)
                default: current.append(next)
                }
            } else if byte == UInt8(ascii: "\"") {
                inside = false
                words.append(String(decoding: current, as: UTF8.self))
            } else {
                current.append(byte)
            }
        }
        return words
    }

    func waitUntil(_ condition: () async throws -> Bool) async throws {
        // A guard against a hang, not a timing assertion: generous for a loaded machine.
        let deadline = ContinuousClock.now + .seconds(300)
        while try await !condition() {
            guard ContinuousClock.now < deadline else { throw TestFailure("monitor did not report in 300 s") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Everything the store does, across apps and token buckets: feedback, registrations, gate (new,
    /// suppressed, duplicate, in flight in another live process, taken over from a dead one), settle of
    /// every outcome, publish counts, shard state.
    func workload(_ storeA: PipelineStore, _ storeB: PipelineStore, now: Int64 = PipelineStore.epochNow()) async throws {
        try await storeA.beat()
        try await storeB.beat()
        try await storeA.suppress((0..<8).map { Suppression(app: shop, tokenHex: token($0 * 5), at: 100, reason: "feedback") })
        try await storeA.applyRegistrations([
            Registration(app: shop, tokenHex: token(5), registeredAt: 200, language: "de", user: "u-5", timeZone: "Europe/Berlin"),
            Registration(app: news, tokenHex: token(3), registeredAt: 50, language: "fr"),
        ])
        let requests = (0..<40).map { GateRequest(jobID: "j\($0)", app: $0 % 3 == 0 ? news : shop, tokenHex: token($0)) }
        let decisions = try await storeA.gate(requests + [requests[7]])
        #expect(decisions.last == .inFlight, "a second copy in one batch")
        #expect(decisions[5] == .admitted(language: "de"), "registered after its suppression")
        #expect(decisions[10] == .suppressed && decisions[3] == .admitted(language: "fr"))
        let sets = try await storeA.beginPublish(campaign: "c", expectedJobs: 40)
        try await storeA.recordPublished(campaign: "c", jobIDs: requests.map(\.jobID), markSets: sets)
        try await storeA.finishPublish(campaign: "c")
        try await storeA.incrementPublished(campaign: "c", by: 1)

        // Leases of another process: held while it lives, taken over once its heartbeat is gone.
        let others = (0..<6).map { GateRequest(jobID: "j\($0 + 1)", app: ($0 + 1) % 3 == 0 ? news : shop, tokenHex: token($0 + 1)) }
        #expect(try await storeB.gate(others).allSatisfy { $0 == .inFlightElsewhere(owner: "owner-a") || $0 == .suppressed })
        try await storeA.endHeartbeat()
        let taken = try await storeB.gate(others)
        #expect(taken.filter { if case .takenOver = $0 { true } else { false } }.count == 6)

        var outcomes: [SettledOutcome] = []
        for (request, decision) in zip(requests, decisions) {
            switch decision {
            case .admitted:
                let kind: SettledOutcomeKind = request.jobID.hasSuffix("9") ? .rejected : .accepted
                outcomes.append(
                    SettledOutcome(
                        jobID: request.jobID, app: request.app, tokenHex: request.tokenHex, campaign: "c", kind: kind,
                        code: kind == .rejected ? "8" : nil,
                        suppressToken: kind == .rejected ? TokenSuppression(reason: "invalid-token") : nil, shard: 1))
            case .suppressed:
                outcomes.append(
                    SettledOutcome(jobID: request.jobID, app: request.app, tokenHex: request.tokenHex, campaign: "c", kind: .suppressed))
            default: break
            }
        }
        try await storeB.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: 40), settledAt: now))
        try await storeB.settle(
            SettleBatch(
                outcomes: [SettledOutcome(jobID: "j0", app: news, tokenHex: token(0), campaign: "c", kind: .deduped)], settledAt: now))
        #expect(try await storeB.gate([requests[0]], now: now) == [.deduped])
        try await storeB.increment(.deadLetterFailures, by: 1, now: now)
        try await storeB.updateShard(ShardStatus(app: shop, shard: 1, state: "connected"))
    }

    func stores(_ client: RedisClient, oneSlotPerCall: Bool) -> (PipelineStore, PipelineStore) {
        var configuration = PipelineStoreConfiguration(leaseOwner: "owner-a", ownerHeartbeat: .seconds(600), oneSlotPerCall: oneSlotPerCall)
        let a = PipelineStore(client: client, configuration: configuration)
        configuration.leaseOwner = "owner-b"
        return (a, PipelineStore(client: client, configuration: configuration))
    }

    @Test(arguments: [true, false])
    func scriptsTouchOnlyDeclaredKeys(oneSlotPerCall: Bool) async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let (a, b) = stores(client, oneSlotPerCall: oneSlotPerCall)
        let calls = try await monitored(server) { try await workload(a, b) }
        #expect(calls.count > 10)
        #expect(calls.reduce(0) { $0 + $1.touched.count } > 100, "MONITOR showed the scripts' commands")
        for call in calls {
            let undeclared = Set(call.touched).subtracting(call.declared)
            #expect(undeclared.isEmpty, "keys built inside a script: \(undeclared.sorted())")
            let slots = Set(call.declared.map { RedisSlot(key: $0) })
            if oneSlotPerCall { #expect(slots.count == 1, "one call, \(slots.count) slots: \(call.declared.prefix(6))") }
        }
        if !oneSlotPerCall {
            // The single-Redis path sends fewer, multi-slot calls: a settle is one call.
            #expect(calls.contains { Set($0.declared.map { RedisSlot(key: $0) }).count > 1 })
        }
        let stats = try await a.readStats(lastMinutes: 1).totals
        #expect(stats[.received] == 40 && stats[.deduped] == 1 && stats[.deadLetterFailures] == 1)
    }

    /// Both paths leave the same data: the cluster path is the single-Redis path grouped differently.
    @Test func bothPathsWriteTheSameKeys() async throws {
        var snapshots: [[String: String]] = []
        let now = PipelineStore.epochNow()
        for oneSlotPerCall in [true, false] {
            let server = try await RedisServer()
            defer { server.stop() }
            let client = try server.client()
            let (a, b) = stores(client, oneSlotPerCall: oneSlotPerCall)
            try await workload(a, b, now: now)
            var snapshot: [String: String] = [:]
            for key in try await client.send(RedisCommand("KEYS", "*")).array?.compactMap(\.string) ?? [] {
                // Batch and publish markers and leases name random ids; the rest must match exactly. (A
                // settle's token-tag parts have markers of their own on the cluster path only: a single
                // Redis runs the batch in one script, under the counters' marker.)
                if key.contains(":batch:") { continue }
                if key.hasSuffix(":inflight") {
                    snapshot["\(key.prefix { $0 != ":" })…marker/lease", default: ""] += "x"
                    continue
                }
                let type = try await client.send(RedisCommand("TYPE", key)).string ?? "?"
                switch type {
                case "hash":
                    let fields = try await client.send(RedisCommand("HGETALL", key)).array?.compactMap(\.string) ?? []
                    let pairs = stride(from: 0, to: fields.count, by: 2).map { "\(fields[$0])=\(fields[$0 + 1])" }
                    snapshot[key] = pairs.filter { !$0.hasPrefix("publish_") }.sorted().joined(separator: ",")
                case "set":
                    snapshot[key] = (try await client.send(RedisCommand("SMEMBERS", key)).array?.compactMap(\.string) ?? []).sorted()
                        .joined(separator: ",")
                default:
                    snapshot[key] = type
                }
            }
            snapshots.append(snapshot)
        }
        #expect(snapshots[0].keys.sorted() == snapshots[1].keys.sorted())
        for key in snapshots[0].keys.sorted() where !key.hasSuffix("marker/lease") && !key.contains(":owner:") {
            #expect(snapshots[0][key] == snapshots[1][key], "\(key)")
        }
    }

    /// A settle whose token-tag parts ran but whose counters did not (the process crashed between the
    /// calls) counts each job exactly once when retried, and a further replay changes nothing — not the
    /// counters, and not a lease another process took since.
    @Test func settleRetriedAfterACrashBetweenItsPartsCountsOnce() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let store = PipelineStore(client: client, configuration: .init(leaseOwner: "owner-a", oneSlotPerCall: true))
        let requests = (0..<40).map { GateRequest(jobID: "r\($0)", app: shop, tokenHex: token($0)) }
        #expect(try await store.gate(requests).allSatisfy { $0 == .admitted(language: nil) })
        let outcomes = requests.enumerated().map { index, request in
            SettledOutcome(
                jobID: request.jobID, app: shop, tokenHex: request.tokenHex, campaign: "c",
                kind: index < 30 ? .accepted : index < 35 ? .rejected : .deadLettered,
                suppressToken: index >= 30 && index < 35 ? TokenSuppression(reason: "invalid-token") : nil)
        }
        let batch = SettleBatch(outcomes: outcomes, events: PipelineEvents(received: 40))
        _ = try await store.settle(batch, partsOnly: true)
        #expect(try await store.readStats().totals.fields.isEmpty, "nothing counted yet")
        #expect(try await store.gate([requests[0]]) == [.deduped], "the records are written")

        let expected: [String: Int64] = [
            "accepted": 30, "rejected": 5, "dead_lettered": 5, "jobs_accepted": 30, "jobs_rejected": 5, "jobs_dead_lettered": 5,
            "jobs_settled": 40,
        ]
        #expect(try await store.settle(batch) == true, "the retry applies the counters")
        #expect(try await store.readCampaign("c").counters.fields == expected)
        #expect(try await store.readStats().totals[.received] == 40)

        // Another process gates a rejected job again meanwhile; a replay of the batch must not free its lease.
        let other = PipelineStore(client: client, configuration: .init(leaseOwner: "owner-b", oneSlotPerCall: true))
        try await other.beat()
        #expect(try await other.gate([requests[31]]) == [.suppressed], "its token was suppressed by the batch")
        #expect(try await other.gate([requests[36]]) == [.admitted(language: nil)])
        #expect(try await store.settle(batch) == false, "a replay changes nothing")
        #expect(try await store.readCampaign("c").counters.fields == expected)
        #expect(try await store.readStats().totals[.received] == 40)
        #expect(try await store.lease(jobID: "r36", app: shop, tokenHex: token(36))?.owner == "owner-b")

        // The same on a single Redis (both parts in one script): a replay is a no-op.
        let single = PipelineStore(client: client, configuration: .init(leaseOwner: "owner-a"))
        #expect(try await single.settle(batch) == false)
        #expect(try await store.readCampaign("c").counters.fields == expected)
        #expect(try await store.lease(jobID: "r36", app: shop, tokenHex: token(36))?.owner == "owner-b")
    }

    /// On a single Redis a settle is one script under one marker (the counters'), its token-tag parts
    /// without markers of their own: applied once, and a replay (a reply lost, the call sent again) writes
    /// nothing — no count, and no release of a lease another process took since.
    @Test func aSingleRedisSettleReplayedWritesNothing() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let store = PipelineStore(client: client, configuration: .init(leaseOwner: "owner-a"))
        let requests = (0..<20).map { GateRequest(jobID: "s\($0)", app: shop, tokenHex: token($0)) }
        #expect(try await store.gate(requests).allSatisfy { $0 == .admitted(language: nil) })
        let outcomes = requests.enumerated().map { index, request in
            SettledOutcome(
                jobID: request.jobID, app: shop, tokenHex: request.tokenHex, campaign: "c", kind: index < 15 ? .accepted : .deadLettered)
        }
        let batch = SettleBatch(outcomes: outcomes, events: PipelineEvents(received: 20))
        #expect(try await store.settle(batch) == true)
        let expected: [String: Int64] = [
            "accepted": 15, "dead_lettered": 5, "jobs_accepted": 15, "jobs_dead_lettered": 5, "jobs_settled": 20,
        ]
        #expect(try await store.readCampaign("c").counters.fields == expected)
        let markers = try await client.send(RedisCommand("KEYS", "*:batch:*")).array?.compactMap(\.string) ?? []
        #expect(markers == [store.keys.batch(batch.id)], "one marker for the batch")

        let other = PipelineStore(client: client, configuration: .init(leaseOwner: "owner-b"))
        try await other.beat()
        #expect(try await other.gate([requests[17]]) == [.admitted(language: nil)], "a dead letter may be sent again")
        #expect(try await store.settle(batch) == false, "a replay")
        #expect(try await store.readCampaign("c").counters.fields == expected)
        #expect(try await store.readStats().totals[.received] == 20)
        #expect(try await store.lease(jobID: "s17", app: shop, tokenHex: token(17))?.owner == "owner-b")
        #expect(try await store.gate([requests[3]]) == [.deduped])
    }

    @Test func tokenBucketsSpreadAnAppOverSlots() {
        let keys = RedisKeys(prefix: "apns", tokenBuckets: 16)
        let buckets = Set((0..<1000).map { keys.tokenBucket(token($0)) })
        #expect(buckets == Set(0..<16))
        #expect(keys.tokenBucket(token(7)) == keys.tokenBucket(token(7).lowercased()), "case-insensitive")
        #expect(Set(keys.tokenTags(app: shop).map { RedisSlot(key: $0) }).count == 16)
        // A job's keys share its token's tag; the counters share `{apns}`.
        let tag = keys.tokenTag(app: shop, tokenHex: token(7))
        let jobKeys = [
            keys.suppressed(tag: tag), keys.registered(tag: tag), keys.language(tag: tag), keys.profile(tag: tag),
            keys.inFlight(tag: tag), keys.dedup(tag: tag, bucket: 1, subBucket: 2),
        ]
        #expect(Set(jobKeys.map { RedisSlot(key: $0) }).count == 1)
        let counterKeys = [
            keys.stats, keys.stats(minute: "202601010000"), keys.campaign("c"), keys.countedJobs(campaign: "c"),
            keys.publishedJobs(campaign: "c", set: 3), keys.shard(app: shop, shard: 1), keys.batch("b"),
        ]
        #expect(Set(counterKeys.map { RedisSlot(key: $0) }).count == 1)
        // Stable: the bucket is persisted in key names.
        #expect(keys.tokenBucket(token(1)) == RedisKeysGolden.bucketOfToken1)
    }

    @Test func callsGroupBySlot() {
        let keys = RedisKeys()
        let groups = (0..<40).map { n in
            ScriptGroup(tag: keys.tokenTag(app: shop, bucket: n % 16), keys: RedisArguments(), arguments: RedisArguments())
        }
        let perSlot = PipelineStore.calls(groups, oneSlotPerCall: true)
        #expect(perSlot.count == 16)
        #expect(perSlot.allSatisfy { Set($0.map { groups[$0].slot }).count == 1 })
        #expect(perSlot.flatMap { $0 }.sorted() == Array(0..<40))
        #expect(PipelineStore.calls(groups, oneSlotPerCall: false) == [Array(0..<40)])
    }
}

enum RedisKeysGolden {
    static let bucketOfToken1 = 2
}
