import APNsProtocol
import APNsTransport
import Logging
import NIOCore
import NIOPosix
import Synchronization
import TestSupport
import Testing

@testable import Sender

/// A transport that sends nothing: it keeps what it is handed and answers each notification accepted.
/// It lives here, beside the real transports and touching none of them, to show that a transport plugs
/// into the seam additively: a `NotificationTransport`, a `TransportConfiguration` that makes it, and
/// nothing else (not the router, not the factory, not the other transports or their configurations).
final class RecordingTransport: NotificationTransport {
    let app: String
    var protocolName: String { "recording" }
    let limiter: ConnectionLimiter
    let cancellations: CampaignCancellations?
    private let onOutcomes: OutcomeHandler
    private let state = Mutex<(sent: [PushNotification], closed: Bool)>(([], false))

    init(configuration: RecordingTransportConfiguration, limiter: ConnectionLimiter, onOutcomes: @escaping OutcomeHandler) {
        app = configuration.app
        self.limiter = limiter
        cancellations = configuration.cancellations
        self.onOutcomes = onOutcomes
    }

    var sent: [PushNotification] { state.withLock { $0.sent } }

    func send(_ notifications: [PushNotification]) async throws {
        try state.withLock {
            if $0.closed { throw SenderError.closed(app: app) }
            $0.sent.append(contentsOf: notifications)
        }
        onOutcomes(
            OutcomeBatch(
                app: app, connection: 0,
                outcomes: notifications.map { Outcome(notification: $0, delivery: .accepted, attempts: 1, connection: 0) },
                events: SenderEvents()))
    }

    func drainAndClose(before deadline: ContinuousClock.Instant) async -> [DrainOutcome] {
        state.withLock { $0.closed = true }
        return [.allAnswered]
    }

    func statistics() async -> [ConnectionStatistics] {
        var s = ConnectionStatistics()
        s.app = app
        s.state = state.withLock { $0.closed } ? "stopped" : "connected"
        return [s]
    }
}

struct RecordingTransportConfiguration: TransportConfiguration {
    var app: String
    var attemptsPerSecondPerGateway = 20.0
    var cancellations: CampaignCancellations?

    // What the protocol can do: a recorder takes whatever it is given.
    static var protocolName: String { "recording" }
    static var interfaceDescription: String { "the recorder" }
    static var hasTokenAuthentication: Bool { true }
    static var carriesAnyTokenSize: Bool { true }
    static var addressesTokensByHex: Bool { true }
    static var requestsHaveIDs: Bool { false }
    static var hasFeedbackService: Bool { false }
    static var keepsWrittenNotifications: Bool { false }
    static var unsettledHolding: UnsettledHolding { .openStreams }
    static func payloadLimit(pushType: APNsPushType?, broadcast: Bool) -> Int? { nil }

    func makeTransport(
        group: any EventLoopGroup, limiter: ConnectionLimiter, logger: Logger, onOutcomes: @escaping OutcomeHandler
    ) throws -> any NotificationTransport {
        RecordingTransport(configuration: self, limiter: limiter, onOutcomes: onOutcomes)
    }
}

@Suite struct RecordingTransportTests {
    static let recorder = "com.example.recorder"

