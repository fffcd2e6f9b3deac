import Synchronization

/// Why this process is not ready, said by the parts that know (`/readyz` lists the lines, operations §8).
///
/// Each part owns a key of its own and either sets a line that holds until it clears it (a fact: a
/// connection refused for good) or registers a check asked at every probe (a condition that starts by
/// itself as time passes: a topic failing for longer than a grace). The lines come out in key order, so
/// a probe's answer does not reshuffle from one call to the next.
public final class ReadinessReasons: Sendable {
    private struct State {
        var lines: [String: String] = [:]
        var checks: [String: @Sendable () -> String?] = [:]
    }
    private let state = Mutex(State())

    public init() {}

    /// Sets (or with nil clears) the line of `key`.
    public func set(_ key: String, _ reason: String?) {
        state.withLock { $0.lines[key] = reason }
    }

    /// Asks `check` at every probe: its line while it returns one. Replaces an earlier check of `key`.
    public func watch(_ key: String, _ check: @escaping @Sendable () -> String?) {
        state.withLock { $0.checks[key] = check }
    }

    /// Removes the line and the check of `key`.
    public func remove(_ key: String) {
        state.withLock {
            $0.lines[key] = nil
            $0.checks[key] = nil
        }
    }

    /// The lines now, in key order. The checks run outside the lock: one may take a lock of its own.
    public var current: [String] {
        let (lines, checks) = state.withLock { ($0.lines, $0.checks) }
        var all = lines
        for (key, check) in checks {
            if let line = check() { all[key] = line }
        }
        return all.sorted { $0.key < $1.key }.map(\.value)
    }
}
