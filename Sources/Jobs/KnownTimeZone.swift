import Foundation

extension JobDecoder {
    /// Whether `name` is an IANA time zone name (`Europe/Paris`, `America/Argentina/Buenos_Aires`,
    /// `Etc/UTC`, `UTC`): what a job's or a registration's `time_zone` must be (`invalid-time-zone`).
    /// Case matters, as in the tz database.
    ///
    /// The one place the check is made. For now Foundation's `TimeZone(identifier:)` (ICU's list of
    /// zones), which also takes offsets spelled as names (`GMT+5`, `UTC+01:00`): those are refused here,
    /// as a fixed offset follows no daylight saving time and so is no recipient's zone (the tz database's
    /// own `Etc/GMT+5`, `GMT+0` and `GMT-0` are names, and pass). To be replaced by a cached lookup in a
    /// module of its own; callers keep calling this.
    public static func knownTimeZone(_ name: String) -> Bool {
        guard let first = name.utf8.first, first != UInt8(ascii: "+"), first != UInt8(ascii: "-") else { return false }
        // An offset spelled as a name: `GMT` or `UTC` then a sign.
        if name.hasPrefix("GMT") || name.hasPrefix("UTC"), let sign = name.utf8.dropFirst(3).first,
            sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-"), name != "GMT+0", name != "GMT-0"
        {
            return false
        }
        return TimeZone(identifier: name) != nil
    }
}
