import Testing

@testable import APNsProtocol

private func hex(_ text: String) -> [UInt8] {
    let digits = Array(text.filter { !$0.isWhitespace })
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
}

private func decode(_ decoder: inout HPACKAnswerDecoder, _ block: [UInt8]) throws(HPACKDecodingError) -> HPACKAnswer {
    var result: Result<HPACKAnswer, HPACKDecodingError> = .success(HPACKAnswer(status: 0))
    block.withUnsafeBytes { bytes in
        result = Result { () throws(HPACKDecodingError) in try decoder.decode(bytes) }
    }
    return try result.get()
}

/// The dynamic table as text, newest first, "name: value" per entry.
private func table(_ decoder: HPACKAnswerDecoder) -> [String] {
    decoder.dynamicTable.map { String(decoding: $0.name, as: UTF8.self) + ": " + String(decoding: $0.value, as: UTF8.self) }
}

/// RFC 7541 Appendix C: the examples, block after block on one decoder, each followed by the dynamic
/// table the RFC prints after it.
@Suite struct HPACKAnswerDecoderExampleTests {
    static let requestTables = [
        [":authority: www.example.com"],
        ["cache-control: no-cache", ":authority: www.example.com"],
        ["custom-key: custom-value", "cache-control: no-cache", ":authority: www.example.com"],
    ]
    static let requestSizes = [57, 110, 164]

