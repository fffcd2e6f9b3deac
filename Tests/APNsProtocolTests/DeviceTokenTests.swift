import APNsProtocol
import Testing

@Suite struct DeviceTokenTests {
    @Test func hexIsCaseInsensitiveAndNormalisedToLowerCase() throws {
        let upper = try DeviceToken(hex: countingTokenHex.uppercased())
        #expect(upper == countingToken)
        #expect(upper.hex == countingTokenHex)
        #expect(upper.bytes == (0..<32).map { UInt8($0) })
    }

    @Test func typedErrors() {
        #expect(throws: DeviceToken.ParseError.wrongHexLength(63)) { try DeviceToken(hex: String(countingTokenHex.dropLast())) }
        #expect(throws: DeviceToken.ParseError.wrongHexLength(0)) { try DeviceToken(hex: "") }
        #expect(throws: DeviceToken.ParseError.notHex(offset: 10)) {
            try DeviceToken(hex: "0001020304g5060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
        }
        // A multi-byte character: 64 UTF-8 bytes but not hex.
        #expect(throws: DeviceToken.ParseError.notHex(offset: 0)) { try DeviceToken(hex: "é" + String(countingTokenHex.dropFirst(2))) }
        #expect(throws: DeviceToken.ParseError.wrongByteCount(31)) { try DeviceToken(bytes: [UInt8](repeating: 0, count: 31)) }
    }

    @Test func stableHashIsFixed() {
        // FNV-1a 64 over 00 01 … 1f: the value must never change, or shards would reshuffle between
        // versions. (Computed once with an independent implementation: Python's FNV-1a.)
        #expect(countingToken.stableHash == 0xe6cb_594c_1a14_8ac5)
    }
}
