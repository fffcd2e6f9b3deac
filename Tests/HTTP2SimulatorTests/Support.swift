import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import HTTP2Simulator
import NIOCore
import NIOPosix
import TestSupport
import Testing

/// A simulator on a free port with the test certificates and the test token key, and clients for it.
final class H2Fixture: @unchecked Sendable {
    let simulator: HTTP2Simulator
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let signer: ProviderTokenSigner
    private var clients: [HTTP2TestClient] = []

    static let shop = "com.example.shop"
    static let token = String(repeating: "ab", count: 32)
    static let payload = Array(#"{"aps":{"alert":"Spring sale"},"jid":"job-1"}"#.utf8)

    init(_ configure: (inout HTTP2SimulatorConfiguration) -> Void = { _ in }) async throws {
        simulator = try await HTTP2Simulator.startedForTests(configure: configure)
        signer = try ProviderTokenSigner(
            keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID)
    }

    /// A token-auth client (no certificate).
    func tokenClient(ignoreStreamLimit: Bool = false) async throws -> HTTP2TestClient {
        let c = try await HTTP2TestClient.connect(
            port: simulator.port, group: group, trustRoots: TestCertificates.pem("ca"), ignoreStreamLimit: ignoreStreamLimit)
        clients.append(c)
        return c
    }

    /// A certificate-auth client for `app`.
    func certClient(_ app: String = H2Fixture.shop) async throws -> HTTP2TestClient {
        let c = try await HTTP2TestClient.connect(
            port: simulator.port, group: group, trustRoots: TestCertificates.pem("ca"), certificate: TestCertificates.pem(app),
            key: TestCertificates.key(app))
        clients.append(c)
        return c
    }

    /// One iat per fixture: a provider keeps its token for up to an hour, and a new iat on the same
    /// connection is a token update (429 TooManyProviderTokenUpdates within the refresh interval).
    let issuedAt = Int64(Date().timeIntervalSince1970)

    func bearer(issuedAt: Int64? = nil) throws -> String {
        let issuedAt = issuedAt ?? self.issuedAt
        return "bearer " + (try signer.token(issuedAt: issuedAt))
    }

    /// The usual headers of a token-auth alert.
    func headers(topic: String = H2Fixture.shop, extra: [(String, String)] = []) throws -> [(String, String)] {
        [("apns-topic", topic), ("authorization", try bearer()), ("apns-push-type", "alert")] + extra
    }

    func send(
        _ client: HTTP2TestClient, token: String = H2Fixture.token, headers: [(String, String)]? = nil,
        payload: [UInt8] = H2Fixture.payload
    ) async throws -> HTTP2TestClient.Response {
        try await client.request(path: "/3/device/\(token)", headers: try headers ?? self.headers(), body: payload)
    }

    func shutdown() async throws {
        for c in clients { await c.close() }
        try await simulator.stop()
        try await group.shutdownGracefully()
    }
}

/// The reason of an error response, read with the shared body decoder.
func reason(_ r: HTTP2TestClient.Response) -> String? {
    (try? APNsErrorBody(decoding: r.body))?.reasonText
}
