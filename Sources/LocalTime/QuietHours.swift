import Foundation

/// A daily window in local time, e.g. 22:00–08:00 (wraps midnight when from > to). from == to is refused.
///
/// "Don't wake people up": the window is read on the recipient's wall clock, so one `QuietHours` value
/// serves every zone, and a night on which the clocks change is still quiet from 22:00 to 08:00 as the
/// recipient's clock shows them (9 or 11 hours long, not 10). `from == to` is refused because it is
/// ambiguous — an empty window or a whole day — and both are better said otherwise (no rule, or a hold).
public struct QuietHours: Sendable, Hashable {
    /// The first minute inside the window.
    public let from: WallTime
    /// The first minute after the window.
    public let to: WallTime

    /// nil when `from == to` (see the type's comment).
    public init?(from: WallTime, to: WallTime) {
        guard from != to else { return nil }
        self.from = from
        self.to = to
    }

    /// Whether `instant` is inside the window on `zone`'s wall clock (from inclusive, to exclusive).
    ///
    /// Only the clock's reading counts, not how it got there: in a repeated hour (clocks going back) both
    /// readings of 01:30 are inside a window that holds 01:30. One offset lookup and integer compares, so
    /// it can run per job.
    public func contains(_ instant: Date, in zone: TimeZone) -> Bool {
        contains(instant, offset: zone.secondsFromGMT(for: instant))
    }

    /// When the window that contains `instant` ends: the first instant after `instant` whose wall clock in
    /// `zone` reads `to` (or, when a DST gap skips `to`, the first instant after the gap). nil when `instant`
    /// is not inside.
    ///
    /// That is when a job held for quiet hours may go: computed once per hold, it becomes the job's release
    /// time. It is the next reading of `to`, even when the clock goes back out of the window and into it
    /// again before that (a window 01:30–05:00 on a night the clocks go from 02:00 back to 01:00 is left for
    /// 01:00–01:29 and entered again): the recipient's night is not over before `to`.
    public func end(containing instant: Date, in zone: TimeZone) -> Date? {
        let offset = zone.secondsFromGMT(for: instant)
        guard contains(instant, offset: offset) else { return nil }
        // Inside, the clock does not read `to` at `instant` (`to` is excluded): "at or after" is "after".
        return LocalClock.first(to, atOrAfter: instant, offset: offset, in: zone)
    }

    private func contains(_ instant: Date, offset: Int) -> Bool {
        guard let minute = LocalClock.minuteOfDay(at: instant, offset: offset) else { return false }
        let from = from.minuteOfDay
        let to = to.minuteOfDay
        return from < to ? (from <= minute && minute < to) : (minute >= from || minute < to)
    }
}
