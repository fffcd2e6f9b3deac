import Foundation
import Testing

@testable import APNsProtocol

@Suite struct DeviceTokenTests {
    @Test func hexIsCaseInsensitiveAndNormalisedToLowerCase() throws {
        let upper = try DeviceToken(hex: countingTokenHex.uppercased())
        #expect(upper == countingToken)
        #expect(upper.hex == countingTokenHex)
        #expect(upper.bytes == (0..<32).map { UInt8($0) })
    }

    /// `isHex` is `hex ==` without the string: lower case only, every position, exact length.
    @Test func isHexComparesWithTheLowerCaseHex() {
        func isHex(_ text: String) -> Bool { Array(text.utf8).withUnsafeBytes { countingToken.isHex($0) } }
        #expect(isHex(countingTokenHex))
        #expect(!isHex(countingTokenHex.uppercased()), "upper case is not `hex`")
        #expect(!isHex(String(countingTokenHex.dropLast())) && !isHex(countingTokenHex + "0") && !isHex(""))
        for i in 0..<DeviceToken.hexCount {
            var other = Array(countingTokenHex.utf8)
            other[i] = other[i] == UInt8(ascii: "f") ? UInt8(ascii: "e") : UInt8(ascii: "f")
            #expect(!other.withUnsafeBytes { countingToken.isHex($0) }, "differs at \(i)")
        }
    }

    /// Every byte value in the last hex position: only 0-9, a-f and A-F are digits, with their values;
    /// and every byte value round-trips through `hex`.
    @Test func everyByteValueAsAHexDigit() throws {
        let valid = Array("0123456789abcdefABCDEF".utf8)
        for b in UInt8.min...UInt8.max {
            let text = Array(repeating: UInt8(ascii: "0"), count: 63) + [b]
            let parsed = text.withUnsafeBytes { raw in Result { () throws(DeviceToken.ParseError) in try DeviceToken(hexBytes: raw) } }
            if let i = valid.firstIndex(of: b) {
                #expect((try? parsed.get())?.bytes.last == UInt8(i < 16 ? i : i - 6), "byte \(b)")
            } else {
                #expect(throws: DeviceToken.ParseError.notHex(offset: 63)) { try parsed.get() }
            }
        }
        let all = try DeviceToken(bytes: (0..<32).map { UInt8($0 * 8 + 7) })
        #expect(all.hex == (0..<32).map { String(format: "%02x", $0 * 8 + 7) }.joined())
        #expect(try DeviceToken(hex: all.hex) == all)
    }

    /// The eight-at-a-time parse gives what the character-at-a-time one gives: random tokens in mixed
    /// case, and every byte value at every position of a valid token (the error names that offset).
    @Test func wordParseEqualsTheCharacterParse() throws {
        func both(_ text: [UInt8]) -> (Result<DeviceToken, DeviceToken.ParseError>, Result<DeviceToken, DeviceToken.ParseError>) {
            text.withUnsafeBytes { raw in
                (
                    Result { () throws(DeviceToken.ParseError) in try DeviceToken(hexBytes: raw) },
                    Result { () throws(DeviceToken.ParseError) in try DeviceToken(scalarHexBytes: raw) }
                )
            }
        }
        var random = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdefABCDEF".utf8)
        for _ in 0..<2000 {
            let text = (0..<64).map { _ in digits.randomElement(using: &random)! }
            let (fast, scalar) = both(text)
            #expect(fast == scalar && (try? fast.get()) != nil, "\(String(decoding: text, as: UTF8.self))")
            #expect(text.withUnsafeBytes { DeviceToken.words(hex: $0) } != nil, "valid hex takes the word path")
            #expect(try fast.get().hex == String(decoding: text, as: UTF8.self).lowercased())
        }
        let base = Array(countingTokenHex.uppercased().utf8)
        for offset in 0..<64 {
            for b in UInt8.min...UInt8.max {
                var text = base
                text[offset] = b
                let (fast, scalar) = both(text)
                #expect(fast == scalar, "byte \(b) at \(offset)")
            }
        }
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
