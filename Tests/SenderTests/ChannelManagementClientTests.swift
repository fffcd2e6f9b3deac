import APNsProtocol
import APNsTransport
import Foundation
import HTTP2Simulator
import NIOCore
import NIOPosix
import Sender
import TestSupport
import Testing

/// The channel management client (issue 31 item 3) against the HTTP/2 simulator over TLS, with the
/// test token key and CA: what each answer becomes, and what the messages tell an operator to do.
@Suite struct ChannelManagementClientTests {
    static let shop = "com.example.shop"

    func configuration(
        port: Int, environment: ChannelManagementConfiguration.Environment = .sandbox
    ) throws -> ChannelManagementConfiguration {
        let tokens = try ProviderTokenCache.shared(
            keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID)
        var c = ChannelManagementConfiguration(
            app: Self.shop, environment: environment, host: GatewayAddress(host: "127.0.0.1", port: port), tokens: tokens)
        c.serverHostname = "localhost"
        c.trustRootsPath = TestCertificates.pem("ca")
        c.requestTimeout = .seconds(10)
        return c
    }

    @Test func createGetListDeleteOverTLS() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let c = try configuration(port: sim.port)

        let (created, createID) = try await ChannelManagementClient.perform(.create(.mostRecent), configuration: c, group: group)
        guard case .created(let id, .mostRecent) = created else {
            Issue.record("\(created)")
            return
        }
        #expect(APNsRequestValidator.isCanonicalUUID(createID))
        #expect(sim.channels(app: Self.shop).map(\.id) == [id] && sim.channels(app: Self.shop).first?.storagePolicy == 1)

        let (read, _) = try await ChannelManagementClient.perform(.get(channelID: id), configuration: c, group: group)
        #expect(read == .channel(channelID: id, policy: .mostRecent, policyValue: 1, pushType: "LiveActivity"))
        let (listed, _) = try await ChannelManagementClient.perform(.list, configuration: c, group: group)
        #expect(listed == .list(channelIDs: [id]))
        let (deleted, _) = try await ChannelManagementClient.perform(.delete(channelID: id), configuration: c, group: group)
        #expect(deleted == .deleted(channelID: id))

