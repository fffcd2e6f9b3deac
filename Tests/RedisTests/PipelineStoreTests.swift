import Foundation
import Redis
import TestSupport
import Testing

private let app = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064X", n) }  // upper-case on purpose: tokens are case-insensitive

@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct GateTests {
    @Test(arguments: RedisTestTarget.allCases)
    func settledJobIsDeduped(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let decisions = try await store.gate([GateRequest(jobID: "a", app: app, tokenHex: token(1))])
        #expect(decisions == [.admitted(language: nil)])
        try await store.settle(SettleBatch(outcomes: [SettledOutcome(jobID: "a", app: app, tokenHex: token(1), kind: .accepted)]))
        let again = try await store.gate([
            GateRequest(jobID: "a", app: app, tokenHex: token(1)),
            GateRequest(jobID: "b", app: app, tokenHex: token(1)),
        ])
        #expect(again == [.deduped, .admitted(language: nil)])

        // Records expire: the dedup key has a TTL beyond the retention, and a gate far enough in the
        // future no longer looks at the old bucket.
        let now = PipelineStore.epochNow()
        let width = store.configuration.dedupBucketWidth.components.seconds
        let retention = store.configuration.dedupRetention.components.seconds
        let ttl =
            try await store.client.send(
                RedisCommand(
                    "TTL",
                    store.keys.dedup(
                        tag: store.keys.tokenTag(app: app, tokenHex: token(1)), bucket: now / width,
                        subBucket: JobFingerprint(jobID: "a").subBucket(of: store.configuration.dedupSubBucketsPerTag)))
            ).integer ?? -2
        #expect(ttl > retention && ttl <= retention + width)
        #expect(try await store.gate([GateRequest(jobID: "a", app: app, tokenHex: token(1))], now: now + retention - 1) == [.deduped])
        #expect(
            try await store.gate([GateRequest(jobID: "a", app: app, tokenHex: token(1))], now: now + retention + 2 * width) == [
                .admitted(language: nil)
            ])
    }

    @Test(arguments: RedisTestTarget.allCases)
    func jobInFlightIsNotAdmittedTwice(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection(), configuration: .init(inFlightLease: .seconds(30)))
        #expect(try await store.gate([GateRequest(jobID: "a", app: app, tokenHex: token(1))]) == [.admitted(language: nil)])
        // Another copy (redelivery, other process) while the first is between gate and settle.
        #expect(try await store.gate([GateRequest(jobID: "a", app: app, tokenHex: token(1))]) == [.inFlight])
        // Two copies in one batch.
        let batch = try await store.gate([
            GateRequest(jobID: "b", app: app, tokenHex: token(2)),
            GateRequest(jobID: "b", app: app, tokenHex: token(2)),
        ])
        #expect(batch == [.admitted(language: nil), .inFlight])

        // The lease expires on its own (a crashed process does not block the job forever)…
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let pttl = (try await store.lease(jobID: "a", app: app, tokenHex: token(1))?.expiresAtMs ?? 0) - nowMs
        #expect(pttl > 0 && pttl <= 30_000)

        // …and settling releases it: a rejected job may come again, an accepted one is deduped.
        try await store.settle(
            SettleBatch(outcomes: [
                SettledOutcome(jobID: "a", app: app, tokenHex: token(1), kind: .deadLettered, code: "7"),
                SettledOutcome(jobID: "b", app: app, tokenHex: token(2), kind: .accepted),
            ]))
        #expect(try await store.lease(jobID: "a", app: app, tokenHex: token(1)) == nil)
        let after = try await store.gate([
            GateRequest(jobID: "a", app: app, tokenHex: token(1)),
            GateRequest(jobID: "b", app: app, tokenHex: token(2)),
        ])
        #expect(after == [.admitted(language: nil), .deduped])
    }

    /// Issue 10 (2): a lease names its owner process; while the owner's heartbeat lives its lease holds
    /// (for other processes and for the owner's other batches), once the heartbeat is gone (the process
    /// died) the next gate takes the lease over at once.
    @Test(arguments: RedisTestTarget.allCases)
    func leaseOfADeadOwnerIsTakenOver(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let client = try server.connection()
        var a = PipelineStoreConfiguration(inFlightLease: .seconds(600), leaseOwner: "owner-a", ownerHeartbeat: .seconds(600))
        let storeA = PipelineStore(client: client, configuration: a)
        a.leaseOwner = "owner-b"
        let storeB = PipelineStore(client: client, configuration: a)
        try await storeA.beat()
        try await storeB.beat()
        let job = [GateRequest(jobID: "j", app: app, tokenHex: token(1))]
        #expect(try await storeA.gate(job) == [.admitted(language: nil)])
        #expect(try await storeB.gate(job) == [.inFlightElsewhere(owner: "owner-a")], "A is alive")
        #expect(try await storeA.gate(job) == [.inFlight], "another batch of A")
        #expect(try await storeA.lease(jobID: "j", app: app, tokenHex: token(1))?.owner == "owner-a")

        // A dies: its heartbeat is gone (here at once; after a crash, when its TTL runs out).
        _ = try await client.send(RedisCommand("DEL", storeA.keys.owner("owner-a")))
        // A never marked the batch written (it died between gate and send): nothing of it can have
        // reached a device (issue 28).
        #expect(try await storeB.gate(job) == [.takenOver(language: nil, written: false)])
        let taken = try await storeA.lease(jobID: "j", app: app, tokenHex: token(1))
        #expect(taken?.owner == "owner-b")
        let pttl = (taken?.expiresAtMs ?? 0) - Int64(Date().timeIntervalSince1970 * 1000)
        #expect(pttl > 590_000, "a full lease for the new holder")
        #expect(try await storeB.gate(job) == [.inFlight], "now B's, in flight for B's other batches")

        // Settled and counted: resent_after_crash in the totals and the campaign.
        var batch = SettleBatch(
            outcomes: [SettledOutcome(jobID: "j", app: app, tokenHex: token(1), campaign: "c", kind: .accepted)],
            events: PipelineEvents(ambiguous: 1))
        batch.events.resentAfterCrash = 1
        batch.campaignEvents = ["c": PipelineEvents(ambiguous: 1, resentAfterCrash: 1)]
        try await storeB.settle(batch)
        let stats = try await storeB.readStats().totals
        #expect(stats[.resentAfterCrash] == 1 && stats[.ambiguous] == 1)
        let campaign = try await storeB.readCampaign("c").counters
        #expect(campaign[.resentAfterCrash] == 1 && campaign[.ambiguous] == 1)
        #expect(try await storeB.gate(job) == [.deduped])
    }

    /// Issue 14: leases are fields of the token tag's `inflight` hash, and their expiry is in the value
    /// (server clock), not a key TTL. A lapsed lease is free even while its owner lives; a lease of a live
    /// owner is not; a crashed process's lapsed leases whose jobs never come back are deleted by the gate's
    /// sampling, and the hash expires one lease after its last write.
    /// Issue 28 (8): a take-over is counted `ambiguous` only for a batch its dead owner had handed to
    /// its transports: the gate call's written mark (one write per batch, before any byte is written).
    @Test(arguments: RedisTestTarget.allCases)
    func aTakeOverKnowsWhetherTheBatchWasWritten(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let client = try server.connection()
        var a = PipelineStoreConfiguration(inFlightLease: .seconds(600), leaseOwner: "owner-a", ownerHeartbeat: .seconds(600))
        let storeA = PipelineStore(client: client, configuration: a)
        a.leaseOwner = "owner-b"
        let storeB = PipelineStore(client: client, configuration: a)
        try await storeA.beat()
        try await storeB.beat()
        // Two batches of A: the first handed to its transports (marked), the second not yet.
        let written = [GateRequest(jobID: "w1", app: app, tokenHex: token(1)), GateRequest(jobID: "w2", app: app, tokenHex: token(2))]
        let unwritten = [GateRequest(jobID: "u1", app: app, tokenHex: token(3))]
        #expect(try await storeA.gate(written, call: "call-1") == [.admitted(language: nil), .admitted(language: nil)])
        let markedAt = ContinuousClock.now
        #expect(try await storeA.markWritten(call: "call-1", heartbeat: "alive"), "the heartbeat A beat")
        #expect(try await storeA.gate(unwritten, call: "call-2") == [.admitted(language: nil)])
        _ = try await client.send(RedisCommand("DEL", storeA.keys.owner("owner-a")))
        #expect(
            try await storeB.gate(written + unwritten)
                == [
                    .takenOver(language: nil, written: true), .takenOver(language: nil, written: true),
                    .takenOver(language: nil, written: false),
                ])
        // The mark lives a lease (600 s) from when it was set: what is left is that less the time since
        // (however slow the machine), give or take a second.
        let left = try await client.send(RedisCommand("PTTL", storeA.keys.written(owner: "owner-a", call: "call-1"))).integer ?? 0
        let elapsed = ContinuousClock.now - markedAt
        let since = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        #expect(left <= 600_000 && left >= 600_000 - since - 1_000, "PTTL \(left) ms, \(since) ms after the mark")
        await client.close()
    }

    /// A store of process `owner` whose leases and heartbeat outlive any test (600 s).
    static func leaseStore(_ client: any RedisConnection, owner: String) -> PipelineStore {
        PipelineStore(
            client: client,
            configuration: PipelineStoreConfiguration(inFlightLease: .seconds(600), leaseOwner: owner, ownerHeartbeat: .seconds(600)))
    }

    /// A process cut off from Redis longer than its heartbeat lives is dead to the others: they take its
    /// leases over and count `ambiguous` only for the calls marked written. Back, it must not mark a call
    /// gated before the lapse (it would write it uncounted): the mark is fenced by the heartbeat's value,
    /// and a refresh does not bring a lapsed heartbeat back — the process beats a new value. A mark of
    /// an older version (one key for all, `{<p>}:written:<owner>/<call>`) is still read by a take-over.
    @Test(arguments: RedisTestTarget.allCases)
    func aMarkAfterTheHeartbeatLapsedIsRefused(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let client = try server.connection()
        func store(_ owner: String) -> PipelineStore { Self.leaseStore(client, owner: owner) }
        let (storeA, storeB) = (store("owner-a"), store("owner-b"))
        try await storeA.beat(value: "a epoch 0")
        try await storeB.beat()
        #expect(try await storeA.beat(value: "a epoch 0", refresh: true), "a live heartbeat is refreshed")
        let cut = [GateRequest(jobID: "c1", app: app, tokenHex: token(1))]
        _ = try await storeA.gate(cut, call: "a-1")
        // A is cut off past its heartbeat's life; B gets the job again and takes it over, unmarked.
        _ = try await client.send(RedisCommand("DEL", storeA.keys.owner("owner-a")))
        #expect(try await storeB.gate(cut, call: "b-1") == [.takenOver(language: nil, written: false)])
        // A is back: neither its mark nor its refresh goes through.
        #expect(try await storeA.markWritten(call: "a-1", heartbeat: "a epoch 0") == false)
        #expect(try await storeA.beat(value: "a epoch 0", refresh: true) == false)
        #expect(try await client.send(RedisCommand("EXISTS", storeA.keys.owner("owner-a"))).integer == 0, "not brought back")
        // It beats a new epoch: calls gated before it stay unmarkable, new ones are marked.
        try await storeA.beat(value: "a epoch 1")
        #expect(try await storeA.markWritten(call: "a-1", heartbeat: "a epoch 0") == false)
        #expect(try await client.send(RedisCommand("EXISTS", storeA.keys.written(owner: "owner-a", call: "a-1"))).integer == 0)
        let fresh = [GateRequest(jobID: "f1", app: app, tokenHex: token(2))]
        _ = try await storeA.gate(fresh, call: "a-2")
        #expect(try await storeA.markWritten(call: "a-2", heartbeat: "a epoch 1"))

        // An older version's mark, and this version's, are both read by a take-over.
        let old = [GateRequest(jobID: "o1", app: app, tokenHex: token(3))]
        _ = try await storeA.gate(old, call: "a-3")
        _ = try await client.send(RedisCommand("SET", storeA.keys.legacyWritten("owner-a/a-3"), "1"))
        _ = try await client.send(RedisCommand("DEL", storeA.keys.owner("owner-a")))
        #expect(
            try await storeB.gate(fresh + old, call: "b-2") == [
                .takenOver(language: nil, written: true), .takenOver(language: nil, written: true),
            ])
        await client.close()
    }

    /// A take-over of a written job marks the taking call at once: if that process dies too before its
    /// own mark, the next one still counts the job `ambiguous` (the first copy may have reached the device).
    @Test(arguments: RedisTestTarget.allCases)
    func aSecondCrashDuringATakeOverStillCountsTheJob(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let client = try server.connection()
        func store(_ owner: String) -> PipelineStore { Self.leaseStore(client, owner: owner) }
        let (storeA, storeB, storeC) = (store("owner-a"), store("owner-b"), store("owner-c"))
        for s in [storeA, storeB, storeC] { try await s.beat() }
        let written = [GateRequest(jobID: "w1", app: app, tokenHex: token(1))]
        let fresh = [GateRequest(jobID: "f1", app: app, tokenHex: token(2))]
        let unwritten = [GateRequest(jobID: "u1", app: app, tokenHex: token(3))]
        _ = try await storeA.gate(written, call: "a-1")
        try await storeA.markWritten(call: "a-1", heartbeat: nil)
        _ = try await storeA.gate(unwritten, call: "a-2")
        _ = try await client.send(RedisCommand("DEL", storeA.keys.owner("owner-a")))
        // B takes over in two calls and dies before marking either: the call holding a written job is
        // marked by the take-over itself, the other is not.
        #expect(
            try await storeB.gate(written + fresh, call: "b-1") == [.takenOver(language: nil, written: true), .admitted(language: nil)])
        #expect(try await storeB.gate(unwritten, call: "b-2") == [.takenOver(language: nil, written: false)])
        _ = try await client.send(RedisCommand("DEL", storeA.keys.owner("owner-b")))
        #expect(
            try await storeC.gate(written + fresh + unwritten)
                == [
                    .takenOver(language: nil, written: true), .takenOver(language: nil, written: true),
                    .takenOver(language: nil, written: false),
                ])
        await client.close()
    }

    @Test(arguments: RedisTestTarget.allCases)
    func lapsedLeasesAreFreeAndCollected(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let client = try server.connection()
        let store = PipelineStore(client: client, configuration: .init(inFlightLease: .seconds(30), leaseOwner: "owner-b"))
        let other = PipelineStore(client: client, configuration: .init(leaseOwner: "owner-x", ownerHeartbeat: .seconds(600)))
        try await other.beat()  // owner-x lives: only the expiry can free its leases
        let hash = store.keys.inFlight(app: app, tokenHex: token(1))
        let member = { (id: String) in String(JobFingerprint(jobID: id).member) }
        let farFuture = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
        _ = try await client.send(
            RedisCommand("HSET", hash, member("lapsed"), "owner-x/call-1/1", member("held"), "owner-x/call-1/\(farFuture)"))
        // Lapsed leases of a crashed process: never gated again.
        for n in 0..<10 { _ = try await client.send(RedisCommand("HSET", hash, member("gone-\(n)"), "owner-y/call-2/1000")) }
        #expect(try await client.send(RedisCommand("HLEN", hash)).integer == 12)

        let decisions = try await store.gate([
            GateRequest(jobID: "lapsed", app: app, tokenHex: token(1)),
            GateRequest(jobID: "held", app: app, tokenHex: token(1)),
        ])
        #expect(decisions == [.admitted(language: nil), .inFlightElsewhere(owner: "owner-x")])
        #expect(try await store.lease(jobID: "lapsed", app: app, tokenHex: token(1))?.owner == "owner-b")
        // The new lease replaced the lapsed one in place (no field added); the gate's write then sampled
        // two fields and removed the lapsed ones among them — none when it drew the two live leases (one
        // draw in 66), so that the lapsed fields do go is checked over the 30 gate calls below.
        #expect(try await client.send(RedisCommand("HLEN", hash)).integer ?? 99 <= 12)
        let pttl = try await client.send(RedisCommand("PTTL", hash)).integer ?? -2
        #expect(pttl > 0 && pttl <= 30_000, "the hash lives one lease after its last write")
        // A process with shorter leases does not shorten the hash's life (the 30 s leases live in it).
        let brief = PipelineStore(client: client, configuration: .init(inFlightLease: .seconds(5), leaseOwner: "owner-c"))
        #expect(try await brief.gate([GateRequest(jobID: "brief", app: app, tokenHex: token(1))]) == [.admitted(language: nil)])
        #expect(try await client.send(RedisCommand("PTTL", hash)).integer ?? 0 > 5_000)
        for n in 0..<30 { _ = try await store.gate([GateRequest(jobID: "more-\(n)", app: app, tokenHex: token(1))]) }
        var lapsed = 0
        for n in 0..<10 where try await client.send(RedisCommand("HEXISTS", hash, member("gone-\(n)"))).integer == 1 { lapsed += 1 }
        #expect(lapsed < 10, "sampling deletes lapsed leases as the tag is written")
        // Settling releases the fields it leased: nothing of this store's is left behind.
        try await store.settle(
            SettleBatch(
                outcomes: (["lapsed"] + (0..<30).map { "more-\($0)" }).map {
                    SettledOutcome(jobID: $0, app: app, tokenHex: token(1), kind: $0.hasSuffix("7") ? .rejected : .accepted)
                }))
        let left = try await client.send(RedisCommand("HVALS", hash)).array?.compactMap(\.string) ?? []
        #expect(!left.contains { $0.hasPrefix("owner-b/") })
        #expect(left.contains { $0.hasPrefix("owner-x/") }, "another owner's live lease stays")
    }

    @Test(arguments: RedisTestTarget.allCases)
    func suppressionThenRegistration(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let request = { (id: String) in GateRequest(jobID: id, app: app, tokenHex: token(7)) }
        try await store.suppress([Suppression(app: app, tokenHex: token(7), at: 1000, reason: "feedback")])
        #expect(try await store.gate([request("1")]) == [.suppressed])
        #expect(try await store.lease(jobID: "1", app: app, tokenHex: token(7)) == nil, "a suppressed job takes no lease")

        // Registered before the suppression (or at the same second): still suppressed.
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(7), registeredAt: 900)])
        #expect(try await store.gate([request("2")]) == [.suppressed])
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(7), registeredAt: 1000)])
        #expect(try await store.gate([request("3")]) == [.suppressed])
        // Registered after it: lifted.
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(7), registeredAt: 1100, language: "de")])
        #expect(try await store.gate([request("4")]) == [.admitted(language: "de")])
        // A later feedback suppresses again; an older one does not overwrite it.
        try await store.suppress([Suppression(app: app, tokenHex: token(7), at: 1200, reason: "feedback")])
        try await store.suppress([Suppression(app: app, tokenHex: token(7), at: 1050, reason: "old")])
        #expect(
            try await store.client.send(RedisCommand("HGET", store.keys.suppressed(app: app, tokenHex: token(7)), token(7).lowercased()))
                .string == "1200:feedback")
        #expect(try await store.gate([request("5")]) == [.suppressed])
    }

    @Test(arguments: RedisTestTarget.allCases)
    func registrationThenSuppression(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let request = { (id: String) in GateRequest(jobID: id, app: app, tokenHex: token(8)) }
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(8), registeredAt: 2000, language: "fr")])
        // Feedback older than the registration (the device re-registered since): not suppressed.
        try await store.suppress([Suppression(app: app, tokenHex: token(8), at: 1500, reason: "feedback")])
        #expect(try await store.gate([request("1")]) == [.admitted(language: "fr")])
        // A stale registration event changes neither the time nor the language.
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(8), registeredAt: 1000, language: "it")])
        #expect(
            try await store.client.send(RedisCommand("HGET", store.keys.registered(app: app, tokenHex: token(8)), token(8).lowercased()))
                .string == "2000")
        #expect(try await store.gate([request("2")]) == [.admitted(language: "fr")])
        // Feedback newer than the registration: suppressed.
        try await store.suppress([Suppression(app: app, tokenHex: token(8), at: 2500, reason: "feedback")])
        #expect(try await store.gate([request("3")]) == [.suppressed])
    }

    /// A registration naming a user or a time zone stores the token's recipient profile
    /// (`{<p>:<app>:<n>}:profile`, `<time zone>\n<user>`) when it is at least as new as the stored
    /// registration: an older one changes nothing, one naming neither keeps it, one naming either replaces it
    /// whole. Beside a settle in the same tags (the parts' key lists hold the profile hash too).
    @Test(arguments: RedisTestTarget.allCases)
    func recipientProfileOfRegistrations(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let field = token(8).lowercased()
        func stored() async throws -> String? {
            try await store.client.send(RedisCommand("HGET", store.keys.profile(app: app, tokenHex: token(8)), field)).string
        }
        #expect(try await store.profile(app: app, tokenHex: token(8)) == (nil, nil))
        try await store.applyRegistrations([
            Registration(app: app, tokenHex: token(8), registeredAt: 2000, language: "fr", user: "u-81723", timeZone: "Europe/Paris"),
            Registration(app: app, tokenHex: token(9), registeredAt: 2000, user: "line\nbreak"),
        ])
        #expect(try await stored() == "Europe/Paris\nu-81723")
        #expect(try await store.profile(app: app, tokenHex: token(8)) == ("Europe/Paris", "u-81723"))
        #expect(try await store.profile(app: app, tokenHex: token(9)) == (nil, "line\nbreak"), "the user may hold a newline")
        // Older: nothing of it is written (nor the language, nor the time).
        try await store.applyRegistrations([
            Registration(app: app, tokenHex: token(8), registeredAt: 1000, language: "it", user: "u-old", timeZone: "Asia/Tokyo")
        ])
        #expect(try await stored() == "Europe/Paris\nu-81723")
        // As new, naming neither: the profile (and the language) stay, the time is written.
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(8), registeredAt: 2000)])
        #expect(try await store.profile(app: app, tokenHex: token(8)) == ("Europe/Paris", "u-81723"))
        #expect(try await store.gate([GateRequest(jobID: "p1", app: app, tokenHex: token(8))]) == [.admitted(language: "fr")])
        // Newer, naming only a time zone: replaces the profile whole (no user any more).
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(8), registeredAt: 3000, timeZone: "America/New_York")])
        #expect(try await stored() == "America/New_York\n")
        #expect(try await store.profile(app: app, tokenHex: token(8)) == ("America/New_York", nil))
        // A settle in the same tag leaves it be.
        try await store.settle(SettleBatch(outcomes: [SettledOutcome(jobID: "p1", app: app, tokenHex: token(8), kind: .accepted)]))
        #expect(try await store.profile(app: app, tokenHex: token(8)) == ("America/New_York", nil))
        #expect(try await store.gate([GateRequest(jobID: "p1", app: app, tokenHex: token(8))]) == [.deduped])
    }

    /// A job without localized alerts does not need the language: a group of only such jobs reads none,
    /// and a group with one such job beside one that needs it reads them for the group.
    @Test(arguments: RedisTestTarget.allCases)
    func languagesAreReadOnlyForAGroupThatNeedsThem(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection(), configuration: .init(tokenBuckets: 1))
        try await store.applyRegistrations([
            Registration(app: app, tokenHex: token(8), registeredAt: 2000, language: "fr"),
            Registration(app: app, tokenHex: token(9), registeredAt: 2000, language: "de"),
        ])
        var plain = GateRequest(jobID: "plain", app: app, tokenHex: token(8))
        plain.needsLanguage = false
        #expect(try await store.gate([plain]) == [.admitted(language: nil)])
        var other = GateRequest(jobID: "other", app: app, tokenHex: token(9))
        other.needsLanguage = false
        let localized = GateRequest(jobID: "localized", app: app, tokenHex: token(8))
        #expect(try await store.gate([other, localized]) == [.admitted(language: "de"), .admitted(language: "fr")])
    }

    @Test(arguments: RedisTestTarget.allCases)
    func languageIsTheRegisteredOneOrNone(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        try await store.applyRegistrations([
            Registration(app: app, tokenHex: token(1), registeredAt: 10, language: "fr"),
            Registration(app: app, tokenHex: token(2), registeredAt: 10),
            Registration(app: "com.example.other", tokenHex: token(1), registeredAt: 10, language: "ja"),
        ])
        let decisions = try await store.gate([
            GateRequest(jobID: "1", app: app, tokenHex: token(1)),
            GateRequest(jobID: "2", app: app, tokenHex: token(2)),
            GateRequest(jobID: "3", app: app, tokenHex: token(3)),
            GateRequest(jobID: "4", app: "com.example.other", tokenHex: token(1).lowercased()),
        ])
        #expect(decisions == [.admitted(language: "fr"), .admitted(language: nil), .admitted(language: nil), .admitted(language: "ja")])
    }

    /// A group larger than one HMGET (the script reads 1000 fields per call): its leases, suppressions and
    /// languages are read in chunks and answered in the jobs' order.
    @Test(arguments: RedisTestTarget.allCases)
    func aGroupLargerThanOneReadIsReadInChunks(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection(), configuration: .init(tokenBuckets: 1))
        let count = 2500
        try await store.applyRegistrations(
            stride(from: 0, to: count, by: 3).map { Registration(app: app, tokenHex: token($0), registeredAt: 2000, language: "fr") })
        try await store.suppress(
            stride(from: 0, to: count, by: 5).map { Suppression(app: app, tokenHex: token($0), at: 3000, reason: "feedback") })
        let decisions = try await store.gate((0..<count).map { GateRequest(jobID: "j\($0)", app: app, tokenHex: token($0)) })
        let expected: [GateDecision] = (0..<count).map { i in
            i % 5 == 0 ? .suppressed : .admitted(language: i % 3 == 0 ? "fr" : nil)
        }
        #expect(decisions == expected)
    }
}

