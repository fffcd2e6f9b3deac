import Foundation
import LocalTime
import Testing

/// America/New_York in 2026: EST (−5) until 2026-03-08 02:00 EST = 07:00Z, when clocks go to 03:00 EDT
/// (−4); EDT until 2026-11-01 02:00 EDT = 06:00Z, when clocks go back to 01:00 EST.
@Suite struct QuietHoursTests {
    let newYork = zone("America/New_York")
    let night = quiet("22:00", "08:00")

    @Test func refusesAnEmptyWindow() {
        #expect(QuietHours(from: at("22:00"), to: at("22:00")) == nil)
        #expect(QuietHours(from: at("00:00"), to: at("00:00")) == nil)
        #expect(QuietHours(from: at("23:59"), to: at("00:00")) != nil)
    }

    /// An ordinary winter night: 22:00 EST = 03:00Z, 08:00 EST = 13:00Z.
    @Test func winterNight() {
        #expect(!night.contains(utc("2026-01-16T02:59:59Z"), in: newYork))  // 21:59:59
        #expect(night.contains(utc("2026-01-16T03:00:00Z"), in: newYork))  // 22:00
        #expect(night.contains(utc("2026-01-16T05:00:00Z"), in: newYork))  // 00:00
        #expect(night.contains(utc("2026-01-16T12:59:59Z"), in: newYork))  // 07:59:59
        #expect(!night.contains(utc("2026-01-16T13:00:00Z"), in: newYork))  // 08:00
        #expect(!night.contains(utc("2026-01-16T17:00:00Z"), in: newYork))  // 12:00
        #expect(night.end(containing: utc("2026-01-16T03:00:00Z"), in: newYork) == utc("2026-01-16T13:00:00Z"))
        #expect(night.end(containing: utc("2026-01-16T12:59:59Z"), in: newYork) == utc("2026-01-16T13:00:00Z"))
        #expect(night.end(containing: utc("2026-01-16T13:00:00Z"), in: newYork) == nil)
        #expect(night.end(containing: utc("2026-01-16T02:59:59Z"), in: newYork) == nil)
    }

    /// The night of 2026-03-07 → 08 begins at 22:00 EST (03:00Z) and ends at 08:00 EDT (12:00Z): nine hours.
    @Test func nightTheClocksGoForward() {
        #expect(!night.contains(utc("2026-03-08T02:59:59Z"), in: newYork))  // 21:59:59 EST
        #expect(night.contains(utc("2026-03-08T03:00:00Z"), in: newYork))  // 22:00 EST
        #expect(night.contains(utc("2026-03-08T06:59:59Z"), in: newYork))  // 01:59:59 EST
        #expect(night.contains(utc("2026-03-08T07:00:00Z"), in: newYork))  // 03:00 EDT
        #expect(night.contains(utc("2026-03-08T11:59:59Z"), in: newYork))  // 07:59:59 EDT
        #expect(!night.contains(utc("2026-03-08T12:00:00Z"), in: newYork))  // 08:00 EDT
        #expect(!night.contains(utc("2026-03-08T12:30:00Z"), in: newYork))  // 08:30 EDT (07:30 had it been EST)
        for inside in ["2026-03-08T03:00:00Z", "2026-03-08T06:59:59Z", "2026-03-08T07:00:00Z", "2026-03-08T11:59:59.500Z"] {
            #expect(night.end(containing: utc(inside), in: newYork) == utc("2026-03-08T12:00:00Z"), "from \(inside)")
        }
        // The night before is still EST at both ends: 08:00 EST = 13:00Z.
        #expect(night.end(containing: utc("2026-03-07T05:00:00Z"), in: newYork) == utc("2026-03-07T13:00:00Z"))
        // The night after is EDT at both ends: 22:00 EDT = 02:00Z, 08:00 EDT = 12:00Z.
        #expect(night.contains(utc("2026-03-09T02:00:00Z"), in: newYork))
        #expect(!night.contains(utc("2026-03-09T01:59:59Z"), in: newYork))
        #expect(night.end(containing: utc("2026-03-09T02:00:00Z"), in: newYork) == utc("2026-03-09T12:00:00Z"))
    }

