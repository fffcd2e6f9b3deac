import Foundation
import LocalTime
import Redis
import TestSupport
import Testing
import Tools

@testable import Pipeline

/// The audience rules without servers: their settings as the pipeline file and `campaign publish` give
/// them, the control words they are stored as, the holdout hash, local-time instants across daylight
/// saving time changes.
@Suite struct AudienceRulesTests {
    let certs = TestCertificates.directory

    func load(_ appLines: String) throws -> PipelineConfiguration {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(UUID().uuidString).yaml").path
        let yaml = "apps:\n  - bundle_id: \(shop)\n    certificate: \(certs)/\(shop).pem\n    key: \(certs)/\(shop).key\n" + appLines
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return try PipelineConfiguration.load(file: path, environment: [:])
    }

    func problem(_ appLines: String) -> String {
        do {
            _ = try load(appLines)
            return "loaded"
        } catch let e as ConfigurationError {
            return "\(e.key): \(e.problem)"
        } catch {
            return "\(error)"
        }
    }

    @Test func capsAndQuietHoursLoadFromTheAppEntry() throws {
        let c = try load(
            """
                frequency_caps: [{max: 3, per: 24h}, {max: 1, per: 1h}]
                frequency_caps_exempt: [priority]
                quiet_hours: {from: "22:00", to: "08:00", default_time_zone: Europe/Paris, action: drop}
                default_time_zone: America/New_York

            """)
        let app = c.apps[0]
        #expect(app.frequencyCaps?.caps == [FrequencyCap(max: 3, perMs: 86_400_000)!, FrequencyCap(max: 1, perMs: 3_600_000)!])
        #expect(app.frequencyCaps?.exempt == [.priority])
        #expect(app.quietHours?.window == QuietHours(from: WallTime(hour: 22, minute: 0)!, to: WallTime(hour: 8, minute: 0)!))
        #expect(app.quietHours?.defaultTimeZone.identifier == "Europe/Paris")
        #expect(app.quietHours?.action == .drop)
        #expect(app.defaultTimeZone?.identifier == "America/New_York")
        let plain = try load("    frequency_caps: [{max: 2, per: 7d}]\n")
        #expect(plain.apps[0].frequencyCaps?.exempt == [.priority, .transactional], "both exempt unless the app says")
        #expect(plain.apps[0].quietHours == nil)
    }

