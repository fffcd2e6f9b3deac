import APNsProtocol
import Foundation
import Pipeline
import TestSupport
import Testing

/// Issue 31 (1): "the auth each kind needs is checked at start (a pipeline file that cannot send what it
/// is configured for fails naming the app)". An app entry says what it sends in `push_types`; Live
/// Activity and location pushes need HTTP/2 with token authentication.
@Suite struct PushTypesConfigurationTests {
    let news = "com.example.news"
    let certs = TestCertificates.directory

    func write(_ apps: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        try ("apps:\n" + apps).write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    var tokenApp: String {
        "  - bundle_id: \(shop)\n    token:\n      key: \(certs)/AuthKey_TESTKEY123.p8\n      key_id: TESTKEY123\n      team_id: TESTTEAM01\n"
    }
    var certificateApp: String { "  - bundle_id: \(news)\n    certificate: \(certs)/\(news).pem\n    key: \(certs)/\(news).key\n" }
    var binaryApp: String {
        "  - bundle_id: \(news)\n    transport: binary\n    certificate: \(certs)/\(news).pem\n    key: \(certs)/\(news).key\n"
    }

    @Test func aTokenAppMayNameEveryPushType() throws {
        let c = try PipelineConfiguration.load(
            file: try write(tokenApp + "    push_types: [alert, liveactivity, location]\n"), environment: [:])
        #expect(c.apps[0].pushTypes == [.alert, .liveactivity, .location])
    }

    @Test func absentMeansNotSaidAndStartsAsBefore() throws {
        let c = try PipelineConfiguration.load(file: try write(certificateApp), environment: [:])
        #expect(c.apps[0].pushTypes == nil)
        let listed = try PipelineConfiguration.load(
            file: try write(certificateApp + "    push_types: [alert, background]\n"), environment: [:])
        #expect(listed.apps[0].pushTypes == [.alert, .background], "a certificate sends these")
    }

    @Test(arguments: [
        ("certificate", "liveactivity", "HTTP/2 with certificate authentication"),
        ("binary", "location", "the binary interface"),
    ])
    func anAppThatCannotSendWhatItNamesFailsAtStartNamingIt(kind: String, pushType: String, has: String) throws {
        let apps = (kind == "binary" ? binaryApp : certificateApp) + "    push_types: [alert, \(pushType)]\n"
        let path = try write(tokenApp + apps)
        do {
            _ = try PipelineConfiguration.load(file: path, environment: [:])
            Issue.record("\(kind) app with \(pushType) loaded")
        } catch let error as ConfigurationError {
            #expect(error.file == path && error.key == "apps[1].push_types", "\(error)")
            #expect(error.problem.contains("app \(news) uses \(has)"), "\(error)")
            #expect(error.problem.contains("\(pushType) pushes need HTTP/2 with token authentication"), "\(error)")
        }
    }

    @Test func anUnknownPushTypeIsRefusedWithTheNamesExpected() throws {
        let path = try write(tokenApp + "    push_types: [alert, livactivity]\n")
        do {
            _ = try PipelineConfiguration.load(file: path, environment: [:])
            Issue.record("a misspelt push type loaded")
        } catch let error as ConfigurationError {
            #expect(error.key == "apps[0].push_types", "\(error)")
            #expect(error.problem.contains("found \"livactivity\"") && error.problem.contains("liveactivity"), "\(error)")
        }
    }

    /// `apps[].max_rate` (issue 30): jobs per second, over every process; absent means no limit; 0 or a
    /// word is refused naming the key.
    @Test func maxRateIsReadAndChecked() throws {
        #expect(
            try PipelineConfiguration.load(file: try write(tokenApp + "    max_rate: 2000\n"), environment: [:]).apps[0].maxRate == 2000)
        #expect(try PipelineConfiguration.load(file: try write(tokenApp), environment: [:]).apps[0].maxRate == nil)
        for bad in ["0", "fast"] {
            do {
                _ = try PipelineConfiguration.load(file: try write(tokenApp + "    max_rate: \(bad)\n"), environment: [:])
                Issue.record("max_rate \(bad) loaded")
            } catch let error as ConfigurationError {
                #expect(error.key == "apps[0].max_rate", "\(error)")
            }
        }
    }
}
