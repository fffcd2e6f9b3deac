/// Settled-offset tracking for one partition (pure Swift, no Kafka).
///
/// The consumer reports offsets as they are *received* (increasing, possibly with gaps); the pipeline
/// *settles* them in any order. `commitPosition` is the first offset received and not yet settled, or
/// one past the last received offset when nothing is pending: the offset to commit (Kafka's convention,
/// a committed offset is the next one to read). Offsets never received (gaps: compaction, transaction
/// markers, data lost upstream) never hold the position back.
///
/// Memory: one bit per offset between `commitPosition` and the last received offset (words drop off
/// the front as the position advances; the window restarts whenever nothing is pending, so a jump over a
/// gap costs nothing). 1M messages behind one stuck message cost 125 KiB.
public struct PartitionOffsetTracker: Sendable, Equatable {
    /// What a received offset says about the stream.
    public enum Reception: Sendable, Equatable {
        /// The expected next offset (or the first one, when no position was known).
        case inOrder
        /// Offsets `expected ..< offset` were skipped: data lost (or compacted) upstream.
        case gap(expected: Int64)
        /// An offset at or below one already received: the stream went back (offset reset or seek).
        /// Not tracked: settling it is a no-op.
        case backwards(expected: Int64)
    }

    /// One past the highest offset received (the next expected), nil until known.
    public private(set) var nextExpected: Int64?
    /// The offset to commit, nil until known.
    public private(set) var commitPosition: Int64?
    /// Received and not yet settled.
    public private(set) var unsettledCount = 0

    /// Offset of bit 0 of `words[0]`; a multiple of 64.
    private var windowStart: Int64 = 0
    /// Bit set = received and not settled.
    private var words: [UInt64] = []

    /// - Parameter committed: the group's committed offset for the partition, if any: the first offset
    ///   expected, so a first message above it is reported as a gap.
    public init(committed: Int64? = nil) {
        if let committed, committed >= 0 {
            nextExpected = committed
            commitPosition = committed
            windowStart = committed & ~63
        }
    }

    @discardableResult
    public mutating func received(_ offset: Int64) -> Reception {
        precondition(offset >= 0, "offsets are non-negative")
        let reception: Reception
        if let expected = nextExpected {
            if offset < expected { return .backwards(expected: expected) }
            reception = offset == expected ? .inOrder : .gap(expected: expected)
        } else {
            reception = .inOrder
        }
        if unsettledCount == 0 {
            // Nothing pending: the position is this offset, and the window can restart here.
            words.removeAll(keepingCapacity: true)
            windowStart = offset & ~63
            commitPosition = offset
        }
        let bit = offset - windowStart
        let index = Int(bit >> 6)
        if index >= words.count {
            words.append(contentsOf: repeatElement(0, count: index - words.count + 1))
        }
        words[index] |= 1 << UInt64(bit & 63)
        unsettledCount += 1
        nextExpected = offset + 1
        return reception
    }

    /// Marks `offset` settled. Returns false (and changes nothing) when it is not a received, unsettled
    /// offset of this tracker: already settled, never received, or below the position.
    @discardableResult
    public mutating func settle(_ offset: Int64) -> Bool {
        guard let position = commitPosition, let next = nextExpected, offset >= position, offset < next else {
            return false
        }
        let bit = offset - windowStart
        let index = Int(bit >> 6)
        let mask = UInt64(1) << UInt64(bit & 63)
        guard index < words.count, words[index] & mask != 0 else { return false }
        words[index] &= ~mask
        unsettledCount -= 1
        if offset == position { advance() }
        return true
    }

    /// Moves the position to the first pending offset (bits below the position are always clear).
    private mutating func advance() {
        guard unsettledCount > 0 else {
            commitPosition = nextExpected
            words.removeAll(keepingCapacity: true)
            windowStart = nextExpected! & ~63
            return
        }
        var index = Int((commitPosition! - windowStart) >> 6)
        while words[index] == 0 { index += 1 }
        commitPosition = windowStart + Int64(index) * 64 + Int64(words[index].trailingZeroBitCount)
        // Drop leading empty words now and then (amortised O(1) per offset).
        if index >= 64 && index * 2 >= words.count {
            words.removeFirst(index)
            windowStart += Int64(index) * 64
        }
    }

    /// Bytes held by the bitmap (for tests and diagnostics).
    public var bitmapBytes: Int { words.count * 8 }
}

/// Settled-offset tracking for the partitions a consumer owns. Partitions are tracked from assignment
/// to revocation; settling an offset of a partition not tracked (revoked since) returns false.
public struct OffsetTracker: Sendable {
    /// Each tracked partition's place in `trackers`.
    private var places: [TopicPartition: Int] = [:]
    private var trackers: [PartitionOffsetTracker] = []
    /// The partition last received or settled, and its place. Messages come and settle in runs of one
    /// partition, so most calls compare a topic and a number instead of hashing a topic's name.
    private var recent: (partition: TopicPartition, place: Int)?

    public init() {}

    /// Starts tracking `partition` (on assignment), from the group's committed offset if known.
    public mutating func startTracking(_ partition: TopicPartition, committed: Int64?) {
        let tracker = PartitionOffsetTracker(committed: committed)
        if let place = places[partition] {
            trackers[place] = tracker
        } else {
            places[partition] = trackers.count
            trackers.append(tracker)
        }
    }

    /// Stops tracking (on revocation) and returns the final commit position, if known.
    @discardableResult
    public mutating func stopTracking(_ partition: TopicPartition) -> Int64? {
        guard let place = places.removeValue(forKey: partition) else { return nil }
        recent = nil
        let position = trackers[place].commitPosition
        // The last partition takes the freed place.
        let last = trackers.count - 1
        if place != last, let moved = places.first(where: { $0.value == last })?.key {
            trackers[place] = trackers[last]
            places[moved] = place
        }
        trackers.removeLast()
        return position
    }

    public func isTracking(_ partition: TopicPartition) -> Bool { places[partition] != nil }

    public var trackedPartitions: [TopicPartition] { Array(places.keys) }

    /// Records a received offset; nil when the partition is not tracked (the message must be dropped).
    public mutating func received(_ ref: MessageRef) -> PartitionOffsetTracker.Reception? {
        guard let place = place(ref) else { return nil }
        return trackers[place].received(ref.offset)
    }

    @discardableResult
    public mutating func settle(_ ref: MessageRef) -> Bool {
        guard let place = place(ref) else { return false }
        return trackers[place].settle(ref.offset)
    }

    private mutating func place(_ ref: MessageRef) -> Int? {
        if let recent, recent.partition.partition == ref.partition, recent.partition.topic == ref.topic { return recent.place }
        let partition = ref.topicPartition
        guard let place = places[partition] else { return nil }
        recent = (partition, place)
        return place
    }

    public func commitPosition(_ partition: TopicPartition) -> Int64? { tracker(partition)?.commitPosition }

    public func tracker(_ partition: TopicPartition) -> PartitionOffsetTracker? { places[partition].map { trackers[$0] } }

    /// Commit positions of every tracked partition whose position is known.
    public var commitPositions: [TopicPartition: Int64] {
        places.compactMapValues { trackers[$0].commitPosition }
    }
}
