import Foundation
import Testing

@testable import LocalTime

@Suite struct TimeZonesTests {
    @Test(arguments: [
        "Europe/Paris", "America/New_York", "UTC", "Pacific/Kiritimati", "Pacific/Chatham", "EST5EDT", "Etc/GMT+5", "Etc/GMT-14",
        "Asia/Kolkata", "Asia/Calcutta", "America/Argentina/Buenos_Aires", "US/Eastern", "GMT", "GMT0", "GMT+0", "Etc/UTC", "NZ-CHAT",
        "Europe/Kyiv",
    ])
    func knowsIANANames(_ name: String) {
        #expect(TimeZones.named(name) != nil)
    }

    /// Names Foundation accepts on Linux that are not IANA zones: offsets, ICU's Java-style three-letter
    /// names, names tzdata retired — and names nobody knows.
    @Test(arguments: [
        "Mars/Olympus", "", "GMT+5", "GMT-3", "UTC+1", "UTC-3", "GMT+0500", "GMT+05:00", "+05:00", "-0300", "Z", "PST", "IST", "JST",
        "ACT", "CST", "SystemV/EST5", "US/Pacific-New", "Canada/East-Saskatchewan", "utc", "america/new_york", " UTC", "UTC ",
        "America/New_York\n", "America//New_York", "/America/New_York", "Etc/GMT+15", "Etc/Unknown", "Europe/Paris/",
    ])
    func refusesOtherNames(_ name: String) {
        #expect(TimeZones.named(name) == nil)
    }

    @Test func refusesNamesOver64Bytes() {
        // 65 bytes of a shape ICU would otherwise look at.
        let long = "America/" + String(repeating: "A", count: 57)
        #expect(long.utf8.count == 65)
        #expect(TimeZones.named(long) == nil)
        #expect(TimeZones.named("America/Argentina/ComodRivadavia") != nil)  // tzdata's longest, 32 bytes
    }

    @Test func zonesAreFoundationsOwn() throws {
        let paris = try #require(TimeZones.named("Europe/Paris"))
        #expect(paris == TimeZone(identifier: "Europe/Paris"))
        #expect(paris.identifier == "Europe/Paris")
        #expect(TimeZones.named("Europe/Paris") == paris)  // from the cache now
        #expect(TimeZones.named("Europe/Paris") == TimeZones.named("Europe/Paris"))
        // Foundation's own naming: UTC is "GMT".
        #expect(TimeZones.named("UTC")?.identifier == "GMT")
        #expect(TimeZones.named("UTC")?.secondsFromGMT(for: utc("2026-07-01T00:00:00Z")) == 0)
    }

    @Test func theCacheIsBounded() throws {
        let cache = ZoneCache(capacity: 2)
        let paris = try #require(cache.zone(named: "Europe/Paris"))
        _ = cache.zone(named: "America/New_York")
        #expect(cache.count == 2)
        // Past capacity: still answered, not kept.
        #expect(cache.zone(named: "Asia/Tokyo")?.identifier == "Asia/Tokyo")
        #expect(cache.count == 2)
        #expect(cache.zone(named: "Europe/Paris") == paris)
        // Unknown names are never kept.
        let other = ZoneCache(capacity: 10)
        #expect(other.zone(named: "Mars/Olympus") == nil)
        #expect(other.zone(named: "GMT+5") == nil)
        #expect(other.count == 0)
        #expect(TimeZones.capacity == 1024)
    }

    @Test func concurrentLookups() async {
        let names = [
            "Europe/Paris", "America/New_York", "UTC", "Pacific/Kiritimati", "Mars/Olympus", "GMT+5", "Asia/Kolkata", "Pacific/Chatham",
        ]
        let expected = names.map { TimeZone(identifier: $0)?.identifier }
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for task in 0..<16 {
                group.addTask {
                    var mismatches = 0
                    for round in 0..<2_000 {
                        let index = (task + round) % names.count
                        let identifier = TimeZones.named(names[index])?.identifier
                        let wanted = names[index] == "Mars/Olympus" || names[index] == "GMT+5" ? nil : expected[index]
                        if identifier != wanted { mismatches += 1 }
                    }
                    return mismatches
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0)
        #expect(TimeZones.cache.count <= TimeZones.capacity)
    }

    /// Every zone and link name in the system's tzdata (Debian's `tzdata`, when installed) is accepted,
    /// and the area-less ones are exactly `TimeZones.arealess`: the check that this list and Foundation's
    /// ICU data agree with tzdata. (Foundation does not read these files; the test only uses them as the
    /// independent list of IANA names.)
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/share/zoneinfo/tzdata.zi")))
    func everyTzdataNameIsAccepted() throws {
        let text = try String(contentsOfFile: "/usr/share/zoneinfo/tzdata.zi", encoding: .utf8)
        var names: [String] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.first == "Z", fields.count > 1 { names.append(String(fields[1])) }
            if fields.first == "L", fields.count > 2 { names.append(String(fields[2])) }
        }
        #expect(names.count > 500)
        let refused = names.filter { TimeZones.named($0) == nil }
        #expect(refused.isEmpty, "refused: \(refused)")
        #expect(Set(names.filter { !$0.contains("/") }) == TimeZones.arealess)
    }
}