    /// The night of 2026-10-31 → 11-01 begins at 22:00 EDT (02:00Z) and ends at 08:00 EST (13:00Z): eleven
    /// hours, 01:00–01:59 twice.
    @Test func nightTheClocksGoBack() {
        #expect(!night.contains(utc("2026-11-01T01:59:59Z"), in: newYork))  // 21:59:59 EDT
        #expect(night.contains(utc("2026-11-01T02:00:00Z"), in: newYork))  // 22:00 EDT
        #expect(night.contains(utc("2026-11-01T05:30:00Z"), in: newYork))  // 01:30 EDT
        #expect(night.contains(utc("2026-11-01T06:30:00Z"), in: newYork))  // 01:30 EST
        #expect(night.contains(utc("2026-11-01T12:00:00Z"), in: newYork))  // 07:00 EST (08:00 had it been EDT)
        #expect(night.contains(utc("2026-11-01T12:59:59Z"), in: newYork))  // 07:59:59 EST
        #expect(!night.contains(utc("2026-11-01T13:00:00Z"), in: newYork))  // 08:00 EST
        for inside in ["2026-11-01T02:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T12:00:00Z"] {
            #expect(night.end(containing: utc(inside), in: newYork) == utc("2026-11-01T13:00:00Z"), "from \(inside)")
        }
        // The next night is EST: 22:00 EST on 11-01 = 03:00Z on 11-02.
        #expect(!night.contains(utc("2026-11-02T02:30:00Z"), in: newYork))  // 21:30 EST
        #expect(night.end(containing: utc("2026-11-02T03:00:00Z"), in: newYork) == utc("2026-11-02T13:00:00Z"))
    }

    /// 01:00–02:30 on 2026-03-08: 02:30 never shows, so the window ends when the clock jumps past it, at
    /// 02:00 EST = 03:00 EDT = 07:00Z.
    @Test func windowWhoseEndFallsInTheGap() {
        let hours = quiet("01:00", "02:30")
        #expect(!hours.contains(utc("2026-03-08T05:59:59Z"), in: newYork))  // 00:59:59 EST
        #expect(hours.contains(utc("2026-03-08T06:00:00Z"), in: newYork))  // 01:00 EST
        #expect(hours.contains(utc("2026-03-08T06:59:59Z"), in: newYork))  // 01:59:59 EST
        #expect(!hours.contains(utc("2026-03-08T07:00:00Z"), in: newYork))  // 03:00 EDT
        #expect(hours.end(containing: utc("2026-03-08T06:00:00Z"), in: newYork) == utc("2026-03-08T07:00:00Z"))
        #expect(hours.end(containing: utc("2026-03-08T06:59:59Z"), in: newYork) == utc("2026-03-08T07:00:00Z"))
        // A day later 02:30 exists again: 02:30 EDT = 06:30Z.
        #expect(hours.end(containing: utc("2026-03-09T05:00:00Z"), in: newYork) == utc("2026-03-09T06:30:00Z"))
    }

    /// A window that ends inside the repeated hour ends at the first 01:30 after the instant: 01:30 EDT
    /// (05:30Z) from inside the first 01:00–01:29, 01:30 EST (06:30Z) from inside the second.
    @Test func windowWhoseEndIsRepeated() {
        let hours = quiet("00:00", "01:30")
        #expect(hours.contains(utc("2026-11-01T05:00:00Z"), in: newYork))  // 01:00 EDT
        #expect(!hours.contains(utc("2026-11-01T05:45:00Z"), in: newYork))  // 01:45 EDT
        #expect(hours.contains(utc("2026-11-01T06:10:00Z"), in: newYork))  // 01:10 EST
        #expect(hours.end(containing: utc("2026-11-01T05:00:00Z"), in: newYork) == utc("2026-11-01T05:30:00Z"))
        #expect(hours.end(containing: utc("2026-11-01T06:10:00Z"), in: newYork) == utc("2026-11-01T06:30:00Z"))
        #expect(hours.end(containing: utc("2026-11-01T05:45:00Z"), in: newYork) == nil)
    }

