/// A FIFO of received bytes for the incremental decoders: append at the end, consume from the front.
///
/// Consuming only moves a read index; the storage is compacted when the consumed prefix is at least
/// half of it, so feeding a long stream costs amortised O(1) per byte and memory stays proportional
/// to what is pending, not to what has passed.
struct ByteAccumulator: Sendable {
    private var storage: [UInt8] = []
    private var start = 0

    var count: Int { storage.count - start }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compactIfWorthIt()
        storage.append(contentsOf: bytes)
    }

    mutating func append(_ bytes: some Sequence<UInt8>) {
        compactIfWorthIt()
        storage.append(contentsOf: bytes)
    }

    func byte(at offset: Int) -> UInt8 { storage[start + offset] }

    func uint16BE(at offset: Int) -> UInt16 {
        UInt16(storage[start + offset]) << 8 | UInt16(storage[start + offset + 1])
    }

    func uint32BE(at offset: Int) -> UInt32 {
        let i = start + offset
        return UInt32(storage[i]) << 24 | UInt32(storage[i + 1]) << 16 | UInt32(storage[i + 2]) << 8
            | UInt32(storage[i + 3])
    }

    func bytes(at offset: Int, count: Int) -> [UInt8] {
        Array(storage[(start + offset)..<(start + offset + count)])
    }

    func withBytes<R>(at offset: Int, count: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { raw in
            try body(UnsafeRawBufferPointer(rebasing: raw[(start + offset)..<(start + offset + count)]))
        }
    }

    mutating func consume(_ n: Int) {
        precondition(n <= count)
        start += n
        if start == storage.count {
            storage.removeAll(keepingCapacity: true)
            start = 0
        }
    }

    private mutating func compactIfWorthIt() {
        if start > 0 && start >= storage.count / 2 {
            storage.removeFirst(start)
            start = 0
        }
    }
}