    /// C.3: requests without Huffman coding (no `:status`: 0).
    @Test func c3RequestsWithoutHuffman() throws {
        let blocks = [
            "828684410f7777772e6578616d706c652e636f6d",
            "828684be58086e6f2d6361636865",
            "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        ]
        try check(blocks, tableSize: 4096, statuses: [0, 0, 0], tables: Self.requestTables, sizes: Self.requestSizes)
    }

    /// C.4: the same requests, Huffman-coded.
    @Test func c4RequestsWithHuffman() throws {
        let blocks = [
            "828684418cf1e3c2e5f23a6ba0ab90f4ff",
            "828684be5886a8eb10649cbf",
            "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        ]
        try check(blocks, tableSize: 4096, statuses: [0, 0, 0], tables: Self.requestTables, sizes: Self.requestSizes)
    }

    static let responseTables = [
        [
            "location: https://www.example.com", "date: Mon, 21 Oct 2013 20:13:21 GMT", "cache-control: private",
            ":status: 302",
        ],
        [
            ":status: 307", "location: https://www.example.com", "date: Mon, 21 Oct 2013 20:13:21 GMT",
            "cache-control: private",
        ],
        [
            "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1", "content-encoding: gzip",
            "date: Mon, 21 Oct 2013 20:13:22 GMT",
        ],
    ]

    /// C.5: responses without Huffman coding, a 256-octet table: evictions in the second and third.
    @Test func c5ResponsesWithoutHuffman() throws {
        let blocks = [
            "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
            "4803333037c1c0bf",
            "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076657273696f6e3d31",
        ]
        try check(blocks, tableSize: 256, statuses: [302, 307, 200], tables: Self.responseTables, sizes: [222, 222, 215])
    }

    /// C.6: the same responses, Huffman-coded.
    @Test func c6ResponsesWithHuffman() throws {
        let blocks = [
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
            "4883640effc1c0bf",
            "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
        ]
        try check(blocks, tableSize: 256, statuses: [302, 307, 200], tables: Self.responseTables, sizes: [222, 222, 215])
    }

    private func check(_ blocks: [String], tableSize: Int, statuses: [Int], tables: [[String]], sizes: [Int]) throws {
        var decoder = HPACKAnswerDecoder(maxTableSize: tableSize)
        for (i, block) in blocks.enumerated() {
            let answer = try decode(&decoder, hex(block))
            #expect(answer.status == statuses[i], "block \(i + 1)")
            #expect(answer.uniqueID == nil)
            #expect(table(decoder) == tables[i], "block \(i + 1)")
            #expect(decoder.tableSize == sizes[i], "block \(i + 1)")
        }
    }
}

@Suite struct HPACKAnswerDecoderTests {
    static let uuid = "7F3C1C3E-3D3A-4B0E-9B1C-2B5C9A3D7E11"

    /// A literal field with a literal name, not indexed, without Huffman coding (§6.2.2).
    private func literal(_ name: String, _ value: String, prefix: UInt8 = 0x00) -> [UInt8] {
        [prefix, UInt8(name.utf8.count)] + Array(name.utf8) + [UInt8(value.utf8.count)] + Array(value.utf8)
    }

    @Test func statusAndUniqueID() throws {
        var decoder = HPACKAnswerDecoder()
        // `:status: 410` as a literal with the static name 8, indexed; then `apns-unique-id`, indexed.
        let first = [0x48, 0x03] + Array("410".utf8) + literal("apns-unique-id", Self.uuid, prefix: 0x40)
        #expect(try decode(&decoder, first) == HPACKAnswer(status: 410, uniqueID: Self.uuid))
        #expect(decoder.entryCount == 2)
        // Both again from the dynamic table (62: the newest, the unique id; 63: `:status: 410`).
        #expect(try decode(&decoder, [0xBF, 0xBE]) == HPACKAnswer(status: 410, uniqueID: Self.uuid))
        // The first of each counts; a 35-octet id, an upper-case name, a status that is not 3 digits.
        #expect(try decode(&decoder, [0x88, 0x89, 0xBE]) == HPACKAnswer(status: 200, uniqueID: Self.uuid))
        #expect(try decode(&decoder, literal("APNS-Unique-ID", String(Self.uuid.dropLast()))) == HPACKAnswer(status: 0))
        #expect(try decode(&decoder, literal(":status", "2000") + [0x88]) == HPACKAnswer(status: 0))
        #expect(try decode(&decoder, literal(":status", "+20")) == HPACKAnswer(status: 0))
        #expect(try decode(&decoder, literal(":STATUS", "503")) == HPACKAnswer(status: 503))
        #expect(try decode(&decoder, literal("apns-id", Self.uuid)) == HPACKAnswer(status: 0))
        #expect(try decode(&decoder, []) == HPACKAnswer(status: 0))
        // 36 octets that are not UTF-8: not a UUID's text.
        let bad = [UInt8](repeating: 0xFF, count: 36)
        #expect(try decode(&decoder, [0x00, 14] + Array("apns-unique-id".utf8) + [36] + bad) == HPACKAnswer(status: 0))
    }

    /// §4.3, §4.4: size updates evict; an entry larger than the table empties it; a name can come from
    /// the entry its own insertion evicts.
    @Test func tableSizeUpdatesAndEviction() throws {
        var decoder = HPACKAnswerDecoder(maxTableSize: 100)
        _ = try decode(&decoder, literal("aaaa", "1111", prefix: 0x40))  // 40
        _ = try decode(&decoder, literal("bbbb", "2222", prefix: 0x40))  // 40, 80 in all
        #expect(table(decoder) == ["bbbb: 2222", "aaaa: 1111"])
        // Name of index 63 (the oldest, "aaaa"), which this insertion evicts.
        _ = try decode(&decoder, [0x7F, 0x00, 0x04] + Array("3333".utf8))
        #expect(table(decoder) == ["aaaa: 3333", "bbbb: 2222"])
        _ = try decode(&decoder, [0x3F, 0x0A])  // size update to 41 (31 + 10): one entry stays
        #expect(table(decoder) == ["aaaa: 3333"] && decoder.tableCapacity == 41 && decoder.tableSize == 40)
        _ = try decode(&decoder, literal("cccc", "a value too long", prefix: 0x40))
        #expect(decoder.entryCount == 0 && decoder.tableSize == 0)
        _ = try decode(&decoder, [0x20, 0x3F, 0x45])  // to 0, then to 100: two updates are allowed
        #expect(decoder.tableCapacity == 100)
        // Many entries through the ring: names and values that wrap around its end read back whole.
        for i in 0..<50 {
            _ = try decode(&decoder, literal("n\(i)", String(repeating: "v", count: i % 13), prefix: 0x40))
            let (name, value) = decoder.dynamicTable[0]
            #expect(String(decoding: name, as: UTF8.self) == "n\(i)" && value.count == i % 13)
            #expect(decoder.tableSize <= 100)
        }
    }

    @Test(
        arguments: [
            ([0x80], "index 0"),
            ([0xBE], "index 62 of an empty table"),
            ([0x7F, 0x80], "integer cut off"),
            ([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F], "integer of 7 octets"),
            ([0x00, 0x05, 0x61], "name longer than the block"),
            ([0x40], "name missing"),
            ([0x00, 0x01, 0x61], "value missing"),
            ([0x00, 0x00, 0x00], "empty name"),
            ([0x00, 0x01, 0x61, 0x7F, 0x81, 0x80, 0x80, 0x80, 0x01], "value length far beyond the block"),
            ([0x00, 0x01, 0x61, 0x81, 0x00], "Huffman padding of 0s (\"0\" is 00000, then 000)"),
            ([0x00, 0x01, 0x61, 0x82, 0x1F, 0xFF], "Huffman padding of 11 bits"),
            ([0x00, 0x01, 0x61, 0x84, 0xFF, 0xFF, 0xFF, 0xFF], "Huffman EOS"),
            ([0x3F, 0xE2, 0x1F], "size update to 4097"),
            ([0x88, 0x20], "size update after a field"),
            ([0x20, 0x20, 0x20], "three size updates"),
        ] as [([UInt8], String)])
    func malformedBlocksAreRefused(block: [UInt8], what: String) {
        var decoder = HPACKAnswerDecoder()
        #expect(throws: HPACKDecodingError.self, "\(what)") { try decode(&decoder, block) }
    }

    @Test func headerListSizeIsBounded() throws {
        var decoder = HPACKAnswerDecoder(maxHeaderListSize: 200)
        _ = try decode(&decoder, literal("a", String(repeating: "x", count: 100)))
        #expect(throws: HPACKDecodingError.self) { try decode(&decoder, literal("a", String(repeating: "x", count: 100)) + [0x88, 0x88]) }
    }

    /// Every symbol of Appendix B, alone and in one string: `HPACKAnswerDecoder` reads it back.
    @Test func everyHuffmanSymbolDecodes() throws {
        for symbols in (0...255).map({ [UInt8($0)] }) + [Array(0...255), Array("no-cache".utf8)] {
            var decoder = HPACKAnswerDecoder()
            let coded = huffman(symbols)
            let block: [UInt8] = [0x40, 0x01, 0x61] + integer(coded.count, prefix: 7, flags: 0x80) + coded
            _ = try decode(&decoder, block)
            #expect(decoder.dynamicTable.first?.value == symbols)
        }
    }

    /// Appendix B is a complete prefix code (Kraft's sum is exactly 1) whose EOS is 30 ones (§5.2).
    @Test func theCodeTableIsComplete() {
        var sum: UInt64 = 0
        for (code, length) in HPACKHuffman.codes {
            #expect(code < 1 << UInt32(length) && (5...30).contains(length))
            sum += 1 << UInt64(30 - length)
        }
        #expect(HPACKHuffman.codes.count == 257 && sum == 1 << 30)
        #expect(HPACKHuffman.codes[256] == (0x3FFF_FFFF, 30))
    }

    /// §5.1: an integer with an N-bit prefix.
    private func integer(_ value: Int, prefix: Int, flags: UInt8) -> [UInt8] {
        let mask = (1 << prefix) - 1
        guard value >= mask else { return [flags | UInt8(value)] }
        var out = [flags | UInt8(mask)]
        var rest = value - mask
        while rest >= 128 {
            out.append(UInt8(rest & 0x7F) | 0x80)
            rest >>= 7
        }
        return out + [UInt8(rest)]
    }

    /// A Huffman encoder written from the code table alone (padding: the EOS prefix, §5.2).
    private func huffman(_ symbols: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var bits: UInt64 = 0
        var count = 0
        for symbol in symbols {
            let (code, length) = HPACKHuffman.codes[Int(symbol)]
            bits = bits << UInt64(length) | UInt64(code)
            count += length
            while count >= 8 {
                out.append(UInt8(truncatingIfNeeded: bits >> UInt64(count - 8)))
                count -= 8
            }
        }
        if count > 0 { out.append(UInt8(truncatingIfNeeded: bits << UInt64(8 - count)) | UInt8(0xFF >> count)) }
        return out
    }
}
