/// Helpers for the 32-bit notification identifier (item 3; the enhanced format's identifier).
///
/// A connection numbers its notifications 1, 2, 3 … and the counter wraps after 2³²−1, so
/// "sent before" must be judged in sequence order (serial-number arithmetic, as RFC 1982 does for
/// DNS serials), not by comparing integers: 0xFFFF_FFFF precedes 0x0000_0002 after a wrap.
/// The comparison is meaningful while the two identifiers are less than 2³¹ apart, which a bounded
/// replay buffer guarantees.
public enum NotificationIdentifier {
    /// True when `a` was issued before `b`.
    @inlinable
    public static func precedes(_ a: UInt32, _ b: UInt32) -> Bool {
        Int32(bitPattern: b &- a) > 0
    }

    /// True when `a` is `b` or was issued before it.
    @inlinable
    public static func precedesOrEquals(_ a: UInt32, _ b: UInt32) -> Bool {
        a == b || precedes(a, b)
    }

    /// How many identifiers lie from `a` up to `b` (negative when `b` precedes `a`).
    @inlinable
    public static func distance(from a: UInt32, to b: UInt32) -> Int {
        Int(Int32(bitPattern: b &- a))
    }
}