@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct SettlerTests {
    static let now: Int64 = 1_767_225_630  // 2026-01-01T00:00:30Z

    /// One of each outcome plus events: every counter field gets a distinct, checkable value.
    static func mixedBatch(id: String = PipelineStore.newBatchID(), settledAt: Int64 = now) -> SettleBatch {
        SettleBatch(
            id: id,
            outcomes: [
                SettledOutcome(jobID: "j1", app: app, tokenHex: token(1), campaign: "c1", kind: .accepted, shard: 0),
                SettledOutcome(jobID: "j2", app: app, tokenHex: token(2), campaign: "c1", kind: .accepted, shard: 0),
                SettledOutcome(jobID: "j3", app: app, tokenHex: token(3), kind: .accepted, shard: 1),
                SettledOutcome(
                    jobID: "j4", app: app, tokenHex: token(4), campaign: "c1", kind: .rejected, code: "8",
                    suppressToken: TokenSuppression(reason: "invalid-token"), shard: 0),
                SettledOutcome(jobID: "j5", app: app, tokenHex: token(5), kind: .rejected, code: "5", shard: 1),
                SettledOutcome(jobID: "j6", app: app, tokenHex: token(6), campaign: "c1", kind: .deadLettered, code: "1", shard: 0),
                SettledOutcome(jobID: "j7", app: app, tokenHex: token(7), kind: .deadLettered),
                SettledOutcome(jobID: "j8", app: app, tokenHex: token(8), campaign: "c1", kind: .suppressed),
                SettledOutcome(jobID: "j9", app: app, tokenHex: token(9), kind: .deduped),
            ],
            events: PipelineEvents(received: 10, replayed: 4, ambiguous: 2, retried: 3, reconnects: 1),
            shardEvents: [ShardEvents(app: app, shard: 0, replayed: 4)],
            settledAt: settledAt)
    }

    static let expectedTotals: [String: Int64] = [
        "received": 10, "accepted": 3, "rejected": 2, "suppressed": 1, "deduped": 1, "dead_lettered": 2,
        "replayed": 4, "ambiguous": 2, "retried": 3, "reconnects": 1,
        "rejected:8": 1, "rejected:5": 1, "rejected:1": 1,
    ]

    static func scaled(_ counters: [String: Int64], by factor: Int64) -> [String: Int64] {
        counters.mapValues { $0 * factor }
    }

    @Test(arguments: RedisTestTarget.allCases)
    func countersAreExactAfterABatch(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let client = store.client
        #expect(try await store.settle(Self.mixedBatch()))

        #expect(try await client.hashCounters("{apns}:stats") == Self.expectedTotals)
        #expect(try await client.hashCounters("{apns}:stats:202601010000") == Self.expectedTotals)
        let minuteTTL = try await client.send(RedisCommand("TTL", "{apns}:stats:202601010000")).integer ?? -2
        #expect(minuteTTL > 0 && minuteTTL <= 86_400)
        #expect(
            try await client.hashCounters("{apns}:campaign:c1") == [
                "accepted": 2, "rejected": 1, "rejected:8": 1, "dead_lettered": 1, "rejected:1": 1, "suppressed": 1,
                "jobs_accepted": 2, "jobs_rejected": 1, "jobs_dead_lettered": 1, "jobs_suppressed": 1, "jobs_settled": 5,
            ])
        #expect(try await client.hashCounters("{apns}:shard:\(app):0") == ["sent": 4, "replayed": 4])
        #expect(try await client.hashCounters("{apns}:shard:\(app):1") == ["sent": 2])

        // The typed read side agrees.
        try await store.incrementPublished(campaign: "c1", by: 7)
        let campaign = try await store.readCampaign("c1")
        #expect(campaign.published == 7)
        #expect(campaign.counters[.accepted] == 2)
        #expect(campaign.counters.rejected(code: "8") == 1)
        let stats = try await store.readStats(lastMinutes: 3, now: Self.now + 60)
        #expect(stats.totals.fields == Self.expectedTotals)
        #expect(stats.minutes.map(\.minute) == ["202512312359", "202601010000", "202601010001"])
        #expect(stats.minutes[1].counters.fields == Self.expectedTotals)
        #expect(stats.minutes[2].counters.fields.isEmpty)
        #expect(stats.totals[.deadLettered] == 2)
    }

    /// The binary sender's settle-by-time counters (issue 10 item 4) reach the totals and the minute.
    @Test(arguments: RedisTestTarget.allCases)
    func settleByTimeLossesAreCounted(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        try await store.settle(
            SettleBatch(outcomes: [], events: PipelineEvents(lostAfterSettle: 3, refusedAfterSettle: 2), settledAt: Self.now))
        let totals = try await store.readStats(lastMinutes: 1, now: Self.now).totals
        #expect(totals[.lostAfterSettle] == 3 && totals[.refusedAfterSettle] == 2)
        #expect(try await store.client.hashCounters("{apns}:stats:202601010000") == ["lost_after_settle": 3, "refused_after_settle": 2])
    }

    @Test(arguments: RedisTestTarget.allCases)
    func invalidTokenIsSuppressed(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        try await store.settle(Self.mixedBatch())
        var suppressed: [RedisReply] = []
        for tag in store.keys.tokenTags(app: app) {
            suppressed += try await store.client.send(RedisCommand("HGETALL", store.keys.suppressed(tag: tag))).array ?? []
        }
        // Only an outcome that asks for it suppresses its token; another refusal does not.
        #expect(suppressed == [.bulk(Array(token(4).lowercased().utf8)), .bulk(Array("\(Self.now):invalid-token".utf8))])
        #expect(try await store.gate([GateRequest(jobID: "new", app: app, tokenHex: token(4))]) == [.suppressed])
        #expect(try await store.gate([GateRequest(jobID: "new5", app: app, tokenHex: token(5))]) == [.admitted(language: nil)])
    }

    /// An HTTP/2 410 carries the time Apple last knew the token valid: the suppression starts then, so a
    /// registration after that time lifts it (the feedback rule), one before it does not.
    @Test(arguments: RedisTestTarget.allCases)
    func suppressionStartsAtTheAnswersTime(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let since = Self.now - 1_000
        try await store.settle(
            SettleBatch(
                outcomes: [
                    SettledOutcome(
                        jobID: "u1", app: app, tokenHex: token(11), kind: .rejected, code: "Unregistered",
                        suppressToken: TokenSuppression(since: since, reason: "unregistered")),
                    SettledOutcome(
                        jobID: "u2", app: app, tokenHex: token(12), kind: .rejected, code: "Unregistered",
                        suppressToken: TokenSuppression(since: since, reason: "unregistered")),
                ],
                settledAt: Self.now))
        let stored = try await store.client.send(
            RedisCommand("HGET", store.keys.suppressed(app: app, tokenHex: token(11)), token(11).lowercased()))
        #expect(stored == .bulk(Array("\(since):unregistered".utf8)))
        #expect(try await store.client.hashCounters("{apns}:stats")["rejected:Unregistered"] == 2)
        try await store.applyRegistrations([
            Registration(app: app, tokenHex: token(11), registeredAt: since + 1),  // after: lifts it
            Registration(app: app, tokenHex: token(12), registeredAt: since - 1),  // before: does not
        ])
        #expect(
            try await store.gate([
                GateRequest(jobID: "n11", app: app, tokenHex: token(11)), GateRequest(jobID: "n12", app: app, tokenHex: token(12)),
            ]) == [.admitted(language: nil), .suppressed])
    }

    @Test(arguments: RedisTestTarget.allCases)
    func replayedBatchIsNotCountedTwice(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection())
        let batch = Self.mixedBatch()
        #expect(try await store.settle(batch))
        // The same batch again, as after a reply lost with the connection: a no-op.
        #expect(try await store.settle(batch) == false)
        #expect(try await store.client.hashCounters("{apns}:stats") == Self.expectedTotals)
        #expect(try await store.client.hashCounters("{apns}:shard:\(app):0") == ["sent": 4, "replayed": 4])
        // A different batch with the same content is counted.
        #expect(try await store.settle(Self.mixedBatch()))
        #expect(try await store.client.hashCounters("{apns}:stats") == Self.scaled(Self.expectedTotals, by: 2))
        let marker = try await store.client.send(RedisCommand("TTL", store.keys.batch(batch.id))).integer ?? -2
        #expect(marker > 0 && marker <= 3600)
    }

    /// redis-server crashes (SIGKILL) while batches are being settled and comes back on the same port:
    /// the waiting calls complete, and every batch is counted exactly once.
    /// Over plain TCP and over TLS (`rediss://`: the handshake is redone on the new connection).
    @Test(arguments: [false, true])
    func serverRestartMidRunLosesNothingAndCountsNothingTwice(tls: Bool) async throws {
        let server = try await RedisServer(persistent: true, tls: tls)
        defer { server.stop() }
        let client = try server.client(maximumWait: .seconds(20))
        let store = PipelineStore(client: client)
        let batches = 200
        let settled = Counter()
        let run = Task {
            for index in 0..<batches {
                let outcomes = (0..<5).map {
                    SettledOutcome(
                        jobID: "job-\(index)-\($0)", app: app, tokenHex: token($0), campaign: "spring", kind: .accepted, shard: $0 % 2)
                }
                try await store.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: 5)))
                settled.increment()
            }
        }
        while settled.value < 10 { try await Task.sleep(for: .milliseconds(5)) }
        await server.kill()
        // Wait until a call has really found the server gone, then bring it back.
        while await client.statistics.retries == 0, settled.value < batches { try await Task.sleep(for: .milliseconds(5)) }
        #expect(settled.value < batches)
        try await server.start()
        try await run.value

        let totals = try await store.client.hashCounters("{apns}:stats")
        #expect(totals == ["accepted": Int64(batches * 5), "received": Int64(batches * 5)])
        // Each batch has five jobs of its own: per job as per message.
        #expect(
            try await store.client.hashCounters("{apns}:campaign:spring") == [
                "accepted": Int64(batches * 5), "jobs_accepted": Int64(batches * 5), "jobs_settled": Int64(batches * 5),
            ])
        // After the restart the script cache was empty: the gate reloads its script by itself.
        #expect(try await store.gate([GateRequest(jobID: "job-0-0", app: app, tokenHex: token(0))]) == [.deduped])
    }

    /// Every store operation is one round trip: counted exactly by the client, and by the server as read
    /// events (`total_reads_processed`: a batch written in one go is one read, or two when TCP hands it
    /// over in two pieces — seen once in CI; one command per job would be 20 here).
    @Test func eachBatchIsOneRoundTrip() async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let client = try server.client()
        let store = PipelineStore(client: client)
        let observer = try server.client()
        let requests = (0..<20).map { GateRequest(jobID: "rt-\($0)", app: $0 % 2 == 0 ? app : "com.example.other", tokenHex: token($0)) }
        // Warm up: connect and load the scripts (gate, settle, and the tag writes of registrations).
        _ = try await store.gate([GateRequest(jobID: "warm", app: app, tokenHex: token(0))])
        try await store.settle(SettleBatch(outcomes: [SettledOutcome(jobID: "warm", app: app, tokenHex: token(0), kind: .accepted)]))
        try await store.applyRegistrations([Registration(app: app, tokenHex: token(0), registeredAt: 1)])

        func roundTrips(_ operation: () async throws -> Void) async throws -> (client: Int, serverReads: Int) {
            let clientBefore = await client.statistics.roundTrips
            let readsBefore = Int(try await observer.info("stats")["total_reads_processed"] ?? "") ?? -1
            try await operation()
            let readsAfter = Int(try await observer.info("stats")["total_reads_processed"] ?? "") ?? -1
            // Minus one: the observer's second INFO is itself a read.
            return (await client.statistics.roundTrips - clientBefore, readsAfter - readsBefore - 1)
        }
        func isOneRoundTrip(_ r: (client: Int, serverReads: Int)) -> Bool { r.client == 1 && (1...2).contains(r.serverReads) }

        let gate = try await roundTrips { _ = try await store.gate(requests) }
        #expect(isOneRoundTrip(gate), "\(gate)")
        let outcomes = requests.map {
            SettledOutcome(jobID: $0.jobID, app: $0.app, tokenHex: $0.tokenHex, campaign: "c", kind: .accepted, shard: 1)
        }
        let settle = try await roundTrips { try await store.settle(SettleBatch(outcomes: outcomes, events: PipelineEvents(received: 20))) }
        #expect(isOneRoundTrip(settle), "\(settle)")
        let registrations = try await roundTrips {
            try await store.applyRegistrations(
                requests.map { Registration(app: $0.app, tokenHex: $0.tokenHex, registeredAt: 5, language: "en") })
        }
        #expect(isOneRoundTrip(registrations), "\(registrations)")
        let suppressions = try await roundTrips {
            try await store.suppress(requests.map { Suppression(app: $0.app, tokenHex: $0.tokenHex, at: 6, reason: "feedback") })
        }
        #expect(isOneRoundTrip(suppressions), "\(suppressions)")
        let stats = try await roundTrips { _ = try await store.readStats(lastMinutes: 30) }
        #expect(isOneRoundTrip(stats), "\(stats)")
    }

    /// Issue 14: a dedup set gets its expiry once per process and minute, not with every settle batch;
    /// a set that lost it (a key re-created after the server lost its data) gets it again with its next
    /// write once the minute has passed, and the expiry is always the end of its bucket + the retention.
    @Test(arguments: RedisTestTarget.allCases)
    func dedupSetsGetTheirExpiryOncePerMinute(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let store = PipelineStore(client: try server.connection(), configuration: .init(dedupSubBuckets: 16, tokenBuckets: 16))
        // Now (the expiry must be in the future), kept 100 s clear of the bucket's end.
        let clock = PipelineStore.epochNow()
        let width = store.configuration.dedupBucketWidth.components.seconds
        let now = clock - clock % width + min(clock % width, width - 100)
        let key = store.keys.dedup(tag: store.keys.tokenTag(app: app, tokenHex: token(1)), bucket: now / width, subBucket: 0)
        // Job ids whose records land in `key` (sub-bucket 0 of the token's tag: one set per tag here).
        let ids = (0..<3).map { "e\($0)" }
        func settle(_ id: String, at: Int64) async throws {
            try await store.settle(
                SettleBatch(outcomes: [SettledOutcome(jobID: id, app: app, tokenHex: token(1), kind: .accepted)], settledAt: at))
        }
        func expireAt() async throws -> Int64 { try await store.client.send(RedisCommand("EXPIRETIME", key)).integer ?? -3 }
        let expected = (now / width + 1) * width + store.configuration.dedupRetention.components.seconds
        try await settle(ids[0], at: now)
        #expect(try await expireAt() == expected)
        _ = try await store.client.send(RedisCommand("PERSIST", key))
        try await settle(ids[1], at: now + 1)
        #expect(try await expireAt() == -1, "within the minute the set is not given its expiry again")
        try await settle(ids[2], at: now + 61)
        #expect(try await expireAt() == expected, "after it, the next write gives it again")
        #expect(try await store.client.send(RedisCommand("SCARD", key)).integer == 3)
        // Another process (its own memory) gives it too.
        _ = try await store.client.send(RedisCommand("PERSIST", key))
        let other = PipelineStore(client: store.client, configuration: store.configuration)
        try await other.settle(
            SettleBatch(outcomes: [SettledOutcome(jobID: "e3", app: app, tokenHex: token(1), kind: .accepted)], settledAt: now + 62))
        #expect(try await expireAt() == expected)
    }

    /// Measures `used_memory` per dedup record (printed) and checks the sets stay compact intsets.
    /// 100 000 records: ~390 per set with 256 sub-buckets, ~98 with 1024 (split over the app's 16 token
    /// tags: the jobs' tokens spread over them).
    @Test(arguments: [256, 1024])
    func dedupRecordsAreCompact(subBuckets: Int) async throws {
        let server = try await RedisServer()
        defer { server.stop() }
        let store = PipelineStore(client: try server.client(), configuration: .init(dedupSubBuckets: subBuckets))
        let jobs = 100_000
        let perBatch = 5_000
        // Real time: a record settled longer than the retention ago expires at once (EXPIREAT in the past).
        let now = PipelineStore.epochNow()
        // Warm up counters and scripts so the measurement is the records only.
        try await store.settle(
            SettleBatch(outcomes: [SettledOutcome(jobID: "warm", app: app, tokenHex: token(0), kind: .accepted)], settledAt: now))
        let before = Int(try await store.client.info("memory")["used_memory"] ?? "") ?? 0
        for start in stride(from: 0, to: jobs, by: perBatch) {
            let outcomes = (start..<start + perBatch).map {
                SettledOutcome(jobID: "campaign-x:\($0)", app: app, tokenHex: token($0 % 1024), kind: .accepted)
            }
            try await store.settle(SettleBatch(outcomes: outcomes, settledAt: now))
        }
        let after = Int(try await store.client.info("memory")["used_memory"] ?? "") ?? 0
        let bytesPerJob = Double(after - before) / Double(jobs)
        print(
            "dedup: \(String(format: "%.1f", bytesPerJob)) bytes per accepted job (\(jobs) jobs, \(subBuckets) sub-buckets, used_memory delta)"
        )
        #expect(bytesPerJob > 8 && bytesPerJob < 12)
        let key = store.keys.dedup(
            tag: store.keys.tokenTag(app: app, tokenHex: token(1)), bucket: now / store.configuration.dedupBucketWidth.components.seconds,
            subBucket: 0)
        #expect(try await store.client.send(RedisCommand("OBJECT", "ENCODING", key)) == .bulk(Array("intset".utf8)))
        // Every one of them is found again.
        let sample = (0..<200).map { GateRequest(jobID: "campaign-x:\($0 * 499)", app: app, tokenHex: token($0 * 499 % 1024)) }
        #expect(try await store.gate(sample, now: now) == Array(repeating: .deduped, count: 200))
    }
}

/// A thread-safe counter shared between the test and its background task.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var value: Int { lock.withLock { count } }
    func increment() { lock.withLock { count += 1 } }
}