    @Test func badSettingsNameTheKeyAndWhatWasExpected() {
        #expect(problem("    frequency_caps: [{max: 3, per: 24}]\n").hasPrefix("apps[0].frequency_caps[0].per: expected a window"))
        #expect(problem("    frequency_caps: [{per: 24h}]\n").hasPrefix("apps[0].frequency_caps[0].max: missing"))
        #expect(problem("    frequency_caps: [{max: 0, per: 24h}]\n").hasPrefix("apps[0].frequency_caps[0].max: expected a whole number"))
        #expect(problem("    frequency_caps: [{max: 1, per: 1h, window: 2}]\n").hasPrefix("apps[0].frequency_caps[0].window: unknown key"))
        #expect(problem("    frequency_caps_exempt: [priority]\n").hasPrefix("apps[0].frequency_caps_exempt: only with frequency_caps"))
        #expect(
            problem("    frequency_caps: [{max: 1, per: 1h}]\n    frequency_caps_exempt: [vip]\n").contains(
                "expected priority or transactional"))
        #expect(
            problem("    quiet_hours: {from: \"22:00\", to: \"8h\"}\n").hasPrefix("apps[0].quiet_hours.to: expected a local time HH:MM"))
        #expect(
            problem("    quiet_hours: {from: \"22:00\", to: \"22:00\"}\n").hasPrefix(
                "apps[0].quiet_hours.to: expected a time other than from"))
        #expect(
            problem("    quiet_hours: {from: \"22:00\", to: \"08:00\", default_time_zone: PST}\n").contains(
                "expected an IANA time zone name"))
        #expect(problem("    quiet_hours: {from: \"22:00\", to: \"08:00\", action: skip}\n").contains("expected hold or drop"))
        #expect(problem("    default_time_zone: Mars/Olympus\n").hasPrefix("apps[0].default_time_zone: expected an IANA time zone name"))
    }

    @Test func campaignOptionsParseOrSayWhatTheyExpect() throws {
        #expect(try Campaign.frequencyCap("1/24h") == FrequencyCap(max: 1, perMs: 86_400_000)!)
        #expect(try Campaign.holdoutBasisPoints("5%") == 500)
        #expect(try Campaign.holdoutBasisPoints("0.25%") == 25)
        #expect(try Campaign.holdoutBasisPoints("100") == 10_000)
        #expect(try Campaign.localTime("9:30") == "09:30")
        for bad in ["0%", "0.001%", "101%", "five", "-5%", "nan%"] {
            #expect(throws: CampaignError.self, "\(bad)") { try Campaign.holdoutBasisPoints(bad) }
        }
        for bad in ["1/24", "0/24h", "1/0h", "x/1h", "1/40d", "1/24h/2"] {
            #expect(throws: CampaignError.self, "\(bad)") { try Campaign.frequencyCap(bad) }
        }
        for bad in [nil, "24:00", "9", "09:5", "2026-12-01T09:00:00Z"] {
            #expect(throws: CampaignError.self, "\(bad ?? "nil")") { try Campaign.localTime(bad) }
        }
    }

    @Test func theControlWordsRoundTripAndOlderReadersKeepThem() {
        var state = CampaignControlState()
        state.cap = FrequencyCap(max: 1, perMs: 86_400_000)
        state.holdoutBasisPoints = 500
        state.localTime = "09:00"
        state.localTimeFromMs = 1_795_000_000_000
        #expect(state.stored == "cap=1/86400000,holdout=500,local=09:00@1795000000000")
        #expect(CampaignControlState(stored: state.stored) == state)
        #expect(state.hasAudienceRules)
        #expect(state.description(nowMs: 0) == "at 09:00 local time, capped at 1/24h, holding out 5%")
        #expect(!CampaignControlState(stored: "paused,pace=10").hasAudienceRules)
    }

    /// The holdout group is a stable ~share of recipients, different per campaign, the same for a user on
    /// every device.
    @Test func theHoldoutHashHoldsOutAboutItsShare() {
        let recipients = (0..<20_000).map { "t:" + String($0, radix: 16) }
        let a = recipients.filter { CampaignControlState.isHeldOut(campaign: "spring", recipient: $0, basisPoints: 500) }
        #expect(a.count > 850 && a.count < 1150, "5 % of 20 000: \(a.count)")
        let again = recipients.filter { CampaignControlState.isHeldOut(campaign: "spring", recipient: $0, basisPoints: 500) }
        #expect(a == again)
        let b = Set(recipients.filter { CampaignControlState.isHeldOut(campaign: "summer", recipient: $0, basisPoints: 500) })
        let both = a.filter(b.contains).count
        #expect(both < 150, "another campaign holds out other recipients: \(both) in both")
        #expect(!recipients.contains { CampaignControlState.isHeldOut(campaign: "spring", recipient: $0, basisPoints: 0) })
        #expect(recipients.allSatisfy { CampaignControlState.isHeldOut(campaign: "spring", recipient: $0, basisPoints: 10_000) })
    }

    static func ms(_ iso: String) -> Int64 {
        let f = ISO8601DateFormatter()
        return Int64(f.date(from: iso)!.timeIntervalSince1970 * 1000)
    }

    /// `--at 09:00 --local-time` in New York across both 2026 changes, and east of UTC+12, where the
    /// local date is a day ahead of UTC's.
    @Test func localTimeIsTheRecipientsWallClockAcrossDaylightSavingTime() {
        let nine = WallTime(hour: 9, minute: 0)!
        let newYork = TimeZones.named("America/New_York")!
        // The night before the spring change: EST (UTC−5).
        #expect(LocalTimeRule.dueMs(nine, fromMs: Self.ms("2026-03-07T12:00:00Z"), in: newYork) == Self.ms("2026-03-07T14:00:00Z"))
        // Published at 01:00 EST on the day of the change: 09:00 is EDT (UTC−4).
        #expect(LocalTimeRule.dueMs(nine, fromMs: Self.ms("2026-03-08T06:00:00Z"), in: newYork) == Self.ms("2026-03-08T13:00:00Z"))
        // Published at 01:30 EDT on the day clocks go back: 09:00 is EST (UTC−5).
        #expect(LocalTimeRule.dueMs(nine, fromMs: Self.ms("2026-11-01T05:30:00Z"), in: newYork) == Self.ms("2026-11-01T14:00:00Z"))
        // Past 09:00 already: the next day.
        #expect(LocalTimeRule.dueMs(nine, fromMs: Self.ms("2026-11-01T15:00:00Z"), in: newYork) == Self.ms("2026-11-02T14:00:00Z"))
        // Kiritimati, UTC+14: at 2026-11-29T00:00Z it is 14:00 on the 29th there; its next 09:00 is on the 30th.
        let kiritimati = TimeZones.named("Pacific/Kiritimati")!
        #expect(LocalTimeRule.dueMs(nine, fromMs: Self.ms("2026-11-29T00:00:00Z"), in: kiritimati) == Self.ms("2026-11-29T19:00:00Z"))
        // Auckland in its summer, UTC+13.
        let auckland = TimeZones.named("Pacific/Auckland")!
        #expect(LocalTimeRule.dueMs(nine, fromMs: Self.ms("2026-11-29T00:00:00Z"), in: auckland) == Self.ms("2026-11-29T20:00:00Z"))
    }

    /// `campaign status`'s instants for a local-time campaign: one per offset, +14:00 sharing −10:00's.
    @Test func localTimeDuesMergeOffsetsADayApart() {
        let dues = Campaign.localTimeDues("09:00", fromMs: Self.ms("2026-11-29T00:00:00Z"))
        let kiritimati = dues.first { $0.utcOffsets.contains("+14:00") }
        #expect(kiritimati?.dueMs == Self.ms("2026-11-29T19:00:00Z"))
        #expect(kiritimati?.utcOffsets.contains("-10:00") == true)
        #expect(dues.first { $0.utcOffsets.contains("+00:00") }?.dueMs == Self.ms("2026-11-29T09:00:00Z"))
        #expect(dues.first { $0.utcOffsets.contains("+05:45") }?.dueMs == Self.ms("2026-11-29T03:15:00Z"))
        #expect(Set(dues.map(\.dueMs)).count == dues.count)
    }

    /// Quiet hours in the recipient's zone, else the default; across New York's autumn change the
    /// hold ends at 08:00 EST.
    @Test func quietHoursHoldUntilTheyEndInTheRecipientsZone() throws {
        let c = try load("    quiet_hours: {from: \"22:00\", to: \"08:00\", default_time_zone: America/New_York}\n")
        #expect(QuietHoursRule(c, lane: .bulk) != nil)
        #expect(QuietHoursRule(c, lane: .priority) == nil, "the priority lane is exempt")
        let window = c.apps[0].quietHours!
        let newYork = TimeZones.named("America/New_York")!
        // 2026-11-01T06:30Z is 01:30 EST (after the change back): quiet until 08:00 EST = 13:00Z.
        let end = window.window.end(containing: Date(timeIntervalSince1970: Double(Self.ms("2026-11-01T06:30:00Z")) / 1000), in: newYork)
        #expect(end.map { Int64($0.timeIntervalSince1970 * 1000) } == Self.ms("2026-11-01T13:00:00Z"))
        // In Paris it is 07:30 (CET): quiet until 08:00 = 07:00Z.
        let paris = TimeZones.named("Europe/Paris")!
        let parisEnd = window.window.end(containing: Date(timeIntervalSince1970: Double(Self.ms("2026-11-01T06:30:00Z")) / 1000), in: paris)
        #expect(parisEnd.map { Int64($0.timeIntervalSince1970 * 1000) } == Self.ms("2026-11-01T07:00:00Z"))
    }
}