    static func notification(_ id: String, app: String, recipient: Recipient, pushType: APNsPushType? = nil) -> PushNotification {
        PushNotification(
            jobID: id, app: app, recipient: recipient, payload: Array(#"{"aps":{"alert":"hi"},"jid":"\#(id)"}"#.utf8), expiry: 0,
            priority: .immediate, pushType: pushType)
    }

    /// The test transport, built by the same factory as a real HTTP/2 transport (over TLS to the
    /// simulator) and routed by the same router: each gets its own app's notifications, device and
    /// channel recipients alike, and both report through the one outcome handler; an app with neither
    /// comes back to the caller.
    @Test func aNewTransportPlugsInBesideTheRealOnes() async throws {
        let sim = try await HTTP2TransportTests.simulator()
        let log = OutcomeLog()
        let factory = TransportFactory(group: MultiThreadedEventLoopGroup.singleton, logger: Logger(label: "apns.sender.test"))
        var http2 = HTTP2TransportConfiguration(
            app: shop, authentication: .certificate(.test(app: shop, in: TestCertificates.directory)),
            hosts: [GatewayAddress(host: "127.0.0.1", port: sim.port)])
        http2.serverHostname = "localhost"
        http2.connections = 1
        var recording: any TransportConfiguration = RecordingTransportConfiguration(app: Self.recorder)
        let cancellations = CampaignCancellations()
        recording.cancellations = cancellations
        let router = Router(transports: [
            try factory.make(http2, onOutcomes: log.handler), try factory.make(recording, onOutcomes: log.handler),
        ])
        let recorder = try #require(router.transports[Self.recorder] as? RecordingTransport)
        #expect(recorder.cancellations === cancellations)
        #expect(router.transports[shop]?.protocolName == "http2")

        let channel = try #require(BroadcastChannelID("dHN0"))
        let toShop = (0..<3).map { job($0, token: $0) }
        let toRecorder = [
            Self.notification("r-0", app: Self.recorder, recipient: .device(testToken(1))),
            Self.notification("r-1", app: Self.recorder, recipient: .channel(channel), pushType: .liveactivity),
            Self.notification("r-2", app: Self.recorder, recipient: .device(testToken(2))),
        ]
        let orphan = Self.notification("o-0", app: "com.example.nobody", recipient: .device(testToken(3)))
        let returned = try await router.send([toRecorder[0], toShop[0], orphan, toShop[1], toRecorder[1], toRecorder[2], toShop[2]])
        #expect(returned.map(\.jobID) == ["o-0"])
        // In the order given, and as given: the recipient and the typed push type travel untouched.
        #expect(recorder.sent.map(\.jobID) == ["r-0", "r-1", "r-2"])
        #expect(recorder.sent.map(\.recipient) == toRecorder.map(\.recipient))
        #expect(recorder.sent[1].pushType == .liveactivity && recorder.sent[1].channel == channel)

        let drained = await router.drainAndClose()
        #expect(drained[Self.recorder] == [.allAnswered])
        #expect(drained[shop] != nil)
        #expect(await recorder.statistics().map(\.state) == ["stopped"])
        let accepted = Set(log.outcomes.filter { $0.kind == .accepted }.map(\.jobID))
        #expect(accepted == Set((toShop + toRecorder).map(\.jobID)))
        #expect(Set(sim.records.compactMap(\.jobID)) == Set(toShop.map(\.jobID)))
        try await sim.stop()
    }

    /// Transports of one kind with the same reconnect rate share the factory's limiter (the gateway
    /// counts connection attempts, whichever app makes them); another rate has its own.
    @Test func transportsOfAKindShareTheirConnectionLimiter() throws {
        let factory = TransportFactory(group: MultiThreadedEventLoopGroup.singleton, logger: Logger(label: "apns.sender.test"))
        func limiter(_ configuration: RecordingTransportConfiguration) throws -> ConnectionLimiter {
            try #require(try factory.make(configuration, onOutcomes: { _ in }) as? RecordingTransport).limiter
        }
        let a = try limiter(RecordingTransportConfiguration(app: "a"))
        let b = try limiter(RecordingTransportConfiguration(app: "b"))
        let faster = try limiter(RecordingTransportConfiguration(app: "c", attemptsPerSecondPerGateway: 40))
        #expect(a === b)
        #expect(a !== faster)
        // Another factory (another process) shares nothing with this one.
        let other = TransportFactory(group: MultiThreadedEventLoopGroup.singleton, logger: Logger(label: "apns.sender.test"))
        let elsewhere = try #require(
            try other.make(RecordingTransportConfiguration(app: "a"), onOutcomes: { _ in }) as? RecordingTransport)
        #expect(elsewhere.limiter !== a)
    }
}
