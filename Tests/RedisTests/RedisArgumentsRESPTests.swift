import Testing

@testable import Redis
@testable import RedisClient

/// The client writes each command's RESP itself (`redisAppendFormattedCommand`): the bytes must be
/// exactly the protocol's, for empty, binary and long arguments alike. (Every test against a real
/// redis-server goes through the same path.)
@Suite struct RedisArgumentsRESPTests {
    @Test func formatsEveryArgumentAsABulkString() {
        let long = String(repeating: "x", count: 1234)
        var arguments = RedisArguments(["SET", "", "k\r\n\u{0}é", long])
        arguments.append(-42)
        let resp = arguments.withRESP { Array($0) }
        let expected = "*5\r\n$3\r\nSET\r\n$0\r\n\r\n$6\r\nk\r\n\u{0}é\r\n$1234\r\n\(long)\r\n$3\r\n-42\r\n"
        #expect(resp == Array(expected.utf8))
    }

    @Test func formatsNoArgumentsAndTenOfThem() {
        #expect(RedisArguments().withRESP { Array($0) } == Array("*0\r\n".utf8))
        let ten = RedisArguments((0..<10).map { String(repeating: "a", count: $0 * 11) })
        let expected = "*10\r\n" + (0..<10).map { "$\($0 * 11)\r\n\(String(repeating: "a", count: $0 * 11))\r\n" }.joined()
        #expect(ten.withRESP { Array($0) } == Array(expected.utf8))
    }

    /// Integers are written as their decimal text, token hex with ASCII capitals lowered (only those).
    @Test func appendsIntegersAndLowersHex() {
        var arguments = RedisArguments()
        let values: [Int64] = [0, 7, -7, 10, 1_234_567_890, Int64.max, Int64.min, -1_000_000_000_000_000_000]
        for value in values { arguments.append(value) }
        arguments.append(UInt8(200))
        arguments.append(UInt64.max)  // past Int64: through its String
        arguments.append(lowercasingASCII: "ABCdef0189XYZ[@`{é")
        arguments.append(lowercasingASCII: "")
        let expected = values.map { String($0) } + ["200", String(UInt64.max), "abcdef0189xyz[@`{é", ""]
        #expect(arguments.elements.map { String(decoding: $0, as: UTF8.self) } == expected)
    }
}
