/// The streams a client connection opened and has not seen closed, as one bit per stream id from the
/// oldest open one. The codec keeps state for a stream only while it is here, so frames on a stream
/// that was answered, reset or given up on (or that never was) cost nothing: a server repeating
/// HEADERS on old stream ids cannot make it hold an entry per id.
///
/// A client opens its streams in increasing id order (odd ids, RFC 9113 §5.1.1) and they are answered
/// in about that order, so the bits span from the oldest open stream to the newest, a few words in the
/// common case: opening or closing one is a shift and a mask, with no hashing on the per-request path.
/// The span is bounded by how long a stream can stay open (the connection resets one unanswered past
/// its deadline) times the rate: 10 s at 100,000 streams per second is 125 KB.
struct HTTP2OpenStreams {
    /// Bit `i` of `words[head + k]` stands for stream `base + 2 × (64 × k + i)`.
    private var words: [UInt64] = []
    private var head = 0
    private var base: UInt32 = 1
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Marks `id` open. Ids below the oldest open one, or of the other parity, are not client streams
    /// opened in order, and are ignored.
    mutating func open(_ id: UInt32) {
        if count == 0 {
            words.removeAll(keepingCapacity: true)
            head = 0
            base = id
        }
        guard id >= base, (id &- base) & 1 == 0 else { return }
        let bit = Int((id &- base) >> 1)
        let word = head + (bit >> 6)
        while words.count <= word { words.append(0) }
        let mask = UInt64(1) << UInt64(bit & 63)
        guard words[word] & mask == 0 else { return }
        words[word] |= mask
        count += 1
    }

    func contains(_ id: UInt32) -> Bool {
        guard let (word, mask) = position(of: id) else { return false }
        return words[word] & mask != 0
    }

    /// Marks `id` closed; returns whether it was open.
    @discardableResult
    mutating func close(_ id: UInt32) -> Bool {
        guard let (word, mask) = position(of: id), words[word] & mask != 0 else { return false }
        words[word] &= ~mask
        count -= 1
        trim()
        return true
    }

    /// Closes every stream above `id` (a GOAWAY's last stream id: the server will not process them).
    mutating func close(above id: UInt32) {
        guard count > 0 else { return }
        let first: Int  // the bit of the first id above `id`
        if id < base {
            first = 0
        } else {
            first = Int((id &- base) >> 1) + 1
        }
        var word = head + (first >> 6)
        var keep = first & 63  // low bits of the first word that stay
        while word < words.count {
            let mask: UInt64 = keep == 0 ? .max : ~((UInt64(1) << UInt64(keep)) - 1)
            count -= (words[word] & mask).nonzeroBitCount
            words[word] &= ~mask
            keep = 0
            word += 1
        }
        trim()
    }

    private func position(of id: UInt32) -> (word: Int, mask: UInt64)? {
        guard id >= base, (id &- base) & 1 == 0 else { return nil }
        let bit = Int((id &- base) >> 1)
        let word = head + (bit >> 6)
        guard word < words.count else { return nil }
        return (word, UInt64(1) << UInt64(bit & 63))
    }

    /// Drops the words before the oldest open stream (all of them when none is open), moving the
    /// storage down once half of it is dropped words.
    private mutating func trim() {
        if count == 0 {
            words.removeAll(keepingCapacity: true)
            head = 0
            return
        }
        while words[head] == 0 {
            head += 1
            base &+= 128
        }
        if head >= 64 && head * 2 >= words.count {
            words.removeFirst(head)
            head = 0
        }
    }

    /// Words held (for tests of the bound).
    var storedWords: Int { words.count - head }
}