        do {
            _ = try await ChannelManagementClient.perform(.get(channelID: id), configuration: c, group: group)
            Issue.record("a deleted channel was found")
        } catch let error as ChannelManagementError {
            #expect(error.status == 400 && error.reason == "ChannelNotRegistered" && error.exitStatus == 1)
            #expect(error.description.contains("no channel \(id)") && error.description.contains("--environment production"), "\(error)")
            #expect(error.requestID.map(APNsRequestValidator.isCanonicalUUID) == true)
        }
        try await group.shutdownGracefully()
        try await sim.stop()
    }

    @Test func theChannelLimitSaysWhatToDo() async throws {
        let sim = try await HTTP2Simulator.startedForTests { $0.faults.channelLimit = 1 }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let c = try configuration(port: sim.port)
        _ = try await ChannelManagementClient.perform(.create(.noStorage), configuration: c, group: group)
        do {
            _ = try await ChannelManagementClient.perform(.create(.noStorage), configuration: c, group: group)
            Issue.record("a channel past the limit was created")
        } catch let error as ChannelManagementError {
            #expect(error.status == 400 && error.reason == "CannotCreateChannelConfig" && error.exitStatus == 1)
            #expect(error.description.contains("channel limit") && error.description.contains("channel delete --channel"), "\(error)")
        }
        #expect(sim.channels(app: Self.shop).count == 1)
        try await group.shutdownGracefully()
        try await sim.stop()
    }

    /// Nothing listening: no answer, exit status 2, the message names the host and the ports to check.
    @Test func anUnreachableHostIsNotARefusal() async throws {
        let port = try freePort()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let c = try configuration(port: port)
        do {
            _ = try await ChannelManagementClient.perform(.list, configuration: c, group: group)
            Issue.record("listed channels of nothing")
        } catch let error as ChannelManagementError {
            #expect(error.exitStatus == 2 && error.reason == nil)
            #expect(error.description.contains("no answer from 127.0.0.1:\(port)") && error.description.contains("2195"), "\(error)")
        }
        try await group.shutdownGracefully()
    }

    /// A server whose certificate does not chain to the configured CA: the TLS failure is the message.
    @Test func anUntrustedServerIsNamedAsSuch() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var c = try configuration(port: sim.port)
        c.trustRootsPath = TestCertificates.pem("rogue-ca")
        do {
            _ = try await ChannelManagementClient.perform(.list, configuration: c, group: group)
            Issue.record("trusted a server outside the CA")
        } catch let error as ChannelManagementError {
            #expect(error.exitStatus == 2)
            #expect(error.description.lowercased().contains("certificate"), "\(error)")
        }
        try await group.shutdownGracefully()
        try await sim.stop()
    }

    @Test func answersAreReadLiberallyAndErrorsNamedPrecisely() {
        let create = ChannelOperation.create(.noStorage)
        #expect(create.body == Array(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#.utf8))
        #expect(create.method == "POST" && create.path(app: "a.b") == "/1/apps/a.b/channels")
        #expect(ChannelOperation.list.path(app: "a.b") == "/1/apps/a.b/all-channels" && ChannelOperation.list.method == "GET")
        #expect(ChannelOperation.delete(channelID: "x").method == "DELETE")
        // The id in the header (Apple) or, failing that, in a body.
        #expect(
            create.result(of: ChannelAnswer(status: 201, channelID: "YQ==")) == .success(.created(channelID: "YQ==", policy: .noStorage)))
        #expect(
            create.result(of: ChannelAnswer(status: 200, body: Array(#"{"channel-id":"Yg=="}"#.utf8)))
                == .success(.created(channelID: "Yg==", policy: .noStorage)))
        if case .failure(.badAnswer) = create.result(of: ChannelAnswer(status: 201)) {
        } else {
            Issue.record("a create without an id was taken")
        }
        #expect(
            ChannelOperation.list.result(of: ChannelAnswer(status: 200, body: Array(#"{"channels":["a","b"]}"#.utf8)))
                == .success(.list(channelIDs: ["a", "b"])))
        #expect(
            ChannelOperation.get(channelID: "a").result(of: ChannelAnswer(status: 200, body: Array(#"{"message-storage-policy":7}"#.utf8)))
                == .success(.channel(channelID: "a", policy: nil, policyValue: 7, pushType: nil)))
        #expect(ChannelOperation.delete(channelID: "a").result(of: ChannelAnswer(status: 204)) == .success(.deleted(channelID: "a")))
        #expect(
            ChannelOperation.list.result(of: ChannelAnswer(status: 403, body: Array(#"{"reason":"BadEnvironmentKeyIdInToken"}"#.utf8)))
                == .failure(.refused(status: 403, reason: "BadEnvironmentKeyIdInToken")))

        // A wrong environment names the key and the way out.
        let tokens = try? ProviderTokenCache.shared(
            keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID)
        #expect(tokens != nil)
        let error = ChannelManagementError(
            kind: .refused(status: 403, reason: "BadEnvironmentKeyIdInToken"), operation: .list, app: Self.shop,
            environment: .production, host: ChannelManagementConfiguration.appleHost(.production), keyID: "TESTKEY123", requestID: nil)
        #expect(
            error.description.contains("TESTKEY123 is not enabled for the production environment")
                && error.description.contains("--environment sandbox"), "\(error)")
        #expect(ChannelManagementConfiguration.appleHost(.sandbox).description == "api-manage-broadcast.sandbox.push.apple.com:2195")
        #expect(ChannelManagementConfiguration.appleHost(.production).description == "api-manage-broadcast.push.apple.com:2196")
    }
}

/// A port nothing listens on (bound, then released).
private func freePort() throws -> Int {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    defer { try? group.syncShutdownGracefully() }
    let channel = try ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).wait()
    let port = channel.localAddress?.port ?? 1
    try channel.close().wait()
    return port
}

/// Channel management goes through the HTTPS proxy as the provider API's connections do (one connector).
@Suite(.enabled(if: TinyProxy.available, TinyProxy.skipReason))
struct ChannelManagementThroughProxyTests {
    @Test func aChannelIsCreatedThroughTheProxy() async throws {
        let sim = try await HTTP2Simulator.startedForTests()
        let proxy = try await TinyProxy(connectPorts: [sim.port])
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var c = try ChannelManagementClientTests().configuration(port: sim.port)
        c.proxy = try HTTPSProxy(url: "http://127.0.0.1:\(proxy.port)")
        let (created, _) = try await ChannelManagementClient.perform(.create(.noStorage), configuration: c, group: group)
        guard case .created(let id, _) = created else {
            Issue.record("not created: \(created)")
            return
        }
        #expect(sim.channels(app: ChannelManagementClientTests.shop).count == 1, "\(id)")
        #expect(proxy.connectRequests.contains { $0.contains("CONNECT 127.0.0.1:\(sim.port) HTTP/1.1") }, "\(proxy.connectRequests)")
        try await group.shutdownGracefully()
        try await sim.stop()
    }
}
