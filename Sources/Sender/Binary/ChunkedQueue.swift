/// A first-in first-out queue kept in fixed-size chunks, for the grace window: it holds rate ×
/// `settle_grace` entries (~60 000 per shard at 100 000 jobs/s), so how it grows is what a binary `run`'s
/// peak memory follows.
///
/// A ring buffer (NIO's `CircularBuffer`, `Deque`) doubles its storage when full: up to twice the
/// entries' size for good, and three times while it copies them into the new storage. This grows and
/// shrinks a chunk at a time, copies nothing when it grows, and keeps one drained chunk for reuse, so
/// a steady flow allocates nothing: it holds at most `count` + two chunks of entries.
///
/// Removing from the front leaves the entry in its chunk until the whole chunk drains (what the entry
/// refers to lives that much longer: at most a chunk's worth).
struct ChunkedQueue<Element> {
    /// Every chunk but the last holds exactly `chunkSize` entries, the first of them from `head` on.
    private var chunks: [ContiguousArray<Element>] = []
    private var head = 0
    private var spare: ContiguousArray<Element>?
    private(set) var count = 0
    let chunkSize: Int

    /// `chunkSize` entries per chunk; by default as many as fill 64 KiB with the array's header, one
    /// of the allocator's size classes exactly (a chunk a few bytes over it would take 80 KiB).
    init(chunkSize: Int = ChunkedQueue.defaultChunkSize) {
        precondition(chunkSize > 0)
        self.chunkSize = chunkSize
    }

    static var defaultChunkSize: Int { max(1, (65_536 - 64) / MemoryLayout<Element>.stride) }

    var isEmpty: Bool { count == 0 }

    var first: Element? { isEmpty ? nil : chunks[0][head] }

    /// The entry `offset` places after the first.
    subscript(offset offset: Int) -> Element {
        precondition(offset >= 0 && offset < count, "offset out of range")
        let i = head + offset
        return chunks[i / chunkSize][i % chunkSize]
    }

    mutating func append(_ element: Element) {
        if chunks.isEmpty || chunks[chunks.count - 1].count == chunkSize {
            var chunk = spare ?? ContiguousArray()
            spare = nil
            chunk.reserveCapacity(chunkSize)
            chunks.append(chunk)
        }
        chunks[chunks.count - 1].append(element)
        count += 1
    }

    @discardableResult
    mutating func removeFirst() -> Element {
        precondition(!isEmpty, "removeFirst on an empty queue")
        let element = chunks[0][head]
        head += 1
        count -= 1
        if head == chunks[0].count {
            // The first chunk is drained (or it is the last and nothing is left): release its entries,
            // keep its storage for the next chunk.
            var drained = chunks.removeFirst()
            drained.removeAll(keepingCapacity: true)
            spare = drained
            head = 0
        }
        return element
    }

    /// Empties the queue, keeping one chunk's storage.
    mutating func removeAll() {
        if spare == nil, var chunk = chunks.first {
            chunks.removeAll()
            chunk.removeAll(keepingCapacity: true)
            spare = chunk
        } else {
            chunks.removeAll()
        }
        head = 0
        count = 0
    }
}
