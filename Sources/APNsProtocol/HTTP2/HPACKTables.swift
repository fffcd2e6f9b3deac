// The constant tables of HPACK (RFC 7541) that `HPACKAnswerDecoder` needs: the static table (Appendix A)
// and the Huffman code (Appendix B), from which a nibble-at-a-time decoding table is built once.

/// RFC 7541 Appendix A: the static table, index 1…61 (index 0 is unused and refused, §6.1).
enum HPACKStaticTable {
    static let entries: [(name: String, value: String)] = [
        ("", ""),
        (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
        (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
        (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
        ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""),
        ("cache-control", ""), ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""),
        ("content-length", ""), ("content-location", ""), ("content-range", ""), ("content-type", ""),
        ("cookie", ""), ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
        ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
        ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""),
        ("proxy-authenticate", ""), ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""),
        ("retry-after", ""), ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""),
        ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
    ]
    /// The last static index; dynamic entries follow it (§2.3.3).
    static let count = 61
    /// `:status` is indices 8…14, each with a value (Appendix A); the client reads no other static name.
    static let statusRange = 8...14
    static let statusValues = [200, 204, 206, 304, 400, 404, 500]
    /// Octet lengths of names and values, for the header list size (an indexed static field costs no
    /// String work).
    static let nameLengths: [Int] = entries.map { $0.name.utf8.count }
    static let valueLengths: [Int] = entries.map { $0.value.utf8.count }
}

/// RFC 7541 Appendix B: the Huffman code, as (code, length in bits) for symbols 0…255 and EOS (256),
/// the code right-aligned as the RFC prints it ("code as hex aligned to LSB").
enum HPACKHuffman {
    static let codes: [(code: UInt32, length: Int)] = [
        (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28),
        (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24), (0x3fff_fffc, 30), (0xfffffe9, 28),
        (0xfffffea, 28), (0x3fff_fffd, 30), (0xfffffeb, 28), (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28),
        (0xfffffef, 28), (0xffffff0, 28), (0xffffff1, 28), (0xffffff2, 28), (0x3fff_fffe, 30), (0xffffff3, 28),
        (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
        (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
        (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11), (0x3fa, 10), (0x3fb, 10),
        (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
        (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6),
        (0x1c, 6), (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
        (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13), (0x21, 6),
        (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
        (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7),
        (0x69, 7), (0x6a, 7), (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7),
        (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
        (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
        (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5),
        (0x25, 6), (0x26, 6), (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),
        (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7),
        (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
        (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14),
        (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),
        (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23),
        (0x7fffdb, 23), (0x7fffdc, 23), (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
        (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23),
        (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23),
        (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24), (0x3fffda, 22), (0x1fffdd, 21),
        (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
        (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22),
        (0x7fffeb, 23), (0x7fffec, 23), (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
        (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22),
        (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
        (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23),
        (0x3fffe8, 22), (0x1ffffec, 25), (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
        (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21),
        (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
        (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27),
        (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
        (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22),
        (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
        (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27), (0x7ffffe8, 27),
        (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),
        (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26), (0x3fff_ffff, 30),
    ]

    // A decoding table entry (UInt32): bits 0–7 the next state, 8–15 the symbol, then three flags.
    static let emits: UInt32 = 1 << 16
    /// The state reached may end a string: the bits since the last symbol are a prefix of EOS of at
    /// most 7 bits (§5.2: "padding strictly longer than 7 bits MUST be treated as a decoding error";
    /// "padding not corresponding to the most significant bits of the code for the EOS symbol MUST be
    /// treated as a decoding error").
    static let accepts: UInt32 = 1 << 17
    /// The nibble reaches EOS ("A Huffman-encoded string literal containing the EOS symbol MUST be
    /// treated as a decoding error", §5.2).
    static let fails: UInt32 = 1 << 18

    /// For each of the code tree's 256 inner nodes (state 0 is the root) and each 4-bit nibble, where the
    /// nibble leads: 16 × 256 entries. A code is at least 5 bits long, so a nibble completes at most one
    /// symbol. Built once from `codes`, so the only hand-copied data is the RFC's own table.
    static let states: [UInt32] = {
        let tree = Tree(codes)
        var table = [UInt32](repeating: 0, count: 256 * 16)
        for state in 0..<tree.innerCount {
            for nibble in 0..<16 {
                table[state << 4 | nibble] = tree.step(from: state, nibble: nibble)
            }
        }
        return table
    }()

    /// The code as a binary tree: inner nodes are numbered from 0 (the root); a child is an inner node
    /// (≥ 0) or a leaf, `-1 - symbol`.
    private struct Tree {
        var children: [(zero: Int, one: Int)] = [(Int.min, Int.min)]
        /// Per inner node: whether the path to it is all ones and at most 7 bits (a valid padding).
        var padding: [Bool] = [true]
        var innerCount: Int { children.count }

        init(_ codes: [(code: UInt32, length: Int)]) {
            for (symbol, (code, length)) in codes.enumerated() {
                var node = 0
                for i in stride(from: length - 1, through: 0, by: -1) {
                    let bit = (code >> UInt32(i)) & 1
                    let next = bit == 0 ? children[node].zero : children[node].one
                    let child: Int
                    if i == 0 {
                        child = -1 - symbol
                    } else if next != Int.min {
                        child = next
                    } else {
                        child = children.count
                        children.append((Int.min, Int.min))
                        padding.append(padding[node] && bit == 1 && length - i <= 7)
                    }
                    if bit == 0 { children[node].zero = child } else { children[node].one = child }
                    node = child
                }
            }
            precondition(children.count == 256, "RFC 7541 Appendix B has 257 symbols, so 256 inner nodes")
        }

        func step(from state: Int, nibble: Int) -> UInt32 {
            var node = state
            var entry: UInt32 = 0
            for i in stride(from: 3, through: 0, by: -1) {
                let child = (nibble >> i) & 1 == 0 ? children[node].zero : children[node].one
                if child >= 0 {
                    node = child
                } else if child == -1 - 256 {
                    return HPACKHuffman.fails
                } else {
                    entry = UInt32(-1 - child) << 8 | HPACKHuffman.emits
                    node = 0
                }
            }
            return entry | UInt32(node) | (padding[node] ? HPACKHuffman.accepts : 0)
        }
    }

    /// Decodes `source` into `output` (room for `source.count * 8 / 5` octets: 5 bits is the shortest
    /// code); the octets written, or nil when the string holds EOS or ends in an invalid padding.
    static func decode(_ source: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>) -> Int? {
        states.withUnsafeBufferPointer { table in
            var state = 0
            var entry = HPACKHuffman.accepts
            var written = 0
            for byte in source {
                // The high nibble, then the low one (written out: a loop over both would cost an array).
                entry = table[state << 4 | Int(byte >> 4)]
                if entry & (HPACKHuffman.emits | HPACKHuffman.fails) != 0 {
                    guard entry & HPACKHuffman.fails == 0 else { return nil }
                    output[written] = UInt8(truncatingIfNeeded: entry >> 8)
                    written += 1
                }
                entry = table[Int(entry & 0xFF) << 4 | Int(byte & 0xF)]
                if entry & (HPACKHuffman.emits | HPACKHuffman.fails) != 0 {
                    guard entry & HPACKHuffman.fails == 0 else { return nil }
                    output[written] = UInt8(truncatingIfNeeded: entry >> 8)
                    written += 1
                }
                state = Int(entry & 0xFF)
            }
            return entry & HPACKHuffman.accepts != 0 ? written : nil
        }
    }
}
