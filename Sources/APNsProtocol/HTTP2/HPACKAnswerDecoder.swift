// An HPACK (RFC 7541) decoder for the answers an APNs client reads: of each header block it keeps only
// `:status` and `apns-unique-id`, but it decodes every field — a block is refused whole when any part
// of it is malformed, and the dynamic table is kept exactly as the server's encoder keeps it, since
// later blocks name its entries by index. A general decoder (NIOHPACK's) builds a String for every
// name and value of every answer; this one builds none but the sandbox's `apns-unique-id`. Table
// entries are raw octets in one ring buffer, Huffman strings are decoded into one reusable scratch
// buffer, and an indexed field is an index look-up, whatever its length.

/// What a client needs of an answer's header block.
public struct HPACKAnswer: Equatable, Sendable {
    /// The first `:status` field's value, 0 when there is none or it is not three digits (RFC 9113
    /// §8.3.2: "a three-digit integer code").
    public var status: Int
    /// The first `apns-unique-id` field's value when it is 36 octets of UTF-8 (a UUID's text), nil
    /// otherwise, so a server cannot make it grow a log line or an outcome. Apple sends it in the
    /// development (sandbox) environment only: "apns-unique-id — An identifier that is only available
    /// in the Development environment. Use this to query Delivery Log information for the
    /// corresponding notification in Push Notifications Console."
    public var uniqueID: String?

    public init(status: Int, uniqueID: String? = nil) {
        self.status = status
        self.uniqueID = uniqueID
    }
}

/// A malformed header block: a COMPRESSION_ERROR for the connection (RFC 9113 §4.3).
public struct HPACKDecodingError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
    init(_ message: String) { self.message = message }
}

public struct HPACKAnswerDecoder: Sendable {
    /// SETTINGS_HEADER_TABLE_SIZE's initial value (RFC 9113 §6.5.2), which the client never changes.
    public static let defaultMaxTableSize = 4096
    /// NIOHPACK's default header list limit, kept so that what was refused before still is.
    public static let defaultMaxHeaderListSize = 1 << 14

    /// The largest table the server's encoder may choose: our SETTINGS_HEADER_TABLE_SIZE (§4.2).
    public let maxTableSize: Int
    /// The largest header list (octets of names and values + 32 per field, RFC 9113 §6.5.2) accepted.
    public let maxHeaderListSize: Int
    /// The table's current maximum size, as the encoder's last size update set it (§4.2, §6.3).
    public private(set) var tableCapacity: Int
    /// The table's size: per entry, its name's and value's octets + 32 (§4.1).
    public private(set) var tableSize = 0

    /// Every entry's name and value octets, back to back in insertion order, wrapping at the end. The
    /// live octets never exceed `maxTableSize` (each entry also costs 32), so one ring of that size
    /// holds them all and a new entry only ever overwrites evicted ones.
    private var ring: [UInt8]
    /// Where the next entry's octets go in `ring`.
    private var ringEnd = 0
    /// The entries, oldest first from `oldest`, circular; at most `maxTableSize / 32` of them.
    private var entries: [Entry]
    private var oldest = 0
    public private(set) var entryCount = 0
    /// Decoded strings of the field being read: its name (when it is literal or will be indexed) then
    /// its value. Its count only grows; `scratchCount` is what is in use.
    private var scratch: [UInt8] = Array(repeating: 0, count: 256)

    private struct Entry {
        var start: Int
        var nameCount: Int
        var valueCount: Int
        var name: Name
    }

    /// The names the client reads, recognised once — when an entry is added or a literal name read.
    private enum Name: UInt8 {
        case other, status, uniqueID
    }

    public init(maxTableSize: Int = defaultMaxTableSize, maxHeaderListSize: Int = defaultMaxHeaderListSize) {
        precondition(maxTableSize >= 0 && maxHeaderListSize > 0)
        self.maxTableSize = maxTableSize
        self.maxHeaderListSize = maxHeaderListSize
        tableCapacity = maxTableSize
        ring = Array(repeating: 0, count: max(maxTableSize, 1))
        let empty = Entry(start: 0, nameCount: 0, valueCount: 0, name: .other)
        entries = Array(repeating: empty, count: max(maxTableSize / 32, 1))
    }

    /// The dynamic table, newest first (index 62 first, §2.3.3): for tests and the fuzzer.
    public var dynamicTable: [(name: [UInt8], value: [UInt8])] {
        (0..<entryCount).map { i in
            let entry = entries[slot(ofDynamic: i)]
            return (octets(from: entry.start, count: entry.nameCount), octets(from: entry.start + entry.nameCount, count: entry.valueCount))
        }
    }

    // MARK: decoding a block

