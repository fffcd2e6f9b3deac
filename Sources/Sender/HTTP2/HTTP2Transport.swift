import APNsProtocol
import APNsTransport
import Logging
import NIOCore
import Synchronization

/// One app's HTTP/2 transport (Apple's provider API): `connections` TLS connections (ALPN h2) spread
/// over the configured hosts, each many streams wide. Every request gets an answer, so settlement
/// needs no timer and no probe; see `HTTP2Verdict` for what each answer becomes, and
/// `HTTP2ConnectionStateMachine` for streams, GOAWAY, resets, drops and deadlines.
///
/// Public API: build one with `init(configuration:group:logger:onOutcomes:)` and use it through
/// `NotificationTransport` (`send`, `drainAndClose`, `statistics`). Outcomes arrive in
/// `OutcomeBatch`es on the connections' event loops.
public final class HTTP2Transport: NotificationTransport {
    public let configuration: HTTP2TransportConfiguration
    private let connections: [HTTP2Connection]
    private let shared: Shared

    /// What the connections reach back into: each other, for rerouting.
    private final class Shared: Sendable {
        let connections = Mutex<[HTTP2Connection]>([])
        /// Requests handed from one connection to another and not yet taken: a drain waits for them.
        let inTransit = Atomic<Int>(0)
        let cursor = Atomic<Int>(0)

        /// Another connection takes `requests`: the next one taking work after `from`, or `from` itself
        /// when none is, so they wait there rather than be lost.
        func reroute(_ requests: [HTTP2ConnectionStateMachine<HTTP2Job>.Request], from: Int) {
            let all = connections.withLock { $0 }
            let n = all.count
            let start = cursor.add(1, ordering: .relaxed).newValue
            var target = from
            for k in 0..<n {
                let i = (start + k) % n
                if i != from, all[i].acceptsWork.load(ordering: .relaxed) {
                    target = i
                    break
                }
            }
            deliver(requests, to: target)
        }

        /// Connection `target` takes `requests` (counted in transit until it has).
        func deliver(_ requests: [HTTP2ConnectionStateMachine<HTTP2Job>.Request], to target: Int) {
            let all = connections.withLock { $0 }
            inTransit.add(requests.count, ordering: .sequentiallyConsistent)
            all[target].adopt(requests) { [self] in
                inTransit.subtract(requests.count, ordering: .sequentiallyConsistent)
            }
        }

        /// Connection `index`'s probe found its host answering again: the others to the same host end
        /// their pauses (connection k's host is k mod the number of hosts), and their queues are evened
        /// out. While the host was down each connection that paused handed its queue to one still taking
        /// work, so the last to pause holds nearly all of it, and new work waits for room behind it: the
        /// others would idle until it had worked its queue down.
        func hostRecovered(_ index: Int, hosts: Int) {
            let all = connections.withLock { $0 }
            let peers = all.indices.filter { $0 % hosts == index % hosts }
            for i in peers where i != index { all[i].hostAnswers() }
            let queued = peers.map { (index: $0, count: all[$0].queued.load(ordering: .relaxed)) }
            let share = queued.reduce(0) { $0 + $1.count } / max(1, peers.count)
            guard let donor = queued.max(by: { $0.count < $1.count }), donor.count > share + share / 4 else { return }
            for peer in queued where peer.count < share {
                all[donor.index].handOver(count: share - peer.count, to: peer.index) { [self] requests, target in
                    deliver(requests, to: target)
                }
            }
        }
    }

    /// Builds the transport; connections open on the first notification. Throws when the TLS
    /// context cannot be made (the error names the file, never key material).
    public init(
        configuration: HTTP2TransportConfiguration, group: any EventLoopGroup, limiter: ConnectionLimiter? = nil,
        logger: Logger = Logger(label: "apns.sender.http2"), onOutcomes: @escaping OutcomeHandler
    ) throws {
        precondition(configuration.connections > 0)
        self.configuration = configuration
        let sslContext = try configuration.authentication.makeClientContext()
        let limiter = limiter ?? ConnectionLimiter(attemptsPerSecond: configuration.reconnect.attemptsPerSecondPerGateway)
        let shared = Shared()
        let refusals = HTTP2ConnectRefusals(handler: configuration.onConnectRefused)
        var loops = group.makeIterator()
        let made = (0..<configuration.connections).map { i in
            HTTP2Connection(
                index: i, eventLoop: loops.next() ?? group.next(), configuration: configuration, sslContext: sslContext,
                limiter: limiter, logger: logger, onOutcomes: onOutcomes,
                reroute: { requests, from in shared.reroute(requests, from: from) }, refusals: refusals,
                hostRecovered: { [hosts = configuration.hosts.count] in shared.hostRecovered($0, hosts: hosts) })
        }
        shared.connections.withLock { $0 = made }
        connections = made
        self.shared = shared
    }

    public var app: String { configuration.app }
    public var protocolName: String { HTTP2TransportConfiguration.protocolName }

    /// The connection for a token: a stable hash, skipping connections that are not taking work
    /// (refused credentials); if none is, the hashed one holds the work until it can send again.
    private func connectionIndex(for token: DeviceToken) -> Int { connectionIndex(hash: token.stableHash) }

