import Foundation
import TimeUnits

/// The gate's role of the store (``PipelineStore/gate(_:call:now:)``): which jobs of a batch to send, their
/// in-flight leases, the take-over of a dead process's leases, the written marks of gate calls, and this
/// process's heartbeat (the lease owner). Reads the dedup records the settle writes, through the same
/// ``DedupSetNames``.
struct GateStore: StoreRole {
    let runner: StoreRunner
    let dedupSetNames: DedupSetNames

    /// Decides, for each job of a batch, whether to send it: already settled as accepted → ``GateDecision/deduped``;
    /// another copy in flight → ``GateDecision/inFlight``; token suppressed and not registered since →
    /// ``GateDecision/suppressed``; else ``GateDecision/admitted(language:)`` with an in-flight lease
    /// taken. One round trip on a single Redis (one call per slot on a cluster), plus one when a lease of
    /// another process is met (its heartbeat is read, and a dead owner's lease taken over). Decisions come
    /// back in the order of `requests`.
    func gate(
        _ requests: [GateRequest], call: String = PipelineStore.newBatchID(), now: Int64 = PipelineStore.epochNow()
    ) async throws -> [GateDecision] {
        try await gateReadingProfiles(requests, call: call, now: now).decisions
    }

    /// ``gate(_:call:now:)``, and for each admitted job whose request ``GateRequest/needsProfile``, its
    /// token's registered profile (``RecipientProfile``), by request index, read in the same call.
    func gateReadingProfiles(
        _ requests: [GateRequest], call: String = PipelineStore.newBatchID(), now: Int64 = PipelineStore.epochNow()
    ) async throws -> (decisions: [GateDecision], profiles: [Int: RecipientProfile]) {
        if requests.isEmpty { return ([], [:]) }
        // `call`: the gate call, the same across retries of this call; its leases name it.
        var (decisions, held, profiles) = try await gateOnce(requests, indices: Array(requests.indices), voids: [:], call: call, now: now)
        if held.isEmpty { return (decisions, profiles) }

        // Leases of other processes: void if the owner's heartbeat is gone (it died between gate and
        // settle). Heartbeats are keys of no job's slot, so they are read here with plain commands, and
        // the take-over is a second gate call that overwrites a lease only if it still holds the value
        // read (a conditional write in the lease's own slot). The alternative, a copy of every heartbeat
        // in every token tag, would write apps × token buckets keys per beat for a path taken only after
        // a crash.
        var alive: [String: Bool] = [:]
        for value in Set(held.values) {
            let owner = Self.leaseOwner(of: value)
            if alive[owner] == nil { alive[owner] = try await command(RedisCommand("EXISTS", keys.owner(owner))).integer == 1 }
        }
        let void = held.filter { alive[Self.leaseOwner(of: $0.value)] == false }
        if void.isEmpty { return (decisions, profiles) }
        let indices = void.keys.sorted()
        let (retried, _, retriedProfiles) = try await gateOnce(requests, indices: indices, voids: void, call: call, now: now)
        profiles.merge(retriedProfiles) { _, new in new }
        // Which of the dead process's batches it had handed to its transports: only those
        // jobs may have reached a device. Read like the heartbeats, once per gate call of the dead owner.
        var written: [String: Bool] = [:]
        for value in Set(void.values) {
            let holder = Self.leaseHolder(of: value)
            if written[holder] == nil { written[holder] = try await isMarkedWritten(holder: holder) }
        }
        var inheritsWritten = false
        for index in indices {
            if case .takenOver(let language, _) = retried[index], let value = void[index] {
                let wasWritten = written[Self.leaseHolder(of: value)] ?? true
                decisions[index] = .takenOver(language: language, written: wasWritten)
                inheritsWritten = inheritsWritten || wasWritten
            } else {
                decisions[index] = retried[index]
            }
        }
        // A job the dead owner may have written may reach a device once more through this call. If this
        // process dies too before its own mark, its successor must still count the job `ambiguous`: the
        // mark is inherited now, for the whole call (over-counting its fresh jobs in that double crash).
        // Without it a second kill -9 during a take-over hid ~1 000 real duplicates (CI).
        if inheritsWritten { _ = try await markWritten(call: call, heartbeat: nil) }
        return (decisions, profiles)
    }

