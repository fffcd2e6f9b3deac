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
        for i in 0..<countingToken.hexCount {
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
        #expect(throws: DeviceToken.ParseError.wrongByteCount(7)) { try DeviceToken(bytes: [UInt8](repeating: 0, count: 7)) }
        #expect(throws: DeviceToken.ParseError.wrongByteCount(101)) { try DeviceToken(bytes: [UInt8](repeating: 0, count: 101)) }
        #expect(throws: DeviceToken.ParseError.wrongByteCount(0)) { try DeviceToken(bytes: []) }
    }

    // MARK: Sizes other than 32 bytes (Apple: "APNs device tokens are of variable length. Do not
    // hard-code their size.")

    /// A token of `n` bytes 00 01 02 …, and its hex.
    static func counting(_ n: Int) -> (token: DeviceToken, hex: String) {
        let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 * 7 + 3) }
        return (try! DeviceToken(bytes: bytes), hex(bytes))
    }

    /// Every size from 8 to 100 bytes: hex and bytes round-trip, upper case parses to the same token,
    /// the counts say the size, and only 32 bytes is the binary interface's.
    @Test func everySizeInTheRangeRoundTrips() throws {
        for n in DeviceToken.minByteCount...DeviceToken.maxByteCount {
            let (token, text) = Self.counting(n)
            #expect(token.byteCount == n && token.hexCount == 2 * n)
            #expect(token.bytes == (0..<n).map { UInt8(truncatingIfNeeded: $0 * 7 + 3) })
            #expect(token.hex == text && token.description == text)
            #expect(try DeviceToken(hex: text) == token, "\(n) bytes")
            #expect(try DeviceToken(hex: text.uppercased()) == token)
            #expect(try DeviceToken(bytes: token.bytes) == token)
            #expect(Array(text.utf8).withUnsafeBytes { token.isHex($0) })
            #expect(!Array(text.uppercased().utf8).withUnsafeBytes { token.isHex($0) } || text == text.uppercased())
            #expect(token.fitsBinaryInterface == (n == 32))
            let scalar = try Array(text.utf8).withUnsafeBytes { raw in
                try Result { () throws(DeviceToken.ParseError) in try DeviceToken(scalarHexBytes: raw) }.get()
            }
            #expect(scalar == token)
            var written = [UInt8](repeating: 0, count: token.hexCount)
            written.withUnsafeMutableBytes { token.writeHex(into: $0) }
            #expect(String(decoding: written, as: UTF8.self) == text)
        }
    }

    /// `isHex` on a 41-byte token (82 digits: ten words and a two-byte tail): every position matters,
    /// and neither a prefix nor an extension matches.
    @Test func isHexOnAnotherSizeChecksTheTail() {
        let (token, text) = Self.counting(41)
        let utf8 = Array(text.utf8)
        #expect(utf8.withUnsafeBytes { token.isHex($0) })
        for i in 0..<utf8.count {
            var other = utf8
            other[i] = other[i] == UInt8(ascii: "f") ? UInt8(ascii: "e") : UInt8(ascii: "f")
            #expect(!other.withUnsafeBytes { token.isHex($0) }, "differs at \(i)")
        }
        #expect(!Array(utf8.dropLast(2)).withUnsafeBytes { token.isHex($0) })
        #expect(!(utf8 + Array("00".utf8)).withUnsafeBytes { token.isHex($0) })
    }

    /// One value, one representation: 32 bytes is inline however it is made, any other size is not;
    /// equality and hashing follow the bytes, so a set or dictionary sees each token once.
    @Test func equalityAndHashFollowTheBytes() throws {
        let fromHex = try DeviceToken(hex: countingTokenHex)
        let fromBytes = try DeviceToken(bytes: (0..<32).map { UInt8($0) })
        let fromSlice = try DeviceToken(bytes: [0xFF] + (0..<32).map { UInt8($0) } + [0xFF])  // 34 bytes
        let fromInnerSlice = try DeviceToken(bytes: ([0xFF] + (0..<32).map { UInt8($0) })[1...])  // 32, an ArraySlice
        #expect(fromHex == fromBytes && fromBytes == fromInnerSlice && fromHex.fitsBinaryInterface)
        #expect(fromSlice != fromHex && !fromSlice.fitsBinaryInterface)
        if case .inline = fromInnerSlice.storage {} else { Issue.record("32 bytes from a slice must be inline") }
        if case .outOfLine(let b) = fromSlice.storage { #expect(b.count == 34) } else { Issue.record("34 bytes are out of line") }

        // A longer token that starts with the 32-byte one, and one that ends with it: never equal to it.
        let prefixed = try DeviceToken(bytes: (0..<32).map { UInt8($0) } + [0, 0])
        let shorter = try DeviceToken(bytes: (0..<16).map { UInt8($0) })
        let longA = try DeviceToken(hex: String(repeating: "ab", count: 40))
        let longB = try DeviceToken(hex: String(repeating: "AB", count: 40))
        let set: Set<DeviceToken> = [fromHex, fromBytes, prefixed, shorter, longA, longB, fromInnerSlice]
        #expect(set.count == 4)
        let ab40 = try DeviceToken(bytes: [UInt8](repeating: 0xAB, count: 40))
        #expect(set.contains(countingToken) && set.contains(ab40))
        var hasherA = Hasher()
        longA.hash(into: &hasherA)
        var hasherB = Hasher()
        longB.hash(into: &hasherB)
        #expect(hasherA.finalize() == hasherB.finalize())
        #expect(longA.hashValue == longB.hashValue && fromHex.hashValue == fromBytes.hashValue)
    }

    /// The stable hash is FNV-1a over the bytes whatever the size: the 32-byte value is unchanged, and
    /// another size hashes its own bytes (computed here independently).
    @Test func stableHashOverAnySize() throws {
        func fnv(_ bytes: [UInt8]) -> UInt64 {
            bytes.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x0000_0100_0000_01B3 }
        }
        #expect(fnv((0..<32).map { UInt8($0) }) == countingToken.stableHash)
        for n in [8, 31, 33, 64, 100] {
            let (token, _) = Self.counting(n)
            #expect(token.stableHash == fnv(token.bytes), "\(n) bytes")
        }
    }

    /// The bounds: 16 and 200 digits parse; 14 and 202 do not; an odd count never does (a token is whole
    /// bytes); a non-hex character is named by its offset at any size.
    @Test func boundsOddLengthsAndNonHex() throws {
        #expect(try DeviceToken(hex: String(repeating: "0f", count: 8)).byteCount == 8)
        #expect(try DeviceToken(hex: String(repeating: "0f", count: 100)).byteCount == 100)
        #expect(throws: DeviceToken.ParseError.wrongHexLength(14)) { try DeviceToken(hex: String(repeating: "0f", count: 7)) }
        #expect(throws: DeviceToken.ParseError.wrongHexLength(202)) { try DeviceToken(hex: String(repeating: "0f", count: 101)) }
        for odd in [15, 17, 63, 65, 81, 199, 201] {
            #expect(throws: DeviceToken.ParseError.wrongHexLength(odd)) { try DeviceToken(hex: String(repeating: "a", count: odd)) }
        }
        #expect(DeviceToken.ParseError.wrongHexLength(65).description.contains("even number of hex digits"))
        #expect(DeviceToken.ParseError.wrongHexLength(14).description.contains("16…200 hex digits"))
        // Far over the limit is refused by its length alone.
        #expect(throws: DeviceToken.ParseError.wrongHexLength(100_000)) { try DeviceToken(hex: String(repeating: "z", count: 100_000)) }
        for offset in [0, 1, 40, 79] {
            var text = Array(String(repeating: "ab", count: 40).utf8)
            text[offset] = UInt8(ascii: "g")
            #expect(throws: DeviceToken.ParseError.notHex(offset: offset)) { try DeviceToken(hex: String(decoding: text, as: UTF8.self)) }
        }
        // A multi-byte character is not hex either (its first UTF-8 byte is where the text stops being hex).
        #expect(throws: DeviceToken.ParseError.notHex(offset: 2)) { try DeviceToken(hex: "ab" + "é" + String(repeating: "c", count: 76)) }
    }

    @Test func stableHashIsFixed() {
        // FNV-1a 64 over 00 01 … 1f: the value must never change, or shards would reshuffle between
        // versions. (Computed once with an independent implementation: Python's FNV-1a.)
        #expect(countingToken.stableHash == 0xe6cb_594c_1a14_8ac5)
    }
}
