import APNsProtocol
import GatewaySimulator
import NIOCore
import NIOHPACK
import Testing

/// `HPACKAnswerDecoder` beside NIOHPACK's `HPACKDecoder` (which the codec used before): random answers,
/// encoded by NIOHPACK's `HPACKEncoder` over thousands of consecutive blocks on one connection — with
/// and without Huffman coding, every indexing kind, table size changes — must give both decoders the
/// same `:status`, the same `apns-unique-id`, the same table size limit, and no error. Seeded: a failure
/// names its seed and block.
@Suite struct HPACKAnswerDecoderDifferentialTests {
    @Test(arguments: [(1, true), (2, false), (3, true), (4, false), (5, true)] as [(UInt64, Bool)])
    func sameAnswersAsNIOHPACK(seed: UInt64, huffman: Bool) throws {
        var random = SplitMix64(seed: seed)
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: huffman)
        var reference = HPACKDecoder(allocator: ByteBufferAllocator())
        var decoder = HPACKAnswerDecoder()
        var pool = Pool()
        for block in 0..<2500 {
            let context = "seed \(seed), block \(block)"
            if Int.random(in: 0..<20, using: &random) == 0 {
                // One or two changes between blocks: the encoder signals the smallest, then the last.
                for _ in 0...Int.random(in: 0...1, using: &random) {
                    let size = [0, 64, 256, 1000, 4096, Int.random(in: 0...4096, using: &random)].randomElement(using: &random)!
                    try encoder.setDynamicTableSize(size)
                }
            }
            let fields = pool.answer(using: &random)
            try encoder.beginEncoding(allocator: ByteBufferAllocator())
            for field in fields {
                switch field.indexing {
                case .indexable: try encoder.append(header: field.name, value: field.value)
                case .nonIndexable: try encoder.appendNonIndexed(header: field.name, value: field.value)
                case .neverIndexed: try encoder.appendNeverIndexed(header: field.name, value: field.value)
                }
            }
            var bytes = try encoder.endEncoding()
            let ours = try bytes.withUnsafeReadableBytes { try decoder.decode($0) }
            let headers = try reference.decodeHeaders(from: &bytes)
            let status = headers.first(name: ":status").flatMap { Int($0) } ?? 0
            let uniqueID = headers.first(name: "apns-unique-id").flatMap { $0.utf8.count == 36 ? $0 : nil }
            #expect(ours == HPACKAnswer(status: status, uniqueID: uniqueID), "\(context)")
            #expect(decoder.tableCapacity == reference.allowedDynamicTableLength, "\(context)")
            #expect(decoder.tableSize <= decoder.tableCapacity, "\(context)")
            if ours != HPACKAnswer(status: status, uniqueID: uniqueID) { return }
        }
    }

    private struct Field {
        var name: String
        var value: String
        var indexing: HPACKIndexing
    }

    /// Names and values seen before, so that later blocks refer to table entries (whole or by name).
    private struct Pool {
        var names = ["apns-id", "apns-unique-id", ":status", "content-type", "x-custom", "server", "date"]
        var values = ["200", "application/json", "7F3C1C3E-3D3A-4B0E-9B1C-2B5C9A3D7E11", ""]

        mutating func answer(using random: inout SplitMix64) -> [Field] {
            var fields = [Field(name: ":status", value: String(Int.random(in: 100...599, using: &random)), indexing: .indexable)]
            if Bool.random(using: &random) {
                fields[0].value = ["200", "400", "403", "410", "429", "500", "503"].randomElement(using: &random)!
            }
            fields.append(Field(name: "apns-id", value: Self.uuid(using: &random), indexing: .indexable))
            switch Int.random(in: 0..<4, using: &random) {
            case 0: fields.append(Field(name: "apns-unique-id", value: Self.uuid(using: &random), indexing: .indexable))
            case 1:
                fields.append(
                    Field(name: "apns-unique-id", value: text(Int.random(in: 0...50, using: &random), using: &random), indexing: .indexable)
                )
            case 2: fields.append(Field(name: "apns-unique-id", value: String(repeating: "é", count: 18), indexing: .indexable))
            default: break
            }
            for _ in 0..<Int.random(in: 0...4, using: &random) {
                let name = Bool.random(using: &random) ? names.randomElement(using: &random)! : newName(using: &random)
                let value = Bool.random(using: &random) ? values.randomElement(using: &random)! : newValue(using: &random)
                fields.insert(Field(name: name, value: value, indexing: .indexable), at: Int.random(in: 0...fields.count, using: &random))
            }
            for i in fields.indices {
                fields[i].indexing = [.indexable, .indexable, .indexable, .nonIndexable, .neverIndexed].randomElement(using: &random)!
            }
            return fields
        }

        mutating func newName(using random: inout SplitMix64) -> String {
            let letters = Array("abcdefghijklmnopqrstuvwxyz-0123456789")
            let name = String((0..<Int.random(in: 1...20, using: &random)).map { _ in letters.randomElement(using: &random)! })
            if names.count < 64 { names.append(name) }
            return name
        }

        mutating func newValue(using random: inout SplitMix64) -> String {
            let value = text(Int.random(in: 0...300, using: &random), using: &random)
            if values.count < 64 { values.append(value) }
            return value
        }

        /// `count` characters: mostly ASCII, some of two, three and four UTF-8 octets.
        func text(_ count: Int, using random: inout SplitMix64) -> String {
            var text = ""
            for _ in 0..<count {
                let ranges: [ClosedRange<UInt32>] = [
                    0x20...0x7E, 0x20...0x7E, 0x20...0x7E, 0xA0...0x7FF, 0x800...0xD7FF, 0x1_0000...0x1_FFFF,
                ]
                let scalar = UInt32.random(in: ranges.randomElement(using: &random)!, using: &random)
                text.unicodeScalars.append(Unicode.Scalar(scalar)!)
            }
            return text
        }

        static func uuid(using random: inout SplitMix64) -> String {
            let hex = Array("0123456789ABCDEF")
            return String((0..<36).map { [8, 13, 18, 23].contains($0) ? "-" : hex.randomElement(using: &random)! })
        }
    }
}
