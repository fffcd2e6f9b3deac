/// The seam between the pipeline and a way of talking to APNs. A transport owns one app's connections
/// (binary: shards with replay buffers; HTTP/2: connections with streams), and reports what became of
/// each notification through the `OutcomeHandler` it was built with, in transport-neutral terms
/// (`Outcome`, `Rejection`), so the router, `send` and `run` never know which protocol is behind it.
public protocol NotificationTransport: Sendable {
    /// The bundle id (topic) this transport sends for.
    var app: String { get }
    /// `binary` or `http2`: for logs, the shard status hash and metrics labels.
    var protocolName: String { get }

    /// Takes notifications for sending; returns when the transport has room again (back-pressure: a
    /// full transport makes the caller wait, it never drops). Outcomes arrive later, through the handler.
    func send(_ notifications: [PushNotification]) async throws

    /// Stops taking notifications, finishes what it holds (every outcome reported), closes its
    /// connections. A stop must end (`docs/design.md §1.3`): once `deadline` passes, what is still
    /// unanswered is reported as `.timedOut(unanswered:)` and left unsettled. (The binary transport's
    /// drain is bounded by its own probe timeout and settle delay.)
    func drainAndClose(before deadline: ContinuousClock.Instant) async -> [DrainOutcome]

    /// One entry per connection (shard), for dashboards and tests.
    func statistics() async -> [ConnectionStatistics]
}

/// Routes notifications to the transport of their app (one certificate or token topic per app).
public final class Router: Sendable {
    public let transports: [String: any NotificationTransport]

    public init(transports: [any NotificationTransport]) {
        self.transports = Dictionary(uniqueKeysWithValues: transports.map { ($0.app, $0) })
    }

    /// Sends through each app's transport. Notifications for an app without one are returned, untouched,
    /// for the caller to dead-letter ("no credentials for app").
    public func send(_ notifications: [PushNotification]) async throws -> [PushNotification] {
        if transports.count == 1, let (app, transport) = transports.first, notifications.allSatisfy({ $0.app == app }) {
            try await transport.send(notifications)
            return []
        }
        // Grouped by app without hashing each notification's: a batch names a handful of apps, so a
        // notification's app is compared with the few found so far, and only a new app is looked up
        // (`perf`: two dictionary look-ups per notification were 0.13 µs per job).
        var parts: [(app: String, transport: any NotificationTransport, notifications: [PushNotification])] = []
        var orphans: [PushNotification] = []
        for n in notifications {
            let app = n.app
            if let i = parts.firstIndex(where: { $0.app == app }) {
                parts[i].notifications.append(n)
            } else if let transport = transports[app] {
                parts.append((app, transport, [n]))
            } else {
                orphans.append(n)
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (_, transport, part) in parts {
                group.addTask { try await transport.send(part) }
            }
            try await group.waitForAll()
        }
        return orphans
    }

    public func drainAndClose(before deadline: ContinuousClock.Instant = .distantFuture) async -> [String: [DrainOutcome]] {
        await withTaskGroup(of: (String, [DrainOutcome]).self) { group in
            for (app, transport) in transports {
                group.addTask { (app, await transport.drainAndClose(before: deadline)) }
            }
            var out: [String: [DrainOutcome]] = [:]
            for await (app, results) in group { out[app] = results }
            return out
        }
    }
}

extension NotificationTransport {
    /// Drains with no deadline: every outcome reported, however long that takes (tests, `send`).
    public func drainAndClose() async -> [DrainOutcome] { await drainAndClose(before: .distantFuture) }
}

extension ContinuousClock.Instant {
    /// A deadline that never passes (a century ahead).
    public static var distantFuture: ContinuousClock.Instant { .now + .seconds(100 * 365 * 86_400) }
}
