/// A wall-clock time of day, "HH:MM" 24-hour (00:00…23:59).
///
/// Quiet hours and local-time delivery are stated by people in minutes of a clock on a wall, not in
/// instants: "not before 09:00", "quiet from 22:00". A `WallTime` is that reading alone, with no date and
/// no zone, so that one rule serves every recipient whatever their zone; `QuietHours` and `LocalDelivery`
/// turn it into instants on a zone's clock. Seconds are left out on purpose: no rule needs them, and a
/// minute is what the configuration and the producers' JSON can state.
public struct WallTime: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// 0…23.
    public let hour: Int
    /// 0…59.
    public let minute: Int

    /// nil unless `hour` is 0…23 and `minute` 0…59: "24:00" is not a time of day here (a window that
    /// runs to the end of the day ends at 00:00), so that every reading has exactly one spelling.
    public init?(hour: Int, minute: Int) {
        guard (0...23).contains(hour), (0...59).contains(minute) else { return nil }
        self.hour = hour
        self.minute = minute
    }

    /// Reads exactly "H:MM" or "HH:MM" (ASCII digits, 24-hour), nil for anything else — no spaces, no
    /// seconds, no "9:5", no "24:00". Strict because these strings come from producers and configuration:
    /// a time that is not quite right is refused where it is written rather than read as some other time.
    public init?(parsing text: some StringProtocol) {
        // The loop runs on contiguous bytes, not through `some StringProtocol`'s witnesses: unspecialized
        // (a caller in another module) that loop cost ~250 ns a call, this ~50 ns.
        let minuteOfDay =
            text.utf8.withContiguousStorageIfAvailable(WallTime.minuteOfDay(parsing:))
            ?? Array(text.utf8).withUnsafeBufferPointer(WallTime.minuteOfDay(parsing:))
        guard let minuteOfDay else { return nil }
        self.init(hour: minuteOfDay / 60, minute: minuteOfDay % 60)
    }

    /// "H:MM" or "HH:MM" as minutes since midnight, nil for anything else.
    private static func minuteOfDay(parsing bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var hour = 0
        var minute = 0
        var hourDigits = 0
        var minuteDigits = 0
        var sawColon = false
        for byte in bytes {
            if byte == UInt8(ascii: ":") {
                guard !sawColon, hourDigits > 0 else { return nil }
                sawColon = true
                continue
            }
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let digit = Int(byte - UInt8(ascii: "0"))
            if sawColon {
                minuteDigits += 1
                guard minuteDigits <= 2 else { return nil }
                minute = minute * 10 + digit
            } else {
                hourDigits += 1
                guard hourDigits <= 2 else { return nil }
                hour = hour * 10 + digit
            }
        }
        guard sawColon, minuteDigits == 2, hour <= 23, minute <= 59 else { return nil }
        return hour * 60 + minute
    }

    /// Minutes since midnight, 0…1439: what the window arithmetic compares, and the order of `<`.
    public var minuteOfDay: Int { hour * 60 + minute }

    /// "HH:MM" with two digits each ("09:00"): the form `init(parsing:)` reads back, for logs and
    /// configuration dumps.
    public var description: String {
        String(unsafeUninitializedCapacity: 5) { bytes in
            bytes[0] = UInt8(ascii: "0") + UInt8(hour / 10)
            bytes[1] = UInt8(ascii: "0") + UInt8(hour % 10)
            bytes[2] = UInt8(ascii: ":")
            bytes[3] = UInt8(ascii: "0") + UInt8(minute / 10)
            bytes[4] = UInt8(ascii: "0") + UInt8(minute % 10)
            return 5
        }
    }

    public static func < (lhs: WallTime, rhs: WallTime) -> Bool { lhs.minuteOfDay < rhs.minuteOfDay }
}
