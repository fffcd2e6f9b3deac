import APNsProtocol
import Foundation
import Jobs
import Logging
import NIOCore
import Sender

/// What a broadcast's `apns-expiration` is made from (docs/design.md §5.5): the job's own `expiry` (nil:
/// none) and its channel's storage policy as the job states it (`storage_policy`; nil: not stated).
public struct BroadcastExpiryRequest: Sendable, Equatable {
    public var statedExpiry: UInt32?
    public var storagePolicy: APNsChannelStoragePolicy?

    public init(statedExpiry: UInt32?, storagePolicy: APNsChannelStoragePolicy?) {
        self.statedExpiry = statedExpiry
        self.storagePolicy = storagePolicy
    }

    public init(_ job: Job) {
        self.init(statedExpiry: job.statedExpiry, storagePolicy: job.storagePolicy)
    }

    /// Whether the expiration depends on what APNs says of the channel: no policy stated, and an expiry
    /// other than 0 (0 is accepted whatever the policy, so a job saying it never waits for a read).
    public var needsChannelPolicy: Bool { storagePolicy == nil && statedExpiry != 0 }

    /// The expiration to send, the channel's policy as APNs said it being `learned` (nil: not known; a
    /// stated policy wins, the job's word being the producer's); a nonzero expiry on a No Message Stored
    /// channel is refused `expiry-on-no-storage-channel`.
    public func expiration(learned: APNsChannelStoragePolicy?, now: UInt32) -> Result<UInt32, JobError> {
        APNsBroadcastExpiration.expiration(requested: statedExpiry, policy: storagePolicy ?? learned, now: now)
            .mapError { JobError(reason: .expiryOnNoStorageChannel, detail: $0.description) }
    }

    /// As ``expiration(learned:now:)``, the policy learned from `policies` when it is needed (a read of
    /// the channel, at most once per channel: `ChannelPolicies`).
    public func expiration(
        app: String, channel: BroadcastChannelID, policies: ChannelPolicies?, now: UInt32
    ) async -> Result<UInt32, JobError> {
        var learned: APNsChannelStoragePolicy?
        if needsChannelPolicy, let policies { learned = await policies.policy(app: app, channelID: channel.value) }
        return expiration(learned: learned, now: now)
    }

    static var now: UInt32 { UInt32(clamping: Int64(Date().timeIntervalSince1970)) }
}

/// The broadcast expirations of one batch (`Dispatch`): the first broadcast that needs its channel's
/// policy has every channel the batch's broadcasts name read at once, concurrently (`ChannelPolicies`
/// keeps what is learned), so a batch naming many new channels waits for about one read, not one per
/// channel; a batch without broadcasts never gets here.
struct BroadcastExpiries {
    let policies: ChannelPolicies?
    let logger: Logger
    private var learned = false
    private var clock: UInt32?

    init(policies: ChannelPolicies?, logger: Logger) {
        self.policies = policies
        self.logger = logger
    }

    /// `job`'s `apns-expiration`; `batch` lists the batch's jobs (called once, when the first read is due).
    mutating func expiration(of job: Job, channel: BroadcastChannelID, batch: () -> [Job]) async throws(JobError) -> UInt32 {
        let request = BroadcastExpiryRequest(job)
        var policy: APNsChannelStoragePolicy?
        if request.needsChannelPolicy, let policies {
            policy = policies.known(app: job.app, channelID: channel.value)
            if policy == nil && !learned {
                learned = true
                let channels = batch().compactMap { j -> (app: String, channelID: String)? in
                    guard let c = j.channel, BroadcastExpiryRequest(j).needsChannelPolicy else { return nil }
                    return (j.app, c.value)
                }
                await policies.learn(channels)
                policy = policies.known(app: job.app, channelID: channel.value)
            } else if policy == nil {
                // A channel this batch's first read left unknown (or one it did not name): its read, if due.
                policy = await policies.policy(app: job.app, channelID: channel.value)
            }
        }
        let now = clock ?? BroadcastExpiryRequest.now
        clock = now
        switch request.expiration(learned: policy, now: now) {
        case .success(let expiration): return expiration
        case .failure(let refusal):
            logger.debug(
                "broadcast refused before sending",
                metadata: [
                    "job_id": "\(job.id)", "channel": "\(channel.value)", "reason": "\(refusal.reason.rawValue)",
                    "detail": "\(refusal.detail)",
                ])
            throw refusal
        }
    }
}

extension PipelineRunner {
    /// What `run` learns broadcast channels' storage policies with: a channel read per channel, through
    /// the app's channel-management settings (`channelPolicyReadConfiguration`); at most Apple's 10,000
    /// channels kept per app that can broadcast. Nil when none can.
    static func channelPolicies(_ c: PipelineConfiguration, group: any EventLoopGroup, logger: Logger) -> ChannelPolicies? {
        let broadcasters = c.apps.filter { (try? $0.checkCanBroadcast()) != nil }
        guard !broadcasters.isEmpty else { return nil }
        return ChannelPolicies(
            capacity: APNsChannelManagement.channelLimitPerEnvironment * broadcasters.count, logger: logger, eventLoop: group.any(),
            read: ChannelPolicies.apnsReader(group: group, logger: logger) { app in try c.channelPolicyReadConfiguration(forApp: app) })
    }
}
