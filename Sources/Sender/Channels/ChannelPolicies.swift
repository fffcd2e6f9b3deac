import APNsProtocol
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// What the sender knows of broadcast channels' storage policies, for their broadcasts' `apns-expiration`
/// (`APNsBroadcastExpiration`, docs/design.md §5.5): learned once per channel with a channel read
/// (`GET /1/apps/<bundle id>/channels`, `ChannelManagementClient`), and kept. Apple: "Message storage
/// policy configured as part of the request can't be modified later", and a deleted channel's id is never
/// issued again ("the same channel ID can't be created again"), so what a read said stays true: entries
/// are dropped only to bound memory (the oldest first, past `capacity`).
///
/// A read that fails is remembered for `retryAfter`, so a channel APNs does not know, or an app whose
/// channel-management host cannot be reached (a firewall that opens only 443: Apple's hosts listen on
/// 2195 and 2196), costs one read per window, not one per broadcast; meanwhile `policy` answers nil and
/// the caller uses the job's own word (`APNsBroadcastExpiration`'s rule for an unknown policy). Callers
/// asking for a channel whose read is under way wait for that read rather than starting another: the
/// first asker makes the read, in its own task, and the others wait for its promise.
public final class ChannelPolicies: Sendable {
    /// What a read found.
    public enum ReadResult: Sendable, Equatable {
        case policy(APNsChannelStoragePolicy)
        /// APNs does not know the channel (`ChannelNotRegistered`), or answered something unusable for it.
        case channelUnknown(String)
        /// The app's channels cannot be read now (host unreachable, credentials or capability refused): why.
        case appUnavailable(String)
    }

    /// Reads one channel's policy (`app`: the bundle id the channel belongs to).
    public typealias Read = @Sendable (_ app: String, _ channelID: String) async -> ReadResult

    /// Most channels kept: Apple's limit is 10,000 per app and environment.
    public let capacity: Int
    public let retryAfter: Duration
    private let read: Read
    private let clock: @Sendable () -> ContinuousClock.Instant
    private let logger: Logger
    /// Where a read's promise is made (the askers that wait for it resume from there).
    private let eventLoop: any EventLoop

    private struct Key: Hashable, Sendable {
        var app: String
        var channel: String
    }

    private struct State: Sendable {
        var known: [Key: APNsChannelStoragePolicy] = [:]
        /// `known`'s keys, oldest first from `head` (the ones before it were dropped).
        var order: [Key] = []
        var head = 0
        /// Channels whose read failed, until when they are not read again.
        var unknownUntil: [Key: ContinuousClock.Instant] = [:]
        /// Apps whose reads fail, until when none is made.
        var unavailableUntil: [String: ContinuousClock.Instant] = [:]
        /// Reads under way: what their askers meanwhile wait for.
        var reads: [Key: EventLoopFuture<APNsChannelStoragePolicy?>] = [:]
        var readsMade = 0
    }

    private let state = Mutex(State())

    /// `eventLoop`: where the promises of reads under way are made (`run` gives one of its own loops).
    public init(
        capacity: Int = APNsChannelManagement.channelLimitPerEnvironment, retryAfter: Duration = .seconds(60), logger: Logger,
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any(),
        clock: @escaping @Sendable () -> ContinuousClock.Instant = { .now }, read: @escaping Read
    ) {
        self.capacity = max(1, capacity)
        self.retryAfter = retryAfter
        self.logger = logger
        self.eventLoop = eventLoop
        self.clock = clock
        self.read = read
    }

    /// The channel's policy when it is known, without waiting.
    public func known(app: String, channelID: String) -> APNsChannelStoragePolicy? {
        state.withLock { $0.known[Key(app: app, channel: channelID)] }
    }

    /// How many reads were made (for tests and the log).
    public var readsMade: Int { state.withLock { $0.readsMade } }

    /// The channel's policy: known, or read from APNs now (once: callers asking meanwhile share the read);
    /// nil when it cannot be learned now (see above).
    public func policy(app: String, channelID: String) async -> APNsChannelStoragePolicy? {
        let key = Key(app: app, channel: channelID)
        let now = clock()
        let step: Step = state.withLock { s in
            if s.known[key] != nil { return .answer }
            if let pending = s.reads[key] { return .wait(pending) }
            if let until = s.unavailableUntil[app], until > now { return .answer }
            if let until = s.unknownUntil[key], until > now { return .answer }
            s.readsMade += 1
            let promise = eventLoop.makePromise(of: APNsChannelStoragePolicy?.self)
            s.reads[key] = promise.futureResult
            return .read(promise)
        }
        switch step {
        case .answer:
            return known(app: app, channelID: channelID)
        case .wait(let pending):
            // Never fails: the reader only ever succeeds it.
            return try? await pending.get()
        case .read(let promise):
            // `read` and `finish` cannot fail, so the promise is always kept (and the read is not cut
            // short if this asker is cancelled: nothing in it waits on the task's cancellation).
            let policy = finish(key, await read(app, channelID))
            promise.succeed(policy)
            return policy
        }
    }