    /// Whether gate call `<owner>/<call>` was marked written: where this version marks, else where
    /// versions before the heartbeat fence did (a rolling upgrade's older processes).
    private func isMarkedWritten(holder: String) async throws -> Bool {
        let owner = Self.leaseOwner(of: holder)
        let call = holder.dropFirst(owner.count + 1)
        if try await command(RedisCommand("EXISTS", keys.written(owner: owner, call: String(call)))).integer == 1 { return true }
        return try await command(RedisCommand("EXISTS", keys.legacyWritten(holder))).integer == 1
    }

    /// `<owner>/<call>` of a lease value `<owner>/<call>/<expiry ms>`.
    static func leaseHolder(of value: String) -> String {
        guard let slash = value.lastIndex(of: "/") else { return value }
        return String(value[..<slash])
    }

    /// Marks gate call `call`'s batch as handed to the transports, before any of it is written: if this
    /// process dies, a take-over of its leases counts `ambiguous` only for marked batches (design
    /// §2.4). Lives as long as a lease. One script call per batch, in the heartbeat's slot.
    ///
    /// `heartbeat`: the heartbeat's value when the call was gated (``beat(value:refresh:)``); the mark is
    /// set only if it still holds that value, and `false` comes back otherwise (the heartbeat lapsed
    /// since: another process may have taken the jobs over without seeing a mark). `nil`: set it anyway.
    func markWritten(call: String, heartbeat: String?) async throws -> Bool {
        let owner = configuration.leaseOwner
        var arguments = RedisArguments()
        arguments.append(heartbeat ?? "")
        arguments.append(max(1, configuration.inFlightLease.milliseconds))
        let reply = try await eval(
            Scripts.markWritten, keys: [keys.owner(owner), keys.written(owner: owner, call: call)], arguments: arguments)
        return reply.integer == 1
    }

    static func leaseOwner(of value: String) -> String {
        String(value.prefix { $0 != "/" })
    }

    /// One gate pass over `requests[indices]`; `voids`: leases (by request index) to take over if they
    /// still hold that value. Returns the decisions (only `indices` filled) and, for jobs in flight in
    /// another process, the lease's value.
    ///
    /// Per job the call carries its token, its fingerprint and its dedup keys (in probe order, repeated
    /// when two jobs share a set: no index argument per job); the lease is a field of the group's hash.
    func gateOnce(
        _ requests: [GateRequest], indices: [Int], voids: [Int: String], call: String, now: Int64
    ) async throws -> (decisions: [GateDecision], held: [Int: String], profiles: [Int: RecipientProfile]) {
        let probes = dedupBucketsToProbe(now: now)
        let groups = gateGroups(requests, indices: indices, voids: voids, probes: probes)
        let scriptGroups = groups.map { group -> ScriptGroup in
            var arguments = RedisArguments()
            arguments.append(group.jobs.count)
            arguments.append(group.voidCount)
            arguments.append((group.wantsLanguage ? 1 : 0) + (group.wantsProfile ? 2 : 0))
            arguments.append(contentsOf: group.voids)
            arguments.append(contentsOf: group.jobArguments)
            var keys = group.keys
            if group.wantsProfile { keys.append(self.keys.profile(tag: group.tag)) }
            return ScriptGroup(tag: group.tag, keys: keys, arguments: arguments)
        }
        var header = RedisArguments()
        header.append(configuration.leaseOwner)
        header.append(call)
        header.append(max(1, configuration.inFlightLease.milliseconds))
        header.append(probes.count)
        let replies = try await run(Scripts.gate, header: header, groups: scriptGroups)
        return try Self.decisions(of: groups, replies: replies, count: requests.count)
    }

    /// The jobs of `requests[indices]` grouped by token tag, in first-seen order, with each group's keys
    /// and arguments. A batch touches a few dozen tags: a scan comparing the bucket first is cheaper than
    /// hashing the app's name per job (as in the settle). The request's fields are read in place, not
    /// copied out (three retains and releases per job).
    private func gateGroups(_ requests: [GateRequest], indices: [Int], voids: [Int: String], probes: [Int64]) -> [GateGroup] {
        let subs = configuration.dedupSubBucketsPerTag
        var (groups, groupOf) = groupsByTag(requests, indices: indices, probes: probes)
        for (n, index) in indices.enumerated() {
            let g = groupOf[n]
            let fingerprint = requests[index].fingerprint
            let sub = fingerprint.subBucket(of: subs)
            let tables = groups[g].dedupSets
            for table in tables { table.appendName(sub, to: &groups[g].keys) }
            groups[g].jobs.append(index)
            if requests[index].needsLanguage { groups[g].wantsLanguage = true }
            if requests[index].needsProfile { groups[g].wantsProfile = true }
            if !voids.isEmpty, let void = voids[index] {
                groups[g].voids.append(groups[g].jobs.count)
                groups[g].voids.append(void)
                groups[g].voidCount += 1
            }
            // A broadcast's token argument is empty: the script reads no suppression, registration or
            // language for it (a channel id is no token, and must never match one).
            if requests[index].isChannel {
                groups[g].jobArguments.append("")
            } else {
                groups[g].jobArguments.append(lowercasingASCII: requests[index].tokenHex)
            }
            groups[g].jobArguments.append(fingerprint.member)
        }
        return groups
    }

