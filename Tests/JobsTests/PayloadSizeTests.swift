import APNsProtocol
import Testing

@testable import Jobs

/// The decoder's size check counts bytes instead of encoding; these compare the counts with what
/// `PayloadEncoder` and `JSONValue.serialized()` really write, on generated payloads of every shape.
@Suite struct PayloadSizeTests {
    /// xorshift64*: deterministic, so a failure reproduces.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state ^= state >> 12
            state ^= state << 25
            state ^= state >> 27
            return state &* 0x2545_F491_4F6C_DD1D
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func chance() -> Bool { below(2) == 0 }
    }

    static let pieces = [
        "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\r", "\u{08}", "\u{0C}", "\u{01}", "\u{1F}", "\u{7F}", "é", "€", "😀", "👩‍👩‍👧",
    ]

    func string(_ r: inout Random) -> String {
        var s = ""
        for _ in 0..<r.below(12) { s += Self.pieces[r.below(Self.pieces.count)] }
        return s
    }

    func json(_ r: inout Random, depth: Int = 0) -> JSONValue {
        switch r.below(depth >= 2 ? 4 : 6) {
        case 0: return .null
        case 1: return .bool(r.chance())
        case 2: return .number(["0", "-1", "12345678901234567890", "1.5e-7", "3.25"][r.below(5)])
        case 3: return .string(string(&r))
        case 4: return .array((0..<r.below(4)).map { _ in json(&r, depth: depth + 1) })
        default: return .object((0..<r.below(4)).map { _ in (key: string(&r), value: json(&r, depth: depth + 1)) })
        }
    }

    func custom(_ r: inout Random) -> [Payload.CustomKey] {
        (0..<r.below(3)).map { _ in Payload.CustomKey("k" + string(&r), json(&r)) }
    }

    func nullable<T>(_ r: inout Random, _ make: (inout Random) -> T) -> Nullable<T>? {
        switch r.below(3) {
        case 0: return nil
        case 1: return .null
        default: return .value(make(&r))
        }
    }

    func alert(_ r: inout Random) -> Alert? {
        switch r.below(4) {
        case 0: return nil
        case 1: return .text(string(&r))
        case 2: return .dictionary(AlertDictionary(body: string(&r)))  // body-only: written as a string
        default:
            var d = AlertDictionary()
            if r.chance() { d.title = string(&r) }
            if r.chance() { d.body = string(&r) }
            d.titleLocKey = nullable(&r) { string(&$0) }
            d.titleLocArgs = nullable(&r) { r in (0..<r.below(3)).map { _ in string(&r) } }
            d.actionLocKey = nullable(&r) { string(&$0) }
            if r.chance() { d.locKey = string(&r) }
            if r.chance() { d.locArgs = (0..<r.below(3)).map { _ in string(&r) } }
            if r.chance() { d.launchImage = string(&r) }
            if r.below(4) == 0 { d.other = custom(&r) }
            return .dictionary(d)
        }
    }

    @Test func countsMatchTheEncoder() throws {
        var r = Random(state: 0x5EED_1234_ABCD_0001)
        let encoder = PayloadEncoder(limit: .max)
        for i in 0..<3000 {
            var aps = APS(alert: alert(&r))
            if r.chance() { aps.badge = r.below(3) == 0 ? 0 : r.below(1_000_000) }
            if r.chance() { aps.sound = string(&r) }
            aps.contentAvailable = r.chance()
            if r.chance() { aps.category = string(&r) }
            if r.below(4) == 0 { aps.other = custom(&r) }
            let payload = Payload(aps: aps, custom: custom(&r))
            let encoded = try encoder.encode(payload)
            #expect(PayloadSize.of(payload) == encoded.count, "payload \(i): \(Fixtures.string(encoded))")
            if let alert = aps.alert {
                let alone = try encoder.encode(Payload(aps: APS(alert: alert)))
                #expect(PayloadSize.of(alert) == alone.count - 18, "alert \(i): \(Fixtures.string(alone))")
            }
            let value = json(&r)
            #expect(PayloadSize.of(value) == value.serialized().count, "value \(i): \(value.serializedString)")
        }
    }
}