    /// What is known of the block being decoded, field by field.
    private struct BlockState {
        var answer = HPACKAnswer(status: 0)
        var statusSeen = false
        var uniqueIDSeen = false
        var fields = 0
        var sizeUpdates = 0
        var listSize = 0
    }

    /// Decodes one complete header block (HEADERS + CONTINUATION payloads, without padding or priority).
    /// After an error the table holds the changes of the fields before it (each is whole, so the table
    /// stays consistent), but no longer the server's: the connection must end (RFC 9113 §4.3: a
    /// decoding error is a connection error of type COMPRESSION_ERROR).
    public mutating func decode(_ block: UnsafeRawBufferPointer) throws(HPACKDecodingError) -> HPACKAnswer {
        var reader = Reader(bytes: block)
        var state = BlockState()
        while reader.offset < block.count {
            let first = block[reader.offset]
            if first & 0x80 != 0 {
                // §6.1: indexed header field, a 7-bit prefix index.
                try indexedField(index: reader.integer(prefix: 7), into: &state)
            } else if first & 0xC0 == 0x40 {
                // §6.2.1: literal with incremental indexing, a 6-bit prefix name index (0: a literal name).
                try literalField(&reader, prefix: 6, indexing: true, into: &state)
            } else if first & 0xE0 == 0x20 {
                // §6.3: dynamic table size update, a 5-bit prefix.
                try sizeUpdate(reader.integer(prefix: 5), into: &state)
            } else {
                // §6.2.2 (0000) and §6.2.3 (0001, never indexed): literal without indexing, a 4-bit prefix.
                try literalField(&reader, prefix: 4, indexing: false, into: &state)
            }
        }
        return state.answer
    }

    /// §6.3: the new maximum must not exceed the protocol's (§4.2: "the chosen size MUST stay lower than
    /// or equal to the maximum set by the protocol"); it "MUST occur at the beginning of the first
    /// header block following the change", and a change between blocks is signalled by at most two
    /// (§4.2: the smallest, then the final).
    private mutating func sizeUpdate(_ size: Int, into state: inout BlockState) throws(HPACKDecodingError) {
        guard state.fields == 0 else { throw HPACKDecodingError("dynamic table size update after a header field") }
        state.sizeUpdates += 1
        guard state.sizeUpdates <= 2 else { throw HPACKDecodingError("more than two dynamic table size updates") }
        guard size <= maxTableSize else {
            throw HPACKDecodingError("dynamic table size update to \(size), above the maximum \(maxTableSize)")
        }
        tableCapacity = size
        // §4.3: "reducing the maximum size of the dynamic table can cause entries to be evicted".
        while tableSize > tableCapacity { evictOldest() }
    }

    /// §6.1: a whole field from the static or the dynamic table.
    private mutating func indexedField(index: Int, into state: inout BlockState) throws(HPACKDecodingError) {
        guard index != 0 else { throw HPACKDecodingError("header field index 0") }  // §6.1
        if index <= HPACKStaticTable.count {
            try addToList(HPACKStaticTable.nameLengths[index], HPACKStaticTable.valueLengths[index], into: &state)
            if HPACKStaticTable.statusRange.contains(index), !state.statusSeen {
                state.statusSeen = true
                state.answer.status = HPACKStaticTable.statusValues[index - HPACKStaticTable.statusRange.lowerBound]
            }
            return
        }
        let entry = try dynamicEntry(index)
        try addToList(entry.nameCount, entry.valueCount, into: &state)
        guard entry.name != .other else { return }
        let value = octets(from: entry.start + entry.nameCount, count: entry.valueCount)
        value.withUnsafeBytes { take(entry.name, value: $0, into: &state) }
    }

    /// §6.2: a literal value, with a name from a table or literal; added to the table when `indexing`
    /// (§6.2.1). Without indexing (§6.2.2) and never indexed (§6.2.3) are the same to a decoder that
    /// forwards nothing.
    private mutating func literalField(
        _ reader: inout Reader, prefix: Int, indexing: Bool, into state: inout BlockState
    ) throws(HPACKDecodingError) {
        let index = try reader.integer(prefix: prefix)
        var scratchCount = 0
        let name: Name
        let nameCount: Int
        if index == 0 {
            scratchCount = try readString(&reader, at: 0)
            nameCount = scratchCount
            // Not forbidden by RFC 7541, but an empty name is not a field name (RFC 9110 §5.1); NIOHPACK
            // refuses it too.
            guard nameCount > 0 else { throw HPACKDecodingError("empty literal header name") }
            name = scratch.withUnsafeBytes { Self.recognise(UnsafeRawBufferPointer(rebasing: $0[0..<nameCount])) }
        } else {
            (name, nameCount) = try indexedName(index, copying: indexing)
            scratchCount = indexing ? nameCount : 0
        }
        let valueCount = try readString(&reader, at: scratchCount)
        try addToList(nameCount, valueCount, into: &state)
        let valueStart = scratchCount
        if name != .other {
            scratch.withUnsafeBytes {
                take(name, value: UnsafeRawBufferPointer(rebasing: $0[valueStart..<valueStart + valueCount]), into: &state)
            }
        }
        if indexing { insert(nameCount: nameCount, valueCount: valueCount, name: name) }
    }