    /// The batch's groups, one per tag, and each job's group (by its place in `indices`), each group's
    /// arguments reserved for its jobs: grown job by job, they were copied a dozen times per call.
    private func groupsByTag(_ requests: [GateRequest], indices: [Int], probes: [Int64]) -> ([GateGroup], [Int]) {
        // Read once per call from the shared runner, not through the role's accessor per job.
        let keys = runner.keys
        var groups: [GateGroup] = []
        var groupIDs: [TagID] = []
        var groupOf: [Int] = []
        groupOf.reserveCapacity(indices.count)
        var sizes: [(jobs: Int, bytes: Int)] = []
        for index in indices {
            let bucket = keys.tokenBucket(hash: requests[index].tokenHash)
            let g: Int
            if let known = groupIDs.firstIndex(where: { $0.bucket == bucket && $0.app == requests[index].app }) {
                g = known
            } else {
                let app = requests[index].app
                let tag = keys.tokenTag(app: app, bucket: bucket)
                groups.append(
                    GateGroup(
                        tag: tag,
                        keys: RedisArguments([
                            keys.suppressed(tag: tag), keys.registered(tag: tag), keys.language(tag: tag), keys.inFlight(tag: tag),
                        ]),
                        dedupSets: probes.map { dedupSetNames.table(tag: tag, bucket: $0) }))
                groupIDs.append(TagID(app: app, bucket: bucket))
                sizes.append((0, 0))
                g = groups.count - 1
            }
            groupOf.append(g)
            // The token's hex and the fingerprint's decimal digits.
            sizes[g].jobs += 1
            sizes[g].bytes += requests[index].tokenHex.utf8.count + 20
        }
        for g in groups.indices {
            let nameBytes = groups[g].dedupSets.reduce(0) { $0 + $1.nameBytes }
            groups[g].jobs.reserveCapacity(sizes[g].jobs)
            groups[g].keys.reserveCapacity(adding: sizes[g].jobs * groups[g].dedupSets.count, bytes: sizes[g].jobs * nameBytes)
            groups[g].jobArguments.reserveCapacity(adding: 2 * sizes[g].jobs, bytes: sizes[g].bytes)
        }
        return (groups, groupOf)
    }

    /// The gate script's replies read: each group's `{ codes (a digit per job), (job-index value)… }`.
    private static func decisions(
        of groups: [GateGroup], replies: [RedisReply], count: Int
    ) throws -> (decisions: [GateDecision], held: [Int: String], profiles: [Int: RecipientProfile]) {
        var decisions = Array(repeating: GateDecision.inFlight, count: count)
        var held: [Int: String] = [:]
        var profiles: [Int: RecipientProfile] = [:]
        for (group, reply) in zip(groups, replies) {
            guard let parts = reply.array, parts.count % 2 == 1, case .bulk(let codes) = parts[0], codes.count == group.jobs.count else {
                throw RedisError.unexpectedReply("gate: expected \(group.jobs.count) decisions, got \(reply)")
            }
            var values: [Int: String] = [:]
            for at in stride(from: 1, to: parts.count, by: 2) {
                guard let position = parts[at].integer, position != 0, let value = parts[at + 1].string else {
                    throw RedisError.unexpectedReply("gate: bad value \(parts[at]) \(parts[at + 1])")
                }
                if position < 0 {
                    // A profile, of the job at -position.
                    let job = Int(-position) - 1
                    if job < group.jobs.count { profiles[group.jobs[job]] = RecipientProfile(stored: value) }
                } else {
                    values[Int(position) - 1] = value
                }
            }
            for (position, index) in group.jobs.enumerated() {
                guard let answer = GateAnswer(digit: codes[position]) else {
                    throw RedisError.unexpectedReply("gate: bad decision \(codes[position])")
                }
                let (decision, value) = answer.decision(value: values[position])
                decisions[index] = decision
                if let value { held[index] = value }
            }
        }
        return (decisions, held, profiles)
    }

