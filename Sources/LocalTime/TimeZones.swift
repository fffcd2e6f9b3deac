import Foundation
import Synchronization

/// Zones by IANA name, for names that come from producers and devices (a recipient's "Europe/Paris").
///
/// What it adds to `TimeZone(identifier:)` is the check that a name is an IANA name, not whatever
/// Foundation happens to accept: on Linux `TimeZone(identifier:)` also takes offsets ("GMT+5", "UTC-3",
/// "GMT+05:00"), ICU's three-letter Java names ("PST", "IST", "JST" — "IST" being India's), and names
/// tzdata retired ("SystemV/EST5", "US/Pacific-New"). An offset is not a zone (it has no DST), and an
/// abbreviation means different zones to different people: both are refused here so that a producer
/// learns it at once instead of a recipient being woken at the wrong hour for half the year.
///
/// `TimeZone.knownTimeZoneIdentifiers` cannot be the list to check against: on Linux it holds 443 of ICU's
/// canonical names, without "UTC", "EST5EDT", "Etc/GMT+5" or "Asia/Kolkata" (it has "Asia/Calcutta").
/// Instead, a name with an area ("Europe/Paris") must be one ICU knows, and a name without one must be
/// one of tzdata's few area-less names (`arealess`). Foundation's zone data is ICU's own, built into
/// lib_FoundationICU, so this needs no tzdata files on the machine.
///
/// Looked-up zones are kept (thread-safe, at most `capacity` names). A first lookup costs ~7 µs (ICU
/// builds the zone); after that Foundation keeps the zone too, so the table here is not what makes
/// repeated lookups cheap (~80–100 ns either way) — it saves the name's validation, and it only ever
/// holds names that passed it, so Foundation is never asked to build and keep a zone for "GMT+0501".
public enum TimeZones {
    /// The zone for an IANA name ("Europe/Paris", "America/New_York", "UTC", "Pacific/Kiritimati", "EST5EDT"),
    /// nil when the name is unknown, empty, over 64 bytes (tzdata's longest is 32), or not an IANA name
    /// though Foundation accepts it ("GMT+5", "PST"; see the type's comment).
    ///
    /// Names are case-sensitive, as in tzdata ("utc" is nil). Foundation names some zones its own way:
    /// "UTC", "GMT+0" and "GMT-0" give a zone whose `identifier` is "GMT" — so group by what a zone
    /// does (`LocalDelivery.utcOffset`), or by the name asked for, not by `identifier`.
    public static func named(_ name: String) -> TimeZone? {
        cache.zone(named: name)
    }

    /// At most this many names are kept. Only accepted names are, and tzdata has about 600, so it does not
    /// fill in practice; the bound is there so that no input can grow it (past it: looked up, not kept).
    static let capacity = 1024

    static let cache = ZoneCache(capacity: capacity)

    /// Whether `name` is shaped like an IANA zone name and not one of the non-IANA names Foundation
    /// accepts (see the type's comment). Whether the zone exists is for `TimeZone(identifier:)` to say.
    static func isIANAShaped(_ name: String) -> Bool {
        let bytes = name.utf8
        guard (1...64).contains(bytes.count) else { return false }
        var hasArea = false
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "+"):
                continue
            case UInt8(ascii: "/"):
                hasArea = true
            default:
                return false
            }
        }
        guard hasArea else { return arealess.contains(name) }
        return !name.hasPrefix("SystemV/") && !retired.contains(name)
    }

    /// tzdata's zone and link names without an area (2025b, `backward` included): the only area-less names
    /// that are IANA's. Every other area-less name Foundation accepts is an offset or an abbreviation.
    static let arealess: Set<String> = [
        "CET", "CST6CDT", "Cuba", "EET", "EST", "EST5EDT", "Egypt", "Eire", "Factory", "GB", "GB-Eire", "GMT", "GMT+0", "GMT-0",
        "GMT0", "Greenwich", "HST", "Hongkong", "Iceland", "Iran", "Israel", "Jamaica", "Japan", "Kwajalein", "Libya", "MET", "MST",
        "MST7MDT", "NZ", "NZ-CHAT", "Navajo", "PRC", "PST8PDT", "Poland", "Portugal", "ROC", "ROK", "Singapore", "Turkey", "UCT",
        "UTC", "Universal", "W-SU", "WET", "Zulu",
    ]

    /// Names with an area that ICU still accepts but tzdata removed (besides "SystemV/…", removed in 2020b).
    static let retired: Set<String> = ["US/Pacific-New", "Canada/East-Saskatchewan"]
}

/// The names looked up so far and their zones, behind a `Mutex` (held for one dictionary read or write).
/// Only names that gave a zone are kept, so unknown names sent in bulk cannot push the real ones out or
/// grow the table; they are asked of ICU each time (~3 µs for a name with an area, far less for one
/// refused by its shape).
final class ZoneCache: Sendable {
    let capacity: Int
    private let zones = Mutex<[String: TimeZone]>([:])

    init(capacity: Int) {
        self.capacity = capacity
    }

    func zone(named name: String) -> TimeZone? {
        guard name.utf8.count <= 64 else { return nil }
        if let zone = zones.withLock({ $0[name] }) { return zone }
        guard TimeZones.isIANAShaped(name), let zone = TimeZone(identifier: name) else { return nil }
        zones.withLock { zones in
            if zones.count < capacity { zones[name] = zone }
        }
        return zone
    }

    var count: Int { zones.withLock { $0.count } }
}
