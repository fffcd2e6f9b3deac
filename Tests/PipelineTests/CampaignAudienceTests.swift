import APNsProtocol
import Foundation
import Pipeline
import Testing
import Tools

/// A campaign's audience takes every token size a job may have (Apple: "APNs device tokens are of
/// variable length. Do not hard-code their size"); lines that are no token are counted and named.
@Suite struct CampaignAudienceTests {
    @Test func tokensOfEverySizeInTheRange() throws {
        let long = String(repeating: "9E", count: 40)
        let standard = String(repeating: "1f", count: 32)
        let lines = [standard, long, "0123456789abcdef", String(repeating: "a", count: 65), "abc", String(repeating: "ab", count: 101)]
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("audience-\(UUID().uuidString).txt")
        try lines.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let audience = try Campaign.readAudience(path: file.path)
        #expect(audience.recipients.map(\.token.hex) == [standard, long.lowercased(), "0123456789abcdef"])
        #expect(audience.recipients.map(\.token.byteCount) == [32, 40, 8])
        #expect(audience.badLines == [4, 5, 6] && audience.badLineCount == 3)
        #expect(Campaign.jobID(campaign: "c", token: audience.recipients[1].token) == "c:" + long.lowercased())
    }
}