    /// The lease on a job id as stored (`nil`: none; a lease past ``InFlightLease/expiresAtMs`` is free for
    /// the gate): for operators and tests.
    func lease(jobID: String, app: String, tokenHex: String) async throws -> InFlightLease? {
        let reply = try await command(
            RedisCommand("HGET", keys.inFlight(app: app, tokenHex: tokenHex), String(JobFingerprint(jobID: jobID).member)))
        return reply.string.map(InFlightLease.init(value:))
    }

    // MARK: Lease owner

    /// Writes this process's heartbeat, `<p>:owner:<leaseOwner>`, holding `value` and living
    /// ``PipelineStoreConfiguration/ownerHeartbeat``. While it lives, this process's leases hold.
    /// `refresh`: only if it still lives (`SET … XX`); `false` comes back when it had lapsed, and it is
    /// not written: the process must then beat a new value, so that no call gated under the old one can
    /// be marked written (``markWritten(call:heartbeat:)``).
    @discardableResult
    func beat(value: String, refresh: Bool = false) async throws -> Bool {
        var arguments = RedisArguments([
            keys.owner(configuration.leaseOwner), value.isEmpty ? "alive" : value, "PX",
            String(max(1, configuration.ownerHeartbeat.milliseconds)),
        ])
        if refresh { arguments.append("XX") }
        return try await command(RedisCommand("SET", arguments: arguments)).isNull == false
    }

    /// Removes the heartbeat (graceful stop): whatever this process still leases is void at once.
    func endHeartbeat() async throws {
        _ = try await command(RedisCommand("DEL", keys.owner(configuration.leaseOwner)))
    }

    /// Buckets that may hold a live record: those whose expiry (end + retention) is after `now`, plus the
    /// next one in case another process's clock runs slightly ahead.
    func dedupBucketsToCheck(now: Int64) -> [Int64] {
        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        let retention = configuration.dedupRetention.components.seconds
        let first = StoreRunner.floorDivide(now - retention, width)
        let last = StoreRunner.floorDivide(now, width) + 1
        return Array(first...last)
    }

    /// The buckets the gate probes, in the order it probes them: the current one first (where most
    /// duplicates are), then older ones, and the next one only within ``PipelineStoreConfiguration/clockSkewAllowance``
    /// of its start (a process whose clock runs that much ahead may already write there). Each probe is
    /// a call per job, so a probe that cannot hit is skipped.
    func dedupBucketsToProbe(now: Int64) -> [Int64] {
        let width = max(1, configuration.dedupBucketWidth.components.seconds)
        let all = dedupBucketsToCheck(now: now)
        let next = all.last!
        var probes = Array(all.dropLast().reversed())
        if now + configuration.clockSkewAllowance.components.seconds >= next * width { probes.append(next) }
        return probes
    }
}

/// An in-flight lease (`docs/design.md §2.2`): the value `<owner>/<gate call>/<expiry ms>` of its job's field
/// in the token tag's `inflight` hash.
public struct InFlightLease: Sendable, Hashable {
    public let value: String
    /// The process holding it (its heartbeat is `<p>:owner:<owner>`).
    public var owner: String { PipelineStore.leaseOwner(of: value) }
    /// When it lapses, epoch ms of the Redis server's clock.
    public var expiresAtMs: Int64 { Int64(value.split(separator: "/").last ?? "") ?? 0 }

    public init(value: String) { self.value = value }
}

/// One token tag's share of a gate call: its jobs (request indices), keys, voided leases and per-job
/// arguments.
private struct GateGroup {
    var tag: String
    var jobs: [Int] = []
    var keys: RedisArguments
    /// The tag's dedup set names of each probed time bucket, in probe order.
    var dedupSets: [DedupSetNames.Table]
    var voids = RedisArguments()
    var voidCount = 0
    /// A job of the group has localized alerts: the script reads the group's languages.
    var wantsLanguage = false
    /// A job of the group needs its recipient's registered profile (the audience rules).
    var wantsProfile = false
    var jobArguments = RedisArguments()
}