    /// 01:30–05:00 on the night the clocks go back: the clock leaves the window at 02:00 EDT (back to
    /// 01:00 EST) and re-enters it at 01:30 EST; the window ends at the reading of 05:00, 05:00 EST = 10:00Z.
    @Test func windowLeftAndEnteredAgainByTheClockGoingBack() {
        let hours = quiet("01:30", "05:00")
        #expect(hours.contains(utc("2026-11-01T05:40:00Z"), in: newYork))  // 01:40 EDT
        #expect(!hours.contains(utc("2026-11-01T06:10:00Z"), in: newYork))  // 01:10 EST
        #expect(hours.contains(utc("2026-11-01T06:40:00Z"), in: newYork))  // 01:40 EST
        #expect(hours.end(containing: utc("2026-11-01T05:40:00Z"), in: newYork) == utc("2026-11-01T10:00:00Z"))
    }

    /// 13:00–14:00 does not wrap: 13:00 EDT = 17:00Z in summer, 13:00 EST = 18:00Z in winter.
    @Test func windowThatDoesNotWrap() {
        let lunch = quiet("13:00", "14:00")
        #expect(!lunch.contains(utc("2026-03-09T16:59:59Z"), in: newYork))
        #expect(lunch.contains(utc("2026-03-09T17:00:00Z"), in: newYork))
        #expect(lunch.contains(utc("2026-03-09T17:59:59Z"), in: newYork))
        #expect(!lunch.contains(utc("2026-03-09T18:00:00Z"), in: newYork))
        #expect(!lunch.contains(utc("2026-03-09T04:00:00Z"), in: newYork))  // 00:00 EDT
        #expect(lunch.end(containing: utc("2026-03-09T17:30:00Z"), in: newYork) == utc("2026-03-09T18:00:00Z"))
        #expect(lunch.end(containing: utc("2026-03-09T16:00:00Z"), in: newYork) == nil)
        #expect(lunch.contains(utc("2026-01-15T18:30:00Z"), in: newYork))
        #expect(!lunch.contains(utc("2026-01-15T17:30:00Z"), in: newYork))
        #expect(lunch.end(containing: utc("2026-01-15T18:30:00Z"), in: newYork) == utc("2026-01-15T19:00:00Z"))
    }

    /// Only the minute counts: 22:00:00.000 is in, 21:59:59.999 is out, 07:59:59.999 is in.
    @Test func boundariesToTheMillisecond() {
        let utcZone = zone("UTC")
        #expect(night.contains(utc("2026-05-01T22:00:00.000Z"), in: utcZone))
        #expect(!night.contains(utc("2026-05-01T21:59:59.999Z"), in: utcZone))
        #expect(night.contains(utc("2026-05-02T07:59:59.999Z"), in: utcZone))
        #expect(!night.contains(utc("2026-05-02T08:00:00.000Z"), in: utcZone))
        #expect(night.end(containing: utc("2026-05-02T07:59:59.999Z"), in: utcZone) == utc("2026-05-02T08:00:00Z"))
    }

    /// Instants before 1970 and far ahead work the same way (negative seconds, day arithmetic).
    @Test func farFromNow() {
        let utcZone = zone("UTC")
        #expect(night.contains(utc("1969-12-31T23:00:00Z"), in: utcZone))
        #expect(night.end(containing: utc("1969-12-31T23:00:00Z"), in: utcZone) == utc("1970-01-01T08:00:00Z"))
        #expect(night.end(containing: utc("2199-12-31T23:00:00Z"), in: utcZone) == utc("2200-01-01T08:00:00Z"))
    }
}
