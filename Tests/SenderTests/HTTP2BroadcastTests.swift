#if canImport(HTTP2Simulator)
import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import NIOCore
import NIOHPACK
import NIOPosix
import Testing
import TestSupport

@testable import Sender

/// Issue 31 item 2: a broadcast is one request, `POST /4/broadcasts/apps/<bundle id>` with
/// `apns-channel-id`, on the app's ordinary HTTP/2 connections beside device pushes. Its header block as
/// the server's HPACK decoder reads it; then over TLS against the simulator: it reaches the channel's
/// subscribers in one request, an unknown channel is a dead letter with Apple's reason (never a token
/// suppression), and a certificate connection cannot broadcast.
@Suite(.serialized) struct HTTP2BroadcastTests {
    static let update = #"{"aps":{"event":"update","timestamp":1767000000,"content-state":{"home":2,"away":1}},"jid":"#

    /// A broadcast as the pipeline hands it to the transport: `expiry` already follows its channel's
    /// storage policy (0 for a No Message Stored channel, design §5.5); `size`: its payload padded to that
    /// many bytes.
    static func broadcast(
        _ id: String, channel: String, priority: Priority = .immediate, expiry: UInt32 = 0, size: Int? = nil
    ) -> PushNotification {
        var payload = update + "\"\(id)\"}"
        if let size {
            payload.removeLast()
            payload += #","pad":""# + String(repeating: "p", count: size - payload.utf8.count - 10) + "\"}"
        }
        return PushNotification(
            jobID: id, app: shop, recipient: .channel(BroadcastChannelID(channel)!), payload: Array(payload.utf8), expiry: expiry,
            priority: priority, pushType: .liveactivity, position: SourcePosition(partition: 0, offset: 0))
    }

