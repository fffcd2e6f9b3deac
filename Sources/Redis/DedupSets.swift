import Synchronization

/// A dedup set of this process's ``DedupSetNames``: its table's serial number (never reused) and sub-bucket.
struct DedupSetID: Hashable {
    var table: Int
    var subBucket: Int
}

/// The names of the dedup sets, per token tag and time bucket, made once per process rather than per
/// job: the gate names `probes` sets per job and the settle one per accepted job, and formatting them
/// (`{<p>:<app>:<n>}:dedup:<bucket>:<sub>`) was ~5 % of `run`'s CPU. Each table holds every
/// sub-bucket's name of one (tag, bucket): 256 names with the defaults, ~12 KB; tables of buckets older
/// than `liveBuckets` behind the newest are dropped. Only tables of the configured apps' tags are kept
/// (apps × token buckets × live buckets: bounded by the pipeline file); a table of any other tag is made
/// for its call and dropped (tags built from app names a producer invents grew without bound).
final class DedupSetNames: Sendable {
    /// The key names of one tag's sets in one time bucket, one per sub-bucket.
    final class Table: Sendable {
        /// Unique per table in this process (``DedupSetID``).
        let serial: Int
        /// Every name's bytes, one after another: a call's keys are copied from here (the gate takes one
        /// per job and probe, the settle one per accepted job), not retained and released as Strings
        /// shared between the gate's and the settle's threads.
        private let bytes: [UInt8]
        /// Where name n ends in `bytes` (it starts where n − 1 ends).
        private let ends: [Int]

        init(serial: Int, names: [String]) {
            self.serial = serial
            var bytes: [UInt8] = []
            var ends: [Int] = []
            ends.reserveCapacity(names.count)
            for name in names {
                bytes.append(contentsOf: name.utf8)
                ends.append(bytes.count)
            }
            self.bytes = bytes
            self.ends = ends
            self.nameBytes = names.map(\.utf8.count).max() ?? 0
        }

        var count: Int { ends.count }

        /// The longest name's bytes (they differ by a digit or two): room to reserve per name.
        let nameBytes: Int

        /// Where name `sub` is in `bytes`.
        private func range(_ sub: Int) -> Range<Int> { (sub == 0 ? 0 : ends[sub - 1])..<ends[sub] }

        /// Name `sub`, appended to `arguments` as one argument.
        func appendName(_ sub: Int, to arguments: inout RedisArguments) {
            bytes.withUnsafeBytes { arguments.append(bytes: UnsafeRawBufferPointer(rebasing: $0[range(sub)])) }
        }

        /// Name `sub` as a String (tests).
        func name(_ sub: Int) -> String { String(decoding: bytes[range(sub)], as: UTF8.self) }

        /// Every name (tests).
        var names: [String] { (0..<count).map(name) }
    }
    private struct TableKey: Hashable {
        var tag: String
        var bucket: Int64
    }
    private let keys: RedisKeys
    private let subBuckets: Int
    private let liveBuckets: Int
    /// The tags whose tables are kept; nil: any, up to ``maxTablesForAnyApp``.
    private let keptTags: Set<String>?
    private struct State {
        var tables: [TableKey: Table] = [:]
        var serial = 0
        var newest = Int64.min
    }
    private let state = Mutex(State())

    /// The serial of a table that is not kept (never that of a kept one, which start at 1).
    static let unkeptSerial = 0
    /// Tables kept when the store is not told its apps (tools): ~12 MB with the defaults.
    static let maxTablesForAnyApp = 1024

    init(keys: RedisKeys, subBuckets: Int, liveBuckets: Int, apps: Set<String>? = nil) {
        self.keys = keys
        self.subBuckets = max(1, subBuckets)
        self.liveBuckets = max(1, liveBuckets)
        self.keptTags = apps.map { apps in
            Set(apps.flatMap { app in (0..<keys.tokenBuckets).map { keys.tokenTag(app: app, bucket: $0) } })
        }
    }

    func table(tag: String, bucket: Int64) -> Table {
        let key = TableKey(tag: tag, bucket: bucket)
        if let known = state.withLock({ $0.tables[key] }) { return known }
        let names = (0..<subBuckets).map { keys.dedup(tag: tag, bucket: bucket, subBucket: $0) }
        if let keptTags, !keptTags.contains(tag) { return Table(serial: Self.unkeptSerial, names: names) }
        return state.withLock { state in
            if let raced = state.tables[key] { return raced }
            if keptTags == nil, state.tables.count >= Self.maxTablesForAnyApp, bucket <= state.newest {
                return Table(serial: Self.unkeptSerial, names: names)
            }
            state.serial += 1
            let table = Table(serial: state.serial, names: names)
            state.tables[key] = table
            if bucket > state.newest {
                state.newest = bucket
                let oldest = state.newest - Int64(liveBuckets)
                state.tables = state.tables.filter { $0.key.bucket >= oldest }
            }
            return table
        }
    }

    var count: Int { state.withLock { $0.tables.count } }
}

/// Which dedup sets this process gave their expiry recently. A set's expiry (end of its time bucket +
/// the retention) is the same for every write, so one `EXPIREAT` per set and minute is enough, not one
/// per set and settle batch (a batch of 500 touches ~470 of the 4096 sets: that was ~0.9 `EXPIREAT` per
/// job). Forgotten every minute, so a set that lost its expiry (a server restarted without
/// its data, a key deleted by hand) gets it again with its next write after at most a minute. Marked
/// only once the call that set them succeeded.
final class DedupExpiries: Sendable {
    private struct State {
        /// By table serial (``DedupSetID/table``), a bit per sub-bucket: a look-up per accepted job is an
        /// index and a mask, where a `Set<DedupSetID>` hashed every key (~1 % of `run`). Serials
        /// only grow, by one per tag and time bucket: tens of entries a day, emptied every minute.
        var given: [[UInt64]] = []
        var window = ExpiryWindow()
    }
    private let state = Mutex(State())

    /// Whether `key` was given its expiry within the last minute (as of `now`, epoch seconds).
    func isGiven(_ key: DedupSetID, now: Int64) -> Bool {
        state.withLock { state in
            if state.window.startsAnew(now: now) { state.given.removeAll() }
            let word = key.subBucket / 64
            guard key.table < state.given.count, word < state.given[key.table].count else { return false }
            return state.given[key.table][word] & (1 << UInt64(key.subBucket % 64)) != 0
        }
    }

    func markGiven(_ keys: [DedupSetID]) {
        if keys.isEmpty { return }
        state.withLock { state in
            // Serial 0: a table not kept (``DedupSetNames``), whose sets are given their expiry at every write.
            for key in keys where key.table != DedupSetNames.unkeptSerial {
                if key.table >= state.given.count {
                    state.given.append(contentsOf: repeatElement([], count: key.table + 1 - state.given.count))
                }
                let word = key.subBucket / 64
                if word >= state.given[key.table].count {
                    state.given[key.table].append(contentsOf: repeatElement(0, count: word + 1 - state.given[key.table].count))
                }
                state.given[key.table][word] |= 1 << UInt64(key.subBucket % 64)
            }
        }
    }
}

/// The minute an expiry memory (``DedupExpiries``, ``MarkExpiries``) remembers: what was given its
/// expiry is forgotten once `seconds` have passed since the window began (or the clock went back).
struct ExpiryWindow {
    static let seconds: Int64 = 60
    private var since: Int64?

    /// Whether `now` begins a new window, whose memory starts empty.
    mutating func startsAnew(now: Int64) -> Bool {
        if let since, now >= since, now - since < Self.seconds { return false }
        since = now
        return true
    }
}
