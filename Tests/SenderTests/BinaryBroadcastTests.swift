import APNsProtocol
import APNsTransport
import NIOPosix
import TestSupport
import Testing

@testable import Sender

/// The binary interface has no broadcast: a channel's notification handed to a binary pool is refused
/// at once (dead-lettered with a reason that says so), never written with a placeholder token, and the
/// pool opens no connection for it.
@Suite struct BinaryBroadcastTests {
    @Test func aBinaryPoolRefusesABroadcast() async throws {
        let log = OutcomeLog()
        let config = BinaryTransportConfiguration(
            credentials: .test(app: shop, in: TestCertificates.directory), gateways: [GatewayAddress(host: "127.0.0.1", port: 9)],
            shards: 2, shard: ShardConfiguration(), serverHostname: "localhost")
        let pool = try BinaryTransport(configuration: config, group: MultiThreadedEventLoopGroup.singleton, onOutcomes: log.handler)
        let broadcast = PushNotification(
            jobID: "b", app: shop, recipient: .channel(BroadcastChannelID("dHN0")!), payload: Array("{}".utf8), expiry: 0,
            priority: .immediate, pushType: .liveactivity)
        try await pool.send([broadcast])
        #expect(log.outcomes.map(\.jobID) == ["b"])
        #expect(log.outcomes.first?.rejection == .badRequest(reason: "broadcast-needs-http2-token-auth"))
        #expect(log.outcomes.first?.kind == .deadLettered)
        let stats = await pool.statistics()
        #expect(stats.allSatisfy { $0.state != "connected" && $0.state != "connecting" }, "\(stats)")
        _ = await pool.drainAndClose(before: .now + .seconds(5))
    }
}
