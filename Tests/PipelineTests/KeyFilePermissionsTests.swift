import Foundation
import Logging
import Pipeline
import TestSupport
import Testing

/// Issue 28 (6): a private key file readable by group or others is warned about at start, with the
/// file and the fix; a certificate (public) is not.
@Suite struct KeyFilePermissionsTests {
    @Test func looseKeyFileIsWarnedAbout() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let key = "\(dir)/shop.key"
        let certificate = "\(dir)/shop.pem"
        try FileManager.default.copyItem(atPath: TestCertificates.key(shop), toPath: key)
        try FileManager.default.copyItem(atPath: TestCertificates.pem(shop), toPath: certificate)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: certificate)
        let file = "\(dir)/pipeline.yaml"
        try """
        kafka:
          bootstrap_servers: "127.0.0.1:9092"
        apps:
          - bundle_id: \(shop)
            certificate: "\(certificate)"
            key: "\(key)"

        """.write(toFile: file, atomically: true, encoding: .utf8)
        let c = try PipelineConfiguration.load(file: file)

        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: key)
        let loose = KeyFilePermissions.loose(c)
        #expect(loose.count == 1 && loose.first?.key == "apps[0].key" && loose.first?.path == key && loose.first?.mode == "640")
        let captured = CapturedLog()
        KeyFilePermissions.warn(c, logger: Logger(label: "t") { _ in CapturingLogHandler(captured) })
        #expect(captured.lines.count == 1)
        #expect(captured.lines.first?.contains("fix=chmod 600 \(key)") == true, "\(captured.lines)")
        #expect(captured.lines.first?.contains("file=\(key)") == true)

        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key)
        #expect(KeyFilePermissions.loose(c).isEmpty)
    }
}