    /// The name of the field at `index`; copied to the start of `scratch` when it will be added to the
    /// table. (Copied before anything is evicted: §4.4, "a new entry can reference the name of an entry
    /// in the dynamic table that will be evicted when adding this new entry".)
    private mutating func indexedName(_ index: Int, copying: Bool) throws(HPACKDecodingError) -> (Name, Int) {
        if index <= HPACKStaticTable.count {
            let text = HPACKStaticTable.entries[index].name.utf8
            if copying {
                reserveScratch(text.count)
                for (i, octet) in text.enumerated() { scratch[i] = octet }
            }
            return (HPACKStaticTable.statusRange.contains(index) ? .status : .other, text.count)
        }
        let entry = try dynamicEntry(index)
        if copying {
            reserveScratch(entry.nameCount)
            for i in 0..<entry.nameCount { scratch[i] = ring[(entry.start + i) % ring.count] }
        }
        return (entry.name, entry.nameCount)
    }

    /// The header list size so far (RFC 9113 §6.5.2), bounded as NIOHPACK's decoder bounds it.
    private func addToList(_ nameCount: Int, _ valueCount: Int, into state: inout BlockState) throws(HPACKDecodingError) {
        state.fields += 1
        state.listSize += nameCount + valueCount + 32
        guard state.listSize <= maxHeaderListSize else {
            throw HPACKDecodingError("header list longer than \(maxHeaderListSize) octets")
        }
    }

    /// The first `:status` and the first `apns-unique-id` are kept, as `HPACKHeaders.first(name:)` did.
    private func take(_ name: Name, value: UnsafeRawBufferPointer, into state: inout BlockState) {
        switch name {
        case .status where !state.statusSeen:
            state.statusSeen = true
            state.answer.status = Self.status(value)
        case .uniqueID where !state.uniqueIDSeen:
            state.uniqueIDSeen = true
            guard value.count == APNsID.textCount else { return }
            // Invalid UTF-8 is repaired (U+FFFD, three octets), which changes the length: not a UUID then.
            let text = String(decoding: value, as: UTF8.self)
            state.answer.uniqueID = text.utf8.count == APNsID.textCount ? text : nil
        default:
            break
        }
    }

    static func status(_ value: UnsafeRawBufferPointer) -> Int {
        guard value.count == 3 else { return 0 }
        var status = 0
        for octet in value {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(octet) else { return 0 }
            status = status * 10 + Int(octet - UInt8(ascii: "0"))
        }
        return status
    }

    /// `:status` and `apns-unique-id`, in any letter case (`HPACKHeaders.first(name:)` ignored case).
    private static func recognise(_ name: UnsafeRawBufferPointer) -> Name {
        switch name.count {
        case 7: return equalsLowercased(name, ":status") ? .status : .other
        case 14: return equalsLowercased(name, "apns-unique-id") ? .uniqueID : .other
        default: return .other
        }
    }

    private static func equalsLowercased(_ octets: UnsafeRawBufferPointer, _ lowercase: StaticString) -> Bool {
        let expected = UnsafeRawBufferPointer(start: lowercase.utf8Start, count: lowercase.utf8CodeUnitCount)
        for (octet, wanted) in zip(octets, expected) {
            let lowered = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(octet) ? octet | 0x20 : octet
            guard lowered == wanted else { return false }
        }
        return true
    }
}

// MARK: strings and integers

extension HPACKAnswerDecoder {
    /// The octets of a block and how far they are read.
    struct Reader {
        var bytes: UnsafeRawBufferPointer
        var offset = 0

        /// §5.1: an integer with an N-bit prefix, then 7 bits per octet while the top bit is set. One of
        /// more than 5 continuation octets (above 2^35) exceeds any length or index this decoder can
        /// accept: refused ("Integer encodings that exceed implementation limits … MUST be treated as
        /// decoding errors", §5.1).
        mutating func integer(prefix: Int) throws(HPACKDecodingError) -> Int {
            let mask = (1 << prefix) - 1
            var value = Int(bytes[offset]) & mask
            offset += 1
            guard value == mask else { return value }
            var shift = 0
            while true {
                guard offset < bytes.count else { throw HPACKDecodingError("integer cut off by the end of the block") }
                let octet = bytes[offset]
                offset += 1
                value += Int(octet & 0x7F) << shift
                if octet & 0x80 == 0 { return value }
                shift += 7
                guard shift <= 28 else { throw HPACKDecodingError("integer longer than 6 octets") }
            }
        }
    }

