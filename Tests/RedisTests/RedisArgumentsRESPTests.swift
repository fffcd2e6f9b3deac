import Testing

@testable import Redis

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
}