    /// A broadcast's connection: by its channel (FNV-1a 64 of the id), so one channel's updates go on
    /// one connection, in order, and an app's channels spread over its connections (the placeholder
    /// token would put every broadcast on one).
    private func connectionIndex(for channel: BroadcastChannelID) -> Int {
        connectionIndex(hash: FNV1a64.hash(channel.value))
    }

    private func connectionIndex(hash: UInt64) -> Int {
        let n = connections.count
        let first = Int(hash % UInt64(n))
        for k in 0..<n where connections[(first + k) % n].acceptsWork.load(ordering: .relaxed) {
            return (first + k) % n
        }
        return first
    }

    /// Hands notifications to their connections; returns when each has room again (back-pressure).
    /// Each request head (path, `apns-id` from SHA-256 of the job id, the checks) is built here, on the
    /// caller's thread, so the connections' event loops only write and read.
    public func send(_ notifications: [PushNotification]) async throws {
        let n = connections.count
        var jobs = Array(repeating: [HTTP2Job](), count: n)
        // The priority lane's jobs (`docs/design.md §1.4`), queued ahead of the bulk ones.
        var priority = Array(repeating: [HTTP2Job](), count: n)
        var refused = Array(repeating: [(notification: PushNotification, reason: String)](), count: n)
        if n == 1 { jobs[0].reserveCapacity(notifications.count) }
        var memo = HTTP2Request.Memo()
        for notification in notifications {
            let i = n == 1 ? 0 : notification.channel.map { connectionIndex(for: $0) } ?? connectionIndex(for: notification.token)
            do throws(HTTP2Request.Invalid) {
                let job = HTTP2Job(notification: notification, head: try HTTP2Request(notification, memo: &memo))
                if notification.lane == .priority { priority[i].append(job) } else { jobs[i].append(job) }
            } catch {
                refused[i].append((notification, error.reason))
            }
        }
        let rooms = (0..<n).filter { !jobs[$0].isEmpty || !priority[$0].isEmpty || !refused[$0].isEmpty }.map { i in
            let room = connections[i].eventLoop.makePromise(of: Void.self)
            connections[i].submit(jobs[i], priority: priority[i], refused: refused[i], room: room)
            return (connection: connections[i], room: room)
        }
        // A cancelled caller (a stop past its drain deadline) stops waiting for room: a connection that
        // never comes up must not hold the send stage, and so the stop, for ever.
        try await withTaskCancellationHandler {
            for w in rooms { try await w.room.futureResult.get() }
        } onCancel: {
            for w in rooms { w.connection.abandonWait(w.room) }
        }
    }

    /// Waits until every notification taken has its outcome, then closes the connections. A request
    /// moving between connections when one finished its drain is waited for in another round.
    /// With Apple unreachable that could be forever, so the wait ends at `deadline`: what is still
    /// unanswered is reported (`.timedOut`) and left unsettled; the connections are closed when the
    /// event loops shut down.
    public func drainAndClose(before deadline: ContinuousClock.Instant) async -> [DrainOutcome] {
        let loopDeadline = NIODeadline.now() + TimeAmount(max(.zero, deadline - .now))
        // At least one round: a deadline already past still finds connections that hold nothing drained.
        repeat {
            var drained = true
            for c in connections where (try? await c.drain(before: loopDeadline).get()) != true { drained = false }
            guard drained else { break }
            if shared.inTransit.load(ordering: .sequentiallyConsistent) == 0, await allEmpty() {
                return connections.map { _ in .allAnswered }
            }
            try? await Task.sleep(for: .milliseconds(10))
        } while ContinuousClock.now < deadline
        var results: [DrainOutcome] = []
        for c in connections {
            // The event loop still answers (only the gateway does not): written requests not yet answered.
            let s = (try? await c.currentStatistics().get()) ?? ConnectionStatistics()
            results.append(.timedOut(unanswered: s.replayCount))
        }
        return results
    }

    private func allEmpty() async -> Bool {
        for c in connections where !((try? await c.isDrained().get()) ?? true) { return false }
        return true
    }

    public func statistics() async -> [ConnectionStatistics] {
        var out: [ConnectionStatistics] = []
        for c in connections { out.append((try? await c.currentStatistics().get()) ?? ConnectionStatistics()) }
        return out
    }
}

/// Where a transport's connections report refused connects (`HTTP2ConnectRefusal`): to the handler
/// of `HTTP2TransportConfiguration.onConnectRefused` when there is one (`send`, which stops), else as
/// a log line at most once a minute for the same refusal, however many connections meet it (`run`:
/// its readiness says it meanwhile).
final class HTTP2ConnectRefusals: Sendable {
    private let handler: (@Sendable (HTTP2ConnectRefusal) -> Void)?
    private let logged = Mutex<[String: NIODeadline]>([:])
    static let logInterval = TimeAmount.seconds(60)

    init(handler: (@Sendable (HTTP2ConnectRefusal) -> Void)? = nil) { self.handler = handler }

    /// Hands `refusal` to the handler, or says whether it is due for a log line.
    func report(_ refusal: HTTP2ConnectRefusal) -> Bool {
        if let handler {
            handler(refusal)
            return false
        }
        let now = NIODeadline.now()
        return logged.withLock { logged in
            if let last = logged[refusal.description], now - last < Self.logInterval { return false }
            logged[refusal.description] = now
            return true
        }
    }
}
