import GatewaySimulator
import NIOSSL
import TestSupport
import Testing

/// Issue 28 (6): the simulators, like Apple's servers, refuse TLS before 1.2 (swift-nio-ssl allows 1.0
/// unless told otherwise); a TLS 1.2 client with the same certificate completes its handshake, so the
/// refusal is the version's.
@Suite struct TLSVersionTests {
    @Test func binarySimulatorRefusesTLS11() async throws {
        try await withSimulator { simulator in
            for old in [TLSVersion.tlsv1, .tlsv11] {
                await #expect(throws: (any Error).self, "TLS \(old)") {
                    try await TLSProbe.handshake(port: simulator.ports.gateway, maximum: old, certificate: shop)
                }
            }
            try await TLSProbe.handshake(port: simulator.ports.gateway, maximum: .tlsv12, certificate: shop)
            try await TLSProbe.handshake(port: simulator.ports.feedback, maximum: .tlsv13, certificate: shop)
            await #expect(throws: (any Error).self) {
                try await TLSProbe.handshake(port: simulator.ports.feedback, maximum: .tlsv11, certificate: shop)
            }
        }
    }
}
