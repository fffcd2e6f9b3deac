import APNsTransport
import ArgumentParser
import Foundation

/// `apns-pipeline provider-token`: prints a provider authentication token (ES256 JWT) signed with a
/// `.p8` key, for `nghttp`/`h2load`/`curl` against the HTTP/2 simulator (ops/bench http2 uses it).
struct ProviderTokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "provider-token",
        abstract: "Print a provider token (ES256 JWT: kid, iss, iat) signed with a .p8 key.",
        discussion: "The key itself is never printed. Example: authorization: bearer $(apns-pipeline provider-token ...)"
    )

    @Option(help: "The signing key: a .p8 (PKCS#8 PEM) file.") var key: String = ".run/certs/AuthKey_TESTKEY123.p8"
    @Option(help: "Key id (the kid header).") var keyId: String = "TESTKEY123"
    @Option(help: "Team id (the iss claim).") var teamId: String = "TESTTEAM01"
    @Option(help: "iat, UNIX seconds (default: now).") var issuedAt: Int64?

    func run() throws {
        do {
            let signer = try ProviderTokenSigner(keyFile: key, keyID: keyId, teamID: teamId)
            print(try signer.token(issuedAt: issuedAt ?? Int64(Date().timeIntervalSince1970)))
        } catch {
            throw ValidationError("\(error)")
        }
    }
}
