import Foundation
import LocalTime

/// An instant written as ISO-8601 UTC ("2026-03-08T07:00:00Z"): the tests state every expected instant
/// this way, worked out by hand from the zone's rules, never computed by the code under test.
func utc(_ text: String) -> Date {
    do {
        return try Date(text, strategy: .iso8601)
    } catch {
        fatalError("not an ISO-8601 instant: \(text)")
    }
}

/// "HH:MM" as a `WallTime`, for the tests' literals.
func at(_ text: String) -> WallTime {
    guard let time = WallTime(parsing: text) else { fatalError("not a wall time: \(text)") }
    return time
}

func zone(_ name: String) -> TimeZone {
    guard let zone = TimeZones.named(name) else { fatalError("unknown zone: \(name)") }
    return zone
}

func quiet(_ from: String, _ to: String) -> QuietHours {
    guard let hours = QuietHours(from: at(from), to: at(to)) else { fatalError("refused: \(from)–\(to)") }
    return hours
}