    @Test func aBroadcastsHeaderBlock() throws {
        var codec = HTTP2ClientFrameCodec(allocator: ByteBufferAllocator())
        codec.writePreface()
        let head = try HTTP2Request(Self.broadcast("b-1", channel: "dHN0LXNyY2gtMDAwMDAx", priority: .conservePower, expiry: 1_800_000_000))
        #expect(head.path == "/4/broadcasts/apps/com.example.shop")
        codec.writeRequest(
            streamID: 1, head: head, authority: "localhost", authorization: HTTP2ClientFrameCodecTests.authorization, payload: [0x7B, 0x7D])
        let frames = HTTP2ClientFrameCodecTests.frames(codec.takeOutbound())
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        var block = frames[2].payload
        let headers = try decoder.decodeHeaders(from: &block)
        #expect(
            headers.map { "\($0.name): \($0.value)" } == [
                ":method: POST", ":scheme: https", ":path: /4/broadcasts/apps/com.example.shop", ":authority: localhost",
                "authorization: \(HTTP2ClientFrameCodecTests.authorization)", "apns-channel-id: dHN0LXNyY2gtMDAwMDAx",
                "apns-request-id: \(HTTP2Request.apnsID(jobID: "b-1"))", "apns-expiration: 1800000000", "apns-priority: 5",
                "apns-push-type: liveactivity",
            ])
        // No apns-topic (the path names the app) and no apns-id (apns-request-id names the request).
        #expect(!headers.contains { $0.name == "apns-topic" || $0.name == "apns-id" })
    }

    @Test func aBroadcastThatIsNotALiveActivityIsRefusedBeforeSending() {
        var n = Self.broadcast("b-2", channel: "dHN0")
        n.pushType = .alert
        #expect(throws: HTTP2Request.Invalid.invalidPushType) { try HTTP2Request(n) }
    }

    /// "the payload is limited to a maximum size of 5 KB (5,120 bytes)" for a broadcast; a Live Activity to
    /// a device keeps 4096.
    @Test func aBroadcastTakes5120Bytes() throws {
        let big = Self.broadcast("b-3", channel: "dHN0", size: 4500)
        #expect(big.payload.count == 4500)
        #expect(try HTTP2Request(big).channel == "dHN0")
        #expect(try HTTP2Request(Self.broadcast("b-5", channel: "dHN0", size: 5120)).channel == "dHN0")
        let over = Self.broadcast("b-4", channel: "dHN0", size: 5121)
        #expect(throws: HTTP2Request.Invalid.payloadTooLarge) { try HTTP2Request(over) }
        var device = PushNotification(
            jobID: "d", app: shop, token: testToken(1), payload: big.payload, expiry: 0, priority: .immediate, pushType: .liveactivity)
        #expect(throws: HTTP2Request.Invalid.payloadTooLarge) { try HTTP2Request(device) }
        device.payload = Array(big.payload.prefix(4096))
        #expect(throws: Never.self) { try HTTP2Request(device) }
    }

    @Test func oneRequestReachesTheChannelsSubscribersOverTLS() async throws {
        let sim = try await HTTP2TransportTests.simulator(tokens: true) {
            $0.faults.channelSubscribers = 250
            $0.sandbox = true
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // A Most Recent Message channel: it takes a nonzero apns-expiration.
        let (created, _) = try await ChannelManagementClient.perform(
            .create(.mostRecent), configuration: try ChannelManagementClientTests().configuration(port: sim.port), group: group)
        guard case .created(let channel, _) = created else {
            Issue.record("\(created)")
            return
        }
        let log = OutcomeLog()
        let transport = try HTTP2TransportTests.transport(sim, connections: 1, auth: try HTTP2TodayTests.tokenAuth(), log: log)
        var jobs = [
            Self.broadcast("score-1", channel: channel, expiry: 1_800_000_000),
            Self.broadcast("score-2", channel: channel, priority: .conservePower, expiry: 1_800_000_000),
        ]
        // A device push on the same connection, and a broadcast to a channel that was never created.
        jobs.append(HTTP2TodayTests.notification(7, payload: HTTP2TodayTests.liveUpdate, priority: .immediate, pushType: .liveactivity))
        jobs.append(Self.broadcast("nowhere", channel: "bm93aGVyZQ=="))
        try await HTTP2TransportTests.send(jobs, through: transport)

        #expect(HTTP2TransportTests.kinds(log) == [.accepted: 3, .deadLettered: 1])
        let nowhere = try #require(log.outcomes.first { $0.jobID == "nowhere" })
        // A channel has no token to suppress: a dead letter with Apple's reason, to publish again.
        #expect(nowhere.rejection == .badRequest(reason: "ChannelNotRegistered") && nowhere.code == "ChannelNotRegistered")
        #expect(nowhere.notification.channel?.value == "bm93aGVyZQ==")
        // Sandbox: the broadcast's answer carries an apns-unique-id too.
        #expect(log.outcomes.first { $0.jobID == "score-1" }?.uniqueID.map(APNsRequestValidator.isUUID) == true)

        let records = Dictionary(uniqueKeysWithValues: sim.records.map { ($0.jobID ?? "", $0) })
        #expect(records.count == 3)
        for (id, priority) in [("score-1", 10), ("score-2", 5)] {
            let r = try #require(records[id])
            #expect(r.channel == channel && r.reached == 250 && r.token.isEmpty, "\(r)")
            #expect(r.app == shop && r.pushType == "liveactivity" && r.priority == priority && r.expiration == 1_800_000_000)
            #expect(r.apnsID == HTTP2Request.apnsID(jobID: id) && r.auth.hasPrefix("token:"))
        }
        #expect(records["today-7"]?.channel == nil && records["today-7"]?.reached == nil && records["today-7"]?.token == testToken(7).hex)
        #expect(sim.totals.broadcasts == 2 && sim.totals.broadcastDevicesReached == 500)
        #expect(sim.totals.byReason["ChannelNotRegistered"] == 1)
        try await group.shutdownGracefully()
        try await sim.stop()
    }

    /// The simulator refuses what Apple refuses, so a product that breaks a rule fails here: on a No
    /// Message Stored channel (`channel create`'s default) a nonzero apns-expiration is 400
    /// BadExpirationDate ("For channels with a No Messages Stored storage policy, you can only specify a 0
    /// expiration value") and 0 is delivered; a 4,500-byte broadcast and priority 1 are delivered ("5 KB
    /// (5,120 bytes)", "Specify 1 …"); an unknown channel is 400 ChannelNotRegistered, as Apple's table says.
    @Test func theSimulatorHoldsBroadcastsToApplesRules() async throws {
        let sim = try await HTTP2TransportTests.simulator(tokens: true)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let (created, _) = try await ChannelManagementClient.perform(
            .create(.noStorage), configuration: try ChannelManagementClientTests().configuration(port: sim.port), group: group)
        guard case .created(let channel, _) = created else {
            Issue.record("\(created)")
            return
        }
        let log = OutcomeLog()
        let transport = try HTTP2TransportTests.transport(sim, connections: 1, auth: try HTTP2TodayTests.tokenAuth(), log: log)
        try await HTTP2TransportTests.send(
            [
                Self.broadcast("no-expiry", channel: channel),
                Self.broadcast("stored", channel: channel, expiry: 1_800_000_000),
                Self.broadcast("large", channel: channel, size: 4500),
                Self.broadcast("low", channel: channel, priority: .powerFirst),
                Self.broadcast("unknown", channel: "bm93aGVyZQ=="),
            ], through: transport)

        #expect(Self.broadcast("large", channel: channel, size: 4500).payload.count == 4500)
        let outcomes = Dictionary(uniqueKeysWithValues: log.outcomes.map { ($0.jobID, $0) })
        for id in ["no-expiry", "large", "low"] { #expect(outcomes[id]?.kind == .accepted, "\(id): \(String(describing: outcomes[id]))") }
        #expect(outcomes["stored"]?.rejection == .badRequest(reason: "BadExpirationDate"))
        #expect(outcomes["unknown"]?.rejection == .badRequest(reason: "ChannelNotRegistered"))
        let records = Dictionary(uniqueKeysWithValues: sim.records.map { ($0.jobID ?? "", $0) })
        #expect(Set(records.keys) == ["no-expiry", "large", "low"])
        #expect(records["no-expiry"]?.expiration == 0 && records["low"]?.priority == 1)
        #expect(
            sim.totals.byStatus[400] == 2 && sim.totals.byReason["BadExpirationDate"] == 1
                && sim.totals.byReason["ChannelNotRegistered"] == 1)
        try await group.shutdownGracefully()
        try await sim.stop()
    }

    /// One channel's broadcasts go on one connection (in order); an app's channels spread over its
    /// connections (by the channel id, not the placeholder token every broadcast carries).
    @Test func broadcastsSpreadByChannel() async throws {
        let sim = try await HTTP2TransportTests.simulator(tokens: true)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let manage = try ChannelManagementClientTests().configuration(port: sim.port)
        var channels: [String] = []
        for _ in 0..<8 {
            let (created, _) = try await ChannelManagementClient.perform(.create(.noStorage), configuration: manage, group: group)
            if case .created(let id, _) = created { channels.append(id) }
        }
        #expect(channels.count == 8)
        let log = OutcomeLog()
        let transport = try HTTP2TransportTests.transport(sim, connections: 4, auth: try HTTP2TodayTests.tokenAuth(), log: log)
        var jobs: [PushNotification] = []
        for round in 0..<5 { for (c, channel) in channels.enumerated() { jobs.append(Self.broadcast("c\(c)-\(round)", channel: channel)) } }
        try await HTTP2TransportTests.send(jobs, through: transport)
        #expect(HTTP2TransportTests.kinds(log) == [.accepted: 40])
        var connectionsOf: [String: Set<Int>] = [:]
        for r in sim.records { connectionsOf[r.channel ?? "", default: []].insert(r.connection) }
        #expect(connectionsOf.count == 8 && connectionsOf.values.allSatisfy { $0.count == 1 }, "\(connectionsOf)")
        #expect(Set(connectionsOf.values.flatMap { $0 }).count > 1, "\(connectionsOf)")
        try await group.shutdownGracefully()
        try await sim.stop()
    }

    @Test func aCertificateConnectionCannotBroadcast() async throws {
        let sim = try await HTTP2TransportTests.simulator()
        let log = OutcomeLog()
        let transport = try HTTP2TransportTests.transport(sim, connections: 1, log: log)  // certificate auth
        try await HTTP2TransportTests.send([Self.broadcast("cert-b", channel: "dHN0")], through: transport)
        #expect(log.outcomes.map(\.code) == ["TopicDisallowed"] && HTTP2TransportTests.kinds(log) == [.deadLettered: 1])
        #expect(sim.records.isEmpty)
        try await sim.stop()
    }
}
#endif
