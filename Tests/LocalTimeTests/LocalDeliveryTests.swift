import Foundation
import LocalTime
import Testing

@Suite struct LocalDeliveryTests {
    let newYork = zone("America/New_York")

    @Test func laterToday() {
        // 2026-01-15 07:00 EST → 09:00 EST = 14:00Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-01-15T12:00:00Z"), in: newYork) == utc("2026-01-15T14:00:00Z"))
        // Summer: 2026-07-15 07:00 EDT → 09:00 EDT = 13:00Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-07-15T11:00:00Z"), in: newYork) == utc("2026-07-15T13:00:00Z"))
    }

    @Test func alreadyPastMeansTomorrow() {
        // 10:00 EST → 09:00 EST on the 16th.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-01-15T15:00:00Z"), in: newYork) == utc("2026-01-16T14:00:00Z"))
        // 09:00:00.001 is past too.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-01-15T14:00:00.001Z"), in: newYork) == utc("2026-01-16T14:00:00Z"))
        // 23:30 EST on the 15th is 04:30Z on the 16th (the UTC date is a day ahead).
        #expect(LocalDelivery.due(at("00:15"), after: utc("2026-01-16T04:30:00Z"), in: newYork) == utc("2026-01-16T05:15:00Z"))
    }

    @Test func exactlyAtTheTimeIsNow() {
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-01-15T14:00:00Z"), in: newYork) == utc("2026-01-15T14:00:00Z"))
    }

    /// 10:00 EST on 2026-03-07 → 09:00 EDT on 03-08 = 13:00Z (23 hours later, not 24).
    @Test func acrossTheSpringChange() {
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-03-07T15:00:00Z"), in: newYork) == utc("2026-03-08T13:00:00Z"))
        // And across the autumn one: 10:00 EDT on 10-31 → 09:00 EST on 11-01 = 14:00Z (25 hours).
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-10-31T14:00:00Z"), in: newYork) == utc("2026-11-01T14:00:00Z"))
    }

    /// 02:30 on 2026-03-08 does not exist: due when the gap ends, 03:00 EDT = 07:00Z.
    @Test func timeInTheGap() {
        #expect(LocalDelivery.due(at("02:30"), after: utc("2026-03-08T05:00:00Z"), in: newYork) == utc("2026-03-08T07:00:00Z"))
        #expect(LocalDelivery.due(at("02:00"), after: utc("2026-03-08T05:00:00Z"), in: newYork) == utc("2026-03-08T07:00:00Z"))
        #expect(LocalDelivery.due(at("02:59"), after: utc("2026-03-08T06:59:59Z"), in: newYork) == utc("2026-03-08T07:00:00Z"))
        // 03:00 itself is the first reading after the gap: the same instant.
        #expect(LocalDelivery.due(at("03:00"), after: utc("2026-03-08T05:00:00Z"), in: newYork) == utc("2026-03-08T07:00:00Z"))
        // 01:59 EST still exists.
        #expect(LocalDelivery.due(at("01:59"), after: utc("2026-03-08T05:00:00Z"), in: newYork) == utc("2026-03-08T06:59:00Z"))
        // After the gap has passed, 02:30 the next day: 02:30 EDT on 03-09 = 06:30Z.
        #expect(LocalDelivery.due(at("02:30"), after: utc("2026-03-08T07:00:00Z"), in: newYork) == utc("2026-03-09T06:30:00Z"))
    }

    /// 01:30 on 2026-11-01 happens at 05:30Z (EDT) and 06:30Z (EST).
    @Test func repeatedTime() {
        // From before both: the first.
        #expect(LocalDelivery.due(at("01:30"), after: utc("2026-11-01T04:00:00Z"), in: newYork) == utc("2026-11-01T05:30:00Z"))
        // From between them (01:45 EDT): the clock reads 01:30 again at 06:30Z, the first reading after.
        #expect(LocalDelivery.due(at("01:30"), after: utc("2026-11-01T05:45:00Z"), in: newYork) == utc("2026-11-01T06:30:00Z"))
        // From after both (01:45 EST): tomorrow, 01:30 EST = 06:30Z.
        #expect(LocalDelivery.due(at("01:30"), after: utc("2026-11-01T06:45:00Z"), in: newYork) == utc("2026-11-02T06:30:00Z"))
        // 01:00 is read at 05:00Z and again at the jump, 06:00Z.
        #expect(LocalDelivery.due(at("01:00"), after: utc("2026-11-01T05:00:01Z"), in: newYork) == utc("2026-11-01T06:00:00Z"))
        // 02:00 EDT is never shown (02:00 EDT becomes 01:00 EST): 02:00 EST = 07:00Z.
        #expect(LocalDelivery.due(at("02:00"), after: utc("2026-11-01T05:00:00Z"), in: newYork) == utc("2026-11-01T07:00:00Z"))
    }

