import LocalTime

extension JobDecoder {
    /// Whether `name` is an IANA time zone name (`Europe/Paris`, `America/Argentina/Buenos_Aires`,
    /// `Etc/UTC`, `UTC`): what a job's or a registration's `time_zone` must be (`invalid-time-zone`).
    /// Case matters, as in the tz database. ``TimeZones/named(_:)`` decides (and caches): Foundation also
    /// takes abbreviations and offsets spelled as names (`PST`, `GMT+5`), which follow no zone's daylight
    /// saving time and so are no recipient's zone.
    public static func knownTimeZone(_ name: String) -> Bool {
        TimeZones.named(name) != nil
    }
}
