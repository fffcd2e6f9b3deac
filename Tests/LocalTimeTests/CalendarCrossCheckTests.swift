import Foundation
import LocalTime
import Testing

/// The offset arithmetic beside Foundation's `Calendar`, an independent reading of the same zone data,
/// over all of 2026 in zones with every kind of change: an hour (New York, Paris, Santiago, Auckland), 30
/// minutes (Lord Howe), 45-minute offsets (Chatham), none (Kiritimati, Pago Pago), and Casablanca's
/// Ramadan changes.
@Suite struct CalendarCrossCheckTests {
    static let zones = [
        "America/New_York", "Europe/Paris", "America/Santiago", "Pacific/Auckland", "Australia/Lord_Howe", "Pacific/Chatham",
        "Pacific/Kiritimati", "Pacific/Pago_Pago", "Africa/Casablanca",
    ]

    static func calendar(_ zone: TimeZone) -> Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        return calendar
    }

    /// Every 59 min 59.25 s through 2026 (so the instants drift across every minute and second).
    static let instants = stride(
        from: utc("2026-01-01T00:00:00Z").timeIntervalSince1970, to: utc("2027-01-01T00:00:00Z").timeIntervalSince1970, by: 3599.25
    )
    .map { Date(timeIntervalSince1970: $0) }

    @Test(arguments: zones)
    func containsReadsTheClockAsCalendarDoes(_ name: String) {
        let timeZone = zone(name)
        let calendar = Self.calendar(timeZone)
        let night = quiet("22:00", "08:00")
        let lunch = quiet("12:15", "13:45")
        var mismatches: [Date] = []
        for instant in Self.instants {
            let parts = calendar.dateComponents([.hour, .minute], from: instant)
            let minute = parts.hour! * 60 + parts.minute!
            if night.contains(instant, in: timeZone) != (minute >= 22 * 60 || minute < 8 * 60) { mismatches.append(instant) }
            if lunch.contains(instant, in: timeZone) != (minute >= 12 * 60 + 15 && minute < 13 * 60 + 45) { mismatches.append(instant) }
        }
        #expect(mismatches.isEmpty, "\(name): \(mismatches.prefix(5))")
    }

    /// `due` is at or after `after`, within a day and a bit, and the clock reads `time` there — or the
    /// instant is the end of a gap that skipped `time` (the clock read less just before, more at it).
    @Test(arguments: zones)
    func dueIsAReadingOfTheTime(_ name: String) {
        let timeZone = zone(name)
        let calendar = Self.calendar(timeZone)
        var failures: [String] = []
        for (index, after) in Self.instants.enumerated() where index % 3 == 0 {
            for time in [at("09:00"), at("00:00"), at("02:30"), at("23:45")] {
                let due = LocalDelivery.due(time, after: after, in: timeZone)
                let parts = calendar.dateComponents([.hour, .minute, .second, .nanosecond], from: due)
                let reads = parts.hour == time.hour && parts.minute == time.minute && parts.second == 0
                let offsetBefore = timeZone.secondsFromGMT(for: due.addingTimeInterval(-1))
                let gapEnd = timeZone.secondsFromGMT(for: due) > offsetBefore
                if due < after || due.timeIntervalSince(after) > 26 * 3600 || !(reads || gapEnd) {
                    failures.append("\(time) after \(after) → \(due)")
                }
            }
        }
        #expect(failures.isEmpty, "\(name): \(failures.prefix(5))")
    }
}