    /// §5.2: a string literal (H flag, a 7-bit prefix length, the octets, Huffman-coded when H is set),
    /// decoded into `scratch` from `start`; returns its decoded length.
    private mutating func readString(_ reader: inout Reader, at start: Int) throws(HPACKDecodingError) -> Int {
        guard reader.offset < reader.bytes.count else { throw HPACKDecodingError("string literal missing at the end of the block") }
        let huffman = reader.bytes[reader.offset] & 0x80 != 0
        let length = try reader.integer(prefix: 7)
        guard length <= reader.bytes.count - reader.offset else {
            throw HPACKDecodingError("string literal of \(length) octets, \(reader.bytes.count - reader.offset) left in the block")
        }
        let source = UnsafeRawBufferPointer(rebasing: reader.bytes[reader.offset..<reader.offset + length])
        reader.offset += length
        // The shortest Huffman code is 5 bits: at most 8/5 octets per octet.
        reserveScratch(start + (huffman ? length * 8 / 5 + 1 : length))
        let decoded = scratch.withUnsafeMutableBufferPointer { out -> Int? in
            guard huffman else {
                if length > 0 { UnsafeMutableRawPointer(out.baseAddress! + start).copyMemory(from: source.baseAddress!, byteCount: length) }
                return length
            }
            return HPACKHuffman.decode(source, into: out.baseAddress! + start)
        }
        guard let decoded else { throw HPACKDecodingError("invalid Huffman code (EOS, or a padding that is not up to 7 one bits)") }
        return decoded
    }

    private mutating func reserveScratch(_ count: Int) {
        if scratch.count < count { scratch.append(contentsOf: repeatElement(0, count: max(count, 2 * scratch.count) - scratch.count)) }
    }
}

// MARK: the dynamic table (§2.3.2, §4)

extension HPACKAnswerDecoder {
    /// The position in `entries` of the dynamic entry `i` places from the newest.
    private func slot(ofDynamic i: Int) -> Int {
        (oldest + entryCount - 1 - i) % entries.count
    }

    /// The entry at HPACK index `index` (> 61); beyond the table it is an error (§2.3.3: "Indices
    /// strictly greater than the sum of the lengths of both tables MUST be treated as a decoding error").
    private func dynamicEntry(_ index: Int) throws(HPACKDecodingError) -> Entry {
        let i = index - HPACKStaticTable.count - 1
        guard i < entryCount else {
            throw HPACKDecodingError("header field index \(index) beyond the table (\(HPACKStaticTable.count) + \(entryCount) entries)")
        }
        return entries[slot(ofDynamic: i)]
    }

    private func octets(from start: Int, count: Int) -> [UInt8] {
        (0..<count).map { ring[(start + $0) % ring.count] }
    }

    /// §4.4: the new entry (its name and value in `scratch`) goes first; the oldest are evicted until it
    /// fits. One larger than the whole table empties it and is not added.
    private mutating func insert(nameCount: Int, valueCount: Int, name: Name) {
        let size = nameCount + valueCount + 32
        while entryCount > 0 && tableSize + size > tableCapacity { evictOldest() }
        guard size <= tableCapacity else { return }
        let octetCount = nameCount + valueCount
        let start = ringEnd
        ring.withUnsafeMutableBufferPointer { ring in
            scratch.withUnsafeBufferPointer { source in
                // At most two runs: up to the ring's end, then from its start.
                let first = min(octetCount, ring.count - start)
                if first > 0 { (ring.baseAddress! + start).update(from: source.baseAddress!, count: first) }
                if octetCount > first { ring.baseAddress!.update(from: source.baseAddress! + first, count: octetCount - first) }
            }
        }
        ringEnd = (start + octetCount) % ring.count
        entries[(oldest + entryCount) % entries.count] = Entry(start: start, nameCount: nameCount, valueCount: valueCount, name: name)
        entryCount += 1
        tableSize += size
    }

    /// §4.4: "entries are evicted from the end of the dynamic table" — the oldest.
    private mutating func evictOldest() {
        let entry = entries[oldest]
        tableSize -= entry.nameCount + entry.valueCount + 32
        oldest = (oldest + 1) % entries.count
        entryCount -= 1
        if entryCount == 0 {
            oldest = 0
            ringEnd = 0
        }
    }
}
