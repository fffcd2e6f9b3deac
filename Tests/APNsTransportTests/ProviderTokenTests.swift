import APNsProtocol
import APNsTransport
import Crypto
import Foundation
import ProcessSupport
import TestSupport
import Testing

@Suite struct ProviderTokenTests {
    let now: Int64 = 1_700_000_000

    func signer() throws -> ProviderTokenSigner {
        try ProviderTokenSigner(
            keyFile: TestCertificates.tokenKeyPath, keyID: TestCertificates.tokenKeyID, teamID: TestCertificates.tokenTeamID)
    }

    func verifier(maxAge: Int64 = 3600) throws -> ProviderTokenVerifier {
        let key = try ProviderTokenVerifier.publicKey(fromFile: TestCertificates.tokenPublicKeyPath)
        return ProviderTokenVerifier(
            keys: [TestCertificates.tokenKeyID: .init(teamID: TestCertificates.tokenTeamID, publicKey: key)], maxAge: maxAge)
    }

    func parts(_ token: String) -> [String] { token.split(separator: ".", omittingEmptySubsequences: false).map(String.init) }

    @Test func roundTrip() throws {
        let token = try signer().token(issuedAt: now)
        let p = parts(token)
        #expect(p.count == 3)
        #expect(!token.contains("=") && !token.contains("+") && !token.contains("/"))
        #expect(Base64URL.decode(Array(p[0].utf8)).map { String(decoding: $0, as: UTF8.self) } == #"{"alg":"ES256","kid":"TESTKEY123"}"#)
        #expect(Base64URL.decode(Array(p[1].utf8)).map { String(decoding: $0, as: UTF8.self) } == #"{"iss":"TESTTEAM01","iat":1700000000}"#)
        #expect(Base64URL.decode(Array(p[2].utf8))?.count == 64)
        #expect(try verifier().verify(token, now: now + 10) == .valid(keyID: "TESTKEY123", teamID: "TESTTEAM01", issuedAt: now))
        // The private key file works for a verifier too (operators point both ends at the same .p8).
        let fromPrivate = try ProviderTokenVerifier.publicKey(fromFile: TestCertificates.tokenKeyPath)
        #expect(fromPrivate.rawRepresentation == (try signer().publicKey.rawRepresentation))
    }

    @Test func tamperedSignatureIsBad() throws {
        var p = parts(try signer().token(issuedAt: now))
        var sig = Base64URL.decode(Array(p[2].utf8))!
        sig[10] ^= 0x01
        p[2] = String(decoding: Base64URL.encode(sig), as: UTF8.self)
        #expect(try verifier().verify(p.joined(separator: "."), now: now) == .badSignature)
        // Claims changed after signing: the signature no longer covers them.
        var q = parts(try signer().token(issuedAt: now))
        q[1] = String(decoding: Base64URL.encode(Array(#"{"iss":"TESTTEAM01","iat":1700000999}"#.utf8)), as: UTF8.self)
        #expect(try verifier().verify(q.joined(separator: "."), now: now) == .badSignature)
    }

    @Test func wrongKeyIsBadSignature() throws {
        let other = P256.Signing.PrivateKey()
        let impostor = try ProviderTokenSigner(pem: other.pemRepresentation, keyID: "TESTKEY123", teamID: "TESTTEAM01")
        #expect(try verifier().verify(impostor.token(issuedAt: now), now: now) == .badSignature)
        // The right key, but a team that key does not belong to.
        let wrongTeam = try ProviderTokenSigner(keyFile: TestCertificates.tokenKeyPath, keyID: "TESTKEY123", teamID: "OTHERTEAM1")
        #expect(try verifier().verify(wrongTeam.token(issuedAt: now), now: now) == .badSignature)
    }

    @Test func unknownKidIsReported() throws {
        let s = try ProviderTokenSigner(keyFile: TestCertificates.tokenKeyPath, keyID: "NOSUCHKEY1", teamID: "TESTTEAM01")
        #expect(try verifier().verify(s.token(issuedAt: now), now: now) == .unknownKey("NOSUCHKEY1"))
    }

    @Test func expiredAfterMaxAge() throws {
        let token = try signer().token(issuedAt: now)
        #expect(try verifier().verify(token, now: now + 3600) == .valid(keyID: "TESTKEY123", teamID: "TESTTEAM01", issuedAt: now))
        #expect(try verifier().verify(token, now: now + 3601) == .expired(issuedAt: now))
        #expect(try verifier(maxAge: 5).verify(token, now: now + 6) == .expired(issuedAt: now))
    }

    @Test func malformedTokens() throws {
        let v = try verifier()
        for bad in ["", "a.b", "a.b.c.d", "!!.??.**", "e30.e30.AA", "eyJhbGciOiJIUzI1NiJ9.e30.AA"] {
            guard case .malformed = v.verify(bad, now: now) else {
                Issue.record("\(bad) not malformed")
                continue
            }
        }
    }

    @Test func base64URL() {
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 250) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
        #expect(String(decoding: Base64URL.encode(Array([0xFB, 0xFF].map(UInt8.init))), as: UTF8.self) == "-_8")
        #expect(Base64URL.decode(Array("A".utf8)) == nil)
        #expect(Base64URL.decode(Array("AA==".utf8)) == nil)
    }

    /// A token signed by `openssl` (not by our code) verifies: our JWS is the standard one.
    @Test func opensslMadeTokenVerifies() async throws {
        let header = String(decoding: Base64URL.encode(Array(#"{"alg":"ES256","kid":"TESTKEY123"}"#.utf8)), as: UTF8.self)
        let claims = String(decoding: Base64URL.encode(Array(#"{"iss":"TESTTEAM01","iat":1700000000}"#.utf8)), as: UTF8.self)
        let input = "\(header).\(claims)"
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("jwt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(input.utf8).write(to: dir.appendingPathComponent("input"))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = [
            "openssl", "dgst", "-sha256", "-sign", TestCertificates.tokenKeyPath, "-out", dir.appendingPathComponent("sig").path,
            dir.appendingPathComponent("input").path,
        ]
        try startChild(p)
        let status = await waitForExit(of: p)
        try #require(status == 0, "openssl dgst failed")
        // openssl writes an ASN.1 DER signature; a JWS carries r‖s.
        let der = try Data(contentsOf: dir.appendingPathComponent("sig"))
        let raw = try P256.Signing.ECDSASignature(derRepresentation: der).rawRepresentation
        let token = "\(input).\(String(decoding: Base64URL.encode(Array(raw)), as: UTF8.self))"
        #expect(try verifier().verify(token, now: now) == .valid(keyID: "TESTKEY123", teamID: "TESTTEAM01", issuedAt: now))
    }

    @Test func keysNeverShowInDescriptions() throws {
        let s = try signer()
        let pem = try String(contentsOfFile: TestCertificates.tokenKeyPath, encoding: .utf8)
        let body = pem.split(separator: "\n").dropFirst().first.map(String.init) ?? "-"
        #expect(!"\(s)".contains(body) && !String(reflecting: s).contains(body))
        #expect("\(s)" == "ProviderTokenSigner(keyID: TESTKEY123, teamID: TESTTEAM01)")
        let error = #expect(throws: ProviderTokenError.self) {
            try ProviderTokenSigner(pem: pem + "garbage\n" + pem, keyID: "k", teamID: "t")
        }
        #expect(!"\(String(describing: error))".contains(body))
    }
}
