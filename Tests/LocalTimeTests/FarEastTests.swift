import Foundation
import LocalTime
import Testing

/// Zones ahead of UTC+12, where the local date is a day ahead of UTC's for most of the day:
/// Pacific/Kiritimati +14 all year (no DST since 1995); Pacific/Auckland +13 in its summer (NZDT, until
/// 2026-04-05 03:00 NZDT = 2026-04-04T14:00Z, when clocks go back to 02:00 NZST +12; forward again on
/// 2026-09-27 02:00 NZST = 2026-09-26T14:00Z to 03:00 NZDT); Pacific/Chatham +13:45 in the same summer,
/// +12:45 in winter.
@Suite struct FarEastTests {
    let kiritimati = zone("Pacific/Kiritimati")
    let auckland = zone("Pacific/Auckland")
    let chatham = zone("Pacific/Chatham")
    let night = quiet("22:00", "08:00")

    @Test func kiritimatiQuietHours() {
        // 2026-06-15 22:00 +14 = 2026-06-15T08:00Z; 2026-06-16 08:00 +14 = 2026-06-15T18:00Z: the whole
        // local night lies inside one UTC date.
        #expect(!night.contains(utc("2026-06-15T07:59:59Z"), in: kiritimati))
        #expect(night.contains(utc("2026-06-15T08:00:00Z"), in: kiritimati))
        #expect(night.contains(utc("2026-06-15T10:00:00Z"), in: kiritimati))  // 00:00 on 06-16, UTC still 06-15
        #expect(night.contains(utc("2026-06-15T17:59:59Z"), in: kiritimati))
        #expect(!night.contains(utc("2026-06-15T18:00:00Z"), in: kiritimati))
        #expect(night.end(containing: utc("2026-06-15T12:00:00Z"), in: kiritimati) == utc("2026-06-15T18:00:00Z"))
        #expect(night.end(containing: utc("2026-06-15T08:00:00Z"), in: kiritimati) == utc("2026-06-15T18:00:00Z"))
    }

    @Test func kiritimatiDue() {
        // 2026-06-15T00:00Z is 14:00 on 06-15: 09:00 is past, the next is 09:00 on 06-16 = 06-15T19:00Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-06-15T00:00:00Z"), in: kiritimati) == utc("2026-06-15T19:00:00Z"))
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-06-15T18:59:59Z"), in: kiritimati) == utc("2026-06-15T19:00:00Z"))
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-06-15T19:00:00Z"), in: kiritimati) == utc("2026-06-15T19:00:00Z"))
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-06-15T19:00:01Z"), in: kiritimati) == utc("2026-06-16T19:00:00Z"))
        // 23:30 local is 09:30Z of the same UTC date.
        #expect(LocalDelivery.due(at("23:30"), after: utc("2026-06-15T00:00:00Z"), in: kiritimati) == utc("2026-06-15T09:30:00Z"))
        #expect(LocalDelivery.utcOffset(of: kiritimati, at: utc("2026-06-15T00:00:00Z")) == 14 * 3600)
    }

    /// Kiritimati moved from −10 to +14 by skipping 1994-12-31 entirely: at 1994-12-31T10:00Z its clock
    /// went from 1994-12-31 00:00 −10 to 1995-01-01 00:00 +14. Any time of that day is "in the gap".
    @Test func kiritimatiSkippedADay() {
        let before = utc("1994-12-30T23:00:00Z")  // 13:00 on 12-30, −10
        #expect(LocalDelivery.due(at("09:00"), after: before, in: kiritimati) == utc("1994-12-31T10:00:00Z"))
        // 12:00 on 12-31 is skipped too: due at the skip's end as well, not at 12:00 on 01-01 (22:00Z),
        // the next time the clock shows 12:00 — a skipped time comes as soon as the clock is past it.
        #expect(LocalDelivery.due(at("12:00"), after: before, in: kiritimati) == utc("1994-12-31T10:00:00Z"))
        // 23:59 on 12-30 still came, before the skip.
        #expect(LocalDelivery.due(at("23:59"), after: before, in: kiritimati) == utc("1994-12-31T09:59:00Z"))
        // From the skip's end on, the clock runs on +14: 12:00 on 01-01 = 1994-12-31T22:00Z.
        #expect(LocalDelivery.due(at("12:00"), after: utc("1994-12-31T10:00:00Z"), in: kiritimati) == utc("1994-12-31T22:00:00Z"))
        #expect(LocalDelivery.utcOffset(of: kiritimati, at: utc("1994-12-31T09:59:59Z")) == -10 * 3600)
    }

