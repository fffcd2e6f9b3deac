import Foundation

/// The arithmetic `QuietHours` and `LocalDelivery` share, on a zone's offsets rather than a `Calendar`:
/// `secondsFromGMT(for:)` costs ~70 ns and `nextDaylightSavingTimeTransition(after:)` ~350 ns on Linux,
/// where `Calendar.nextDate(after:matching:…)` costs ~15 µs — and offsets plus the instants they change at
/// say everything a wall clock does. Times are seconds since the reference date (2001-01-01 00:00 UTC, a
/// midnight, so whole days line up as they do since 1970), as `Double` like `Date` itself.
enum LocalClock {
    static let secondsPerDay = 86_400.0

    /// The minute of the day `zone`'s wall clock reads at `instant` (0…1439), given the zone's offset
    /// there; nil for an instant that is not finite.
    static func minuteOfDay(at instant: Date, offset: Int) -> Int? {
        let local = instant.timeIntervalSinceReferenceDate + Double(offset)
        guard local.isFinite else { return nil }
        var second = local.truncatingRemainder(dividingBy: secondsPerDay)
        if second < 0 { second += secondsPerDay }
        // `second` is in [0, 86400] (86400 only through rounding of a tiny negative remainder).
        return min(Int(second / 60), 1439)
    }

    /// The first instant at or after `start` at which `zone`'s wall clock reads `time` (seconds :00), or,
    /// when a transition skips that reading, the instant the skip ends (the clock then reads past `time`).
    /// `offset` is the zone's offset at `start`.
    ///
    /// Walks the zone's periods of constant offset from `start`: in a period with offset o the clock reads
    /// instant + o, so the first candidate is the next local midnight-plus-`time` minus o; it stands when it
    /// comes before the period ends. When it does not, the clock jumped at the period's end: forward over
    /// the candidate's reading (a gap: the answer is the jump), or anywhere else (go on in the next period
    /// from its start). A reading that occurs twice (an overlap) is found in the earlier period first.
    static func first(_ time: WallTime, atOrAfter start: Date, offset: Int, in zone: TimeZone) -> Date {
        var from = start.timeIntervalSinceReferenceDate
        guard from.isFinite else { return start }
        var offset = Double(offset)
        let target = Double(time.minuteOfDay * 60)
        // Each round passes one transition; a day holds at most a few, so 16 rounds never run out in
        // real data (and if they did, the last candidate is still a reading of `time` by its period).
        for _ in 0..<16 {
            let local = from + offset
            var readingAt = (local / secondsPerDay).rounded(.down) * secondsPerDay + target
            if readingAt < local { readingAt += secondsPerDay }
            let candidate = readingAt - offset
            guard let transition = zone.nextDaylightSavingTimeTransition(after: Date(timeIntervalSinceReferenceDate: from)),
                transition.timeIntervalSinceReferenceDate <= candidate
            else { return Date(timeIntervalSinceReferenceDate: candidate) }
            let end = transition.timeIntervalSinceReferenceDate
            let next = Double(zone.secondsFromGMT(for: transition))
            // At `end` the clock goes from end + offset to end + next. `readingAt` ≥ end + offset here.
            if readingAt < end + next { return transition }
            from = end
            offset = next
        }
        let local = from + offset
        var readingAt = (local / secondsPerDay).rounded(.down) * secondsPerDay + target
        if readingAt < local { readingAt += secondsPerDay }
        return Date(timeIntervalSinceReferenceDate: readingAt - offset)
    }
}
