import HTTP2Simulator
import NIOSSL
import TestSupport
import Testing

/// Issue 28 (6): the HTTP/2 simulator, like Apple's servers, refuses TLS before 1.2.
@Suite struct HTTP2TLSVersionTests {
    @Test func refusesTLS11() async throws {
        let f = try await H2Fixture()
        for old in [TLSVersion.tlsv1, .tlsv11] {
            await #expect(throws: (any Error).self, "TLS \(old)") {
                try await TLSProbe.handshake(port: f.simulator.port, maximum: old, alpn: ["h2"])
            }
        }
        try await TLSProbe.handshake(port: f.simulator.port, minimum: .tlsv12, maximum: .tlsv12, alpn: ["h2"])
        try await f.shutdown()
    }
}
