import Foundation
import ProcessSupport

/// The certificates `ops/certs` makes (test CA, simulator, two demo apps, a rogue CA); made on first use
/// when a test runs outside `ops/test`, which exports `APNS_CERTS_DIR`.
public enum TestCertificates {
    public static let directory: String = {
        if let dir = ProcessInfo.processInfo.environment["APNS_CERTS_DIR"] { return dir }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let dir = root.appendingPathComponent(".run/certs").path
        if !FileManager.default.fileExists(atPath: dir + "/ca.pem")
            || !FileManager.default.fileExists(atPath: dir + "/AuthKey_TESTKEY123.p8")
        {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: root.appendingPathComponent("ops/certs").path)
            // Synchronous (a lazy global's initialiser), and once per process at most: `ops/test` exports
            // APNS_CERTS_DIR with the certificates already made, so a CI run never waits here.
            try? startChild(p)
            p.waitUntilExit()
        }
        return dir
    }()

    public static func pem(_ name: String) -> String { "\(directory)/\(name).pem" }
    public static func key(_ name: String) -> String { "\(directory)/\(name).key" }

    /// The provider token signing key `ops/certs` makes (`.p8`, PKCS#8 PEM), its key id and the team id
    /// the tests pair it with.
    public static let tokenKeyID = "TESTKEY123"
    public static let tokenTeamID = "TESTTEAM01"
    public static var tokenKeyPath: String { "\(directory)/AuthKey_TESTKEY123.p8" }
    public static var tokenPublicKeyPath: String { "\(directory)/AuthKey_TESTKEY123.pub.pem" }
}