    /// Lord Howe Island changes its clocks by 30 minutes: on 2026-04-05 at 02:00 +11 (15:00Z) back to
    /// 01:30 +10:30, so 01:30 is read at 14:30Z and again at 15:00Z.
    @Test func halfHourChange() {
        let lordHowe = zone("Australia/Lord_Howe")
        #expect(LocalDelivery.due(at("01:30"), after: utc("2026-04-04T14:00:00Z"), in: lordHowe) == utc("2026-04-04T14:30:00Z"))
        #expect(LocalDelivery.due(at("01:30"), after: utc("2026-04-04T14:31:54Z"), in: lordHowe) == utc("2026-04-04T15:00:00Z"))
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-04-04T14:00:00Z"), in: lordHowe) == utc("2026-04-04T22:30:00Z"))
        #expect(LocalDelivery.utcOffset(of: lordHowe, at: utc("2026-04-04T14:59:59Z")) == 11 * 3600)
        #expect(LocalDelivery.utcOffset(of: lordHowe, at: utc("2026-04-04T15:00:00Z")) == 10 * 3600 + 1800)
    }

    /// Pacific/Pago_Pago is −11 all year: the local date is a day behind UTC's from 13:00Z on.
    @Test func farWest() {
        let pagoPago = zone("Pacific/Pago_Pago")
        // 01:00 on 06-15 → 09:00 on 06-15 = 20:00Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-06-15T12:00:00Z"), in: pagoPago) == utc("2026-06-15T20:00:00Z"))
        // 10:00 on 06-15 → 09:00 on 06-16 = 2026-06-16T20:00Z.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-06-15T21:00:00Z"), in: pagoPago) == utc("2026-06-16T20:00:00Z"))
        // 2026-06-16T05:00Z is 18:00 on 06-15: still 09:00 on 06-16.
        #expect(LocalDelivery.due(at("09:00"), after: utc("2026-06-16T05:00:00Z"), in: pagoPago) == utc("2026-06-16T20:00:00Z"))
        #expect(LocalDelivery.utcOffset(of: pagoPago, at: utc("2026-06-15T00:00:00Z")) == -11 * 3600)
        // Quiet 22:00–08:00: 22:00 on 06-15 = 06-16T09:00Z, 08:00 on 06-16 = 06-16T19:00Z.
        let night = quiet("22:00", "08:00")
        #expect(night.contains(utc("2026-06-16T09:00:00Z"), in: pagoPago))
        #expect(!night.contains(utc("2026-06-16T08:59:59Z"), in: pagoPago))
        #expect(night.end(containing: utc("2026-06-16T09:00:00Z"), in: pagoPago) == utc("2026-06-16T19:00:00Z"))
    }

    @Test func utcOffsets() {
        #expect(LocalDelivery.utcOffset(of: newYork, at: utc("2026-03-08T06:59:59Z")) == -5 * 3600)
        #expect(LocalDelivery.utcOffset(of: newYork, at: utc("2026-03-08T07:00:00Z")) == -4 * 3600)
        #expect(LocalDelivery.utcOffset(of: newYork, at: utc("2026-11-01T05:59:59Z")) == -4 * 3600)
        #expect(LocalDelivery.utcOffset(of: newYork, at: utc("2026-11-01T06:00:00Z")) == -5 * 3600)
        #expect(LocalDelivery.utcOffset(of: zone("Asia/Kolkata"), at: utc("2026-01-01T00:00:00Z")) == 5 * 3600 + 1800)
        #expect(LocalDelivery.utcOffset(of: zone("Asia/Kathmandu"), at: utc("2026-01-01T00:00:00Z")) == 5 * 3600 + 2700)
    }
}