    /// What an asker of ``policy(app:channelID:)`` does.
    private enum Step {
        /// Answers from what is known (nil: not known, and no read is due yet).
        case answer
        /// Waits for the read under way.
        case wait(EventLoopFuture<APNsChannelStoragePolicy?>)
        /// Reads, then keeps the promise the others wait on.
        case read(EventLoopPromise<APNsChannelStoragePolicy?>)
    }

    /// Learns several channels at once, their reads concurrent (a batch's broadcasts: one wait, not one
    /// per channel).
    public func learn(_ channels: [(app: String, channelID: String)]) async {
        var distinct = Set<Key>()
        for c in channels { distinct.insert(Key(app: c.app, channel: c.channelID)) }
        await withTaskGroup(of: Void.self) { group in
            for key in distinct { group.addTask { _ = await self.policy(app: key.app, channelID: key.channel) } }
        }
    }

    private func finish(_ key: Key, _ result: ReadResult) -> APNsChannelStoragePolicy? {
        let now = clock()
        let (policy, newlyUnavailable) = state.withLock { s -> (APNsChannelStoragePolicy?, Bool) in
            s.reads[key] = nil
            switch result {
            case .policy(let p):
                remember(key, p, in: &s)
                s.unknownUntil[key] = nil
                return (p, false)
            case .channelUnknown:
                if s.unknownUntil.count >= capacity { s.unknownUntil = s.unknownUntil.filter { $0.value > now } }
                if s.unknownUntil.count < capacity { s.unknownUntil[key] = now + retryAfter }
                return (nil, false)
            case .appUnavailable:
                let was = s.unavailableUntil[key.app].map { $0 > now } ?? false
                s.unavailableUntil[key.app] = now + retryAfter
                return (nil, !was)
            }
        }
        switch result {
        case .policy(let p):
            logger.debug(
                "broadcast channel's storage policy learned",
                metadata: ["app": "\(key.app)", "channel": "\(key.channel)", "policy": "\(p.name)"])
        case .channelUnknown(let why):
            logger.debug(
                "broadcast channel's storage policy not known",
                metadata: ["app": "\(key.app)", "channel": "\(key.channel)", "why": "\(why)"])
        case .appUnavailable(let why) where newlyUnavailable:
            logger.warning(
                "cannot read the app's broadcast channels from APNs' channel management: until it can, a broadcast without storage_policy is sent with its own expiry, or apns-expiration 0 without one (accepted on either policy, but nothing is stored on a Most Recent Message channel). Open the channel-management host to this machine, or give storage_policy in the jobs",
                metadata: ["app": "\(key.app)", "why": "\(why)", "retry_in_s": "\(retryAfter.components.seconds)"])
        case .appUnavailable:
            break
        }
        return policy
    }

    private func remember(_ key: Key, _ policy: APNsChannelStoragePolicy, in s: inout State) {
        guard s.known.updateValue(policy, forKey: key) == nil else { return }
        s.order.append(key)
        while s.known.count > capacity, s.head < s.order.count {
            s.known[s.order[s.head]] = nil
            s.head += 1
        }
        // Drop the dead prefix once it is as large as what is kept.
        if s.head > 0 && s.head >= s.order.count - s.head {
            s.order.removeFirst(s.head)
            s.head = 0
        }
    }
}

extension ChannelPolicies {
    /// Reads with `ChannelManagementClient` (`get`): `configuration` gives an app's channel-management
    /// settings (it throws when the app has none: not HTTP/2 with token authentication, or its key cannot
    /// be read).
    public static func apnsReader(
        group: any EventLoopGroup, logger: Logger,
        configuration: @escaping @Sendable (_ app: String) throws -> ChannelManagementConfiguration
    ) -> Read {
        { app, channelID in
            let c: ChannelManagementConfiguration
            do {
                c = try configuration(app)
            } catch {
                return .appUnavailable("\(error)")
            }
            do {
                let (result, _) = try await ChannelManagementClient.perform(
                    .get(channelID: channelID), configuration: c, group: group, logger: logger)
                return readResult(result)
            } catch let error as ChannelManagementError {
                return readResult(error)
            } catch {
                return .appUnavailable("\(error)")
            }
        }
    }

    /// What a successful read says.
    static func readResult(_ result: ChannelResult) -> ReadResult {
        guard case .channel(_, let policy, let value, _) = result else { return .channelUnknown("not a channel's settings: \(result)") }
        guard let policy else { return .channelUnknown("message-storage-policy \(value.map(String.init) ?? "absent") is not 0 or 1") }
        return .policy(policy)
    }

    /// What a failed read says: about the channel (APNs does not know it) or about the app's reads.
    static func readResult(_ error: ChannelManagementError) -> ReadResult {
        switch error.kind {
        case .refused(_, let reason?)
        where [APNsChannelReason.channelNotRegistered, .badChannelId, .missingChannelId].map(\.rawValue).contains(reason):
            .channelUnknown(reason)
        case .badAnswer(let what):
            .channelUnknown(what)
        case .refused, .unreachable:
            .appUnavailable(error.description)
        }
    }
}
