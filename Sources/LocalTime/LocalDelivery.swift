import Foundation

/// "Deliver at 09:00 in each recipient's zone": the instants a campaign's jobs become due, computed per
/// job from the recipient's zone, so that a campaign published once reaches Auckland, Paris and Honolulu
/// each at its own morning.
public enum LocalDelivery {
    /// The first instant at or after `after` at which `zone`'s wall clock reads `time`. A time skipped by a
    /// DST gap (e.g. 02:30 on 2026-03-08 in America/New_York) → the instant the gap ends (03:00 EDT); a time
    /// that occurs twice (01:30 on 2026-11-01 in New York) → its first occurrence.
    ///
    /// Both choices keep a job from being lost or sent twice on the night the clocks change: a skipped time
    /// still comes (as soon as the clock is past it), and a repeated one comes once. "At or after" so that
    /// a job published exactly at its time is due now, not a day later.
    public static func due(_ time: WallTime, after: Date, in zone: TimeZone) -> Date {
        LocalClock.first(time, atOrAfter: after, offset: zone.secondsFromGMT(for: after), in: zone)
    }

    /// The zone's UTC offset in seconds at `instant` (for grouping "how many wait per UTC offset").
    ///
    /// Zones that read the same clock at `instant` (Europe/Paris and Europe/Berlin) become due together;
    /// grouping by offset rather than by name keeps that count as small as the clocks are many.
    public static func utcOffset(of zone: TimeZone, at instant: Date) -> Int {
        zone.secondsFromGMT(for: instant)
    }
}