    @Test func aucklandSummer() {
        // 2026-01-15 22:00 NZDT = 09:00Z; 2026-01-16 08:00 NZDT = 2026-01-15T19:00Z.
        #expect(night.contains(utc("2026-01-15T09:00:00Z"), in: auckland))
        #expect(!night.contains(utc("2026-01-15T08:59:59Z"), in: auckland))
        #expect(night.end(containing: utc("2026-01-15T09:00:00Z"), in: auckland) == utc("2026-01-15T19:00:00Z"))
        // 2026-01-15T00:00Z is 13:00 NZDT: 09:00 tomorrow, 2026-01-16 09:00 NZDT = 2026-01-15T20:00Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-01-15T00:00:00Z"), in: auckland) == utc("2026-01-15T20:00:00Z"))
        #expect(LocalDelivery.utcOffset(of: auckland, at: utc("2026-01-15T00:00:00Z")) == 13 * 3600)
        #expect(LocalDelivery.utcOffset(of: auckland, at: utc("2026-07-15T00:00:00Z")) == 12 * 3600)
    }

    /// The night of 2026-04-04 → 05: 22:00 NZDT = 09:00Z, 08:00 NZST = 20:00Z (eleven hours).
    @Test func aucklandNightTheClocksGoBack() {
        #expect(night.contains(utc("2026-04-04T09:00:00Z"), in: auckland))
        #expect(night.contains(utc("2026-04-04T13:30:00Z"), in: auckland))  // 02:30 NZDT
        #expect(night.contains(utc("2026-04-04T14:30:00Z"), in: auckland))  // 02:30 NZST
        #expect(night.contains(utc("2026-04-04T19:30:00Z"), in: auckland))  // 07:30 NZST
        #expect(!night.contains(utc("2026-04-04T20:00:00Z"), in: auckland))  // 08:00 NZST
        #expect(night.end(containing: utc("2026-04-04T09:00:00Z"), in: auckland) == utc("2026-04-04T20:00:00Z"))
        // 02:30 occurs twice (13:30Z NZDT, 14:30Z NZST): the first.
        #expect(LocalDelivery.due(at("02:30"), after: utc("2026-04-04T12:00:00Z"), in: auckland) == utc("2026-04-04T13:30:00Z"))
    }

    /// 2026-09-27: 02:00 NZST (14:00Z) becomes 03:00 NZDT, so 02:30 that day is due at the jump.
    @Test func aucklandGap() {
        #expect(LocalDelivery.due(at("02:30"), after: utc("2026-09-26T12:00:00Z"), in: auckland) == utc("2026-09-26T14:00:00Z"))
        #expect(LocalDelivery.due(at("03:30"), after: utc("2026-09-26T12:00:00Z"), in: auckland) == utc("2026-09-26T14:30:00Z"))
        // The window 22:00–08:00 that night: 22:00 NZST on 09-26 = 10:00Z, 08:00 NZDT on 09-27 = 19:00Z.
        #expect(night.end(containing: utc("2026-09-26T10:00:00Z"), in: auckland) == utc("2026-09-26T19:00:00Z"))
    }

    @Test func chathamAllYear() {
        // January, +13:45: 22:00 on 01-15 = 08:15Z; 08:00 on 01-16 = 2026-01-15T18:15Z.
        #expect(!night.contains(utc("2026-01-15T08:14:59Z"), in: chatham))
        #expect(night.contains(utc("2026-01-15T08:15:00Z"), in: chatham))
        #expect(night.end(containing: utc("2026-01-15T10:00:00Z"), in: chatham) == utc("2026-01-15T18:15:00Z"))
        // 2026-01-15T00:00Z is 13:45: 09:00 on 01-16 = 2026-01-15T19:15Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-01-15T00:00:00Z"), in: chatham) == utc("2026-01-15T19:15:00Z"))
        // July, +12:45: 2026-07-01T00:00Z is 12:45; 09:00 on 07-02 = 2026-07-01T20:15Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-07-01T00:00:00Z"), in: chatham) == utc("2026-07-01T20:15:00Z"))
        #expect(LocalDelivery.utcOffset(of: chatham, at: utc("2026-01-15T00:00:00Z")) == 13 * 3600 + 45 * 60)
        #expect(LocalDelivery.utcOffset(of: chatham, at: utc("2026-07-01T00:00:00Z")) == 12 * 3600 + 45 * 60)
    }
}
