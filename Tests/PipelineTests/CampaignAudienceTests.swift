import APNsProtocol
import Foundation
import Jobs
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

    /// `user` and `time_zone` columns go into each job (over the template's), and the decoder takes them.
    @Test func userAndTimeZoneColumnsGoIntoEachJob() throws {
        let a = String(repeating: "a1", count: 32)
        let b = String(repeating: "b2", count: 32)
        let csv = "token,language,user,time_zone\n\(a),fr,alice,Asia/Tokyo\n\(b),,,\n"
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("audience-\(UUID().uuidString).csv")
        try csv.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let audience = try Campaign.readAudience(path: file.path)
        #expect(audience.recipients.map(\.user) == ["alice", nil])
        #expect(audience.recipients.map(\.timeZone) == ["Asia/Tokyo", nil])
        let template = try JSONParser.parse(#"{"app":"com.example.shop","time_zone":"Europe/Paris","payload":{"aps":{"alert":"x"}}}"#)
        let first = try JobDecoder().decode(
            Campaign.job(template: template, campaign: "c", recipient: audience.recipients[0]), now: 1_800_000_000)
        #expect(first.user == "alice" && first.timeZone == "Asia/Tokyo")
        let second = try JobDecoder().decode(
            Campaign.job(template: template, campaign: "c", recipient: audience.recipients[1]), now: 1_800_000_000)
        #expect(second.user == nil && second.timeZone == "Europe/Paris", "the template's zone when the row has none")
    }
}
