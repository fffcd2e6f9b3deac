import APNsProtocol
import NIOCore

/// The notifications written on one connection and not yet known to be accepted, in send order.
///
/// The binary interface never acknowledges success (Apple's "The Binary Interface and Notification Format": "If you send a notification that is
/// accepted by APNs, nothing is returned"), so a sender must keep what it wrote until it can tell:
/// - an error response for identifier X means everything before X was processed (accepted), X failed,
///   and everything after X "is discarded, and must be resent";
/// - status 10 (shutdown) names the last notification processed: it and everything before it are
///   accepted, everything after must be resent;
/// - no news for `settleAfter` after a write completed: accepted (the gateway answers errors within
///   milliseconds; the window is the price of a protocol without acknowledgements).
///
/// Identifiers are consecutive on a connection, so finding X is O(1): its distance from the oldest
/// entry, computed wrap-safely. Pure logic with no I/O: times are plain nanoseconds.
struct ReplayBuffer<Item> {
    struct Entry {
        var identifier: UInt32
        var item: Item
        var bytes: Int
        /// The write this frame went out in; nil while it sits in the unflushed batch.
        var flush: UInt64?
        /// When that write completed (handed to the kernel); settlement counts from here.
        var writtenAt: UInt64?
    }

    private(set) var entries = CircularBuffer<Entry>(initialCapacity: 1024)
    private(set) var bytes = 0

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    mutating func append(identifier: UInt32, item: Item, bytes: Int) {
        if let last = entries.last {
            precondition(identifier == last.identifier &+ 1, "identifiers on a connection are consecutive")
        }
        entries.append(Entry(identifier: identifier, item: item, bytes: bytes, flush: nil, writtenAt: nil))
        self.bytes += bytes
    }

    /// Marks the frames not yet flushed as part of write number `flush`.
    mutating func assignUnflushed(to flush: UInt64) {
        var i = entries.count - 1
        while i >= 0, entries[at: i].flush == nil {
            entries[at: i].flush = flush
            i -= 1
        }
    }

    /// Write number `flush` completed at `now`.
    mutating func writeCompleted(_ flush: UInt64, at now: UInt64) {
        // Writes complete in order; the frames of one write are contiguous. Walk back from the newest.
        var i = entries.count - 1
        while i >= 0 {
            if let f = entries[at: i].flush, f <= flush {
                if entries[at: i].writtenAt != nil { break }
                entries[at: i].writtenAt = now
            }
            i -= 1
        }
    }

    /// Removes and returns the oldest entries whose write completed at least `settleAfter` ago.
    mutating func settleExpired(now: UInt64, settleAfter: UInt64) -> [Entry] {
        var settled: [Entry] = []
        while let first = entries.first, let at = first.writtenAt, at + settleAfter <= now {
            settled.append(popFirst())
        }
        return settled
    }

    struct Resolution {
        /// Processed before the named one: accepted.
        var accepted: [Entry] = []
        /// The notification the response names, when it was still here (not for status 10: it is in `accepted`).
        var failed: Entry?
        /// Sent after the named one: discarded by the gateway, to be resent in this order.
        var discarded: [Entry] = []
        /// The named identifier had already left the buffer (settled by time, or never sent here):
        /// what followed it may have been reported accepted though the gateway discarded it.
        var sequenceUnknown = false
    }

    /// Applies an error response and empties the buffer: the gateway closes the connection after one.
    mutating func resolve(_ response: ErrorResponse) -> Resolution {
        var r = Resolution()
        defer { removeAll() }
        guard let first = entries.first else {
            r.sequenceUnknown = true
            return r
        }
        let offset = NotificationIdentifier.distance(from: first.identifier, to: response.identifier)
        guard offset >= 0, offset < entries.count else {
            // Named before the oldest entry (already settled) or after the newest (not ours):
            // nothing here is known processed; all of it must go again.
            r.sequenceUnknown = true
            r.discarded = Array(entries)
            return r
        }
        r.accepted = Array(entries.prefix(offset))
        let named = entries[at: offset]
        if response.status == .shutdown || response.status == .noErrors {
            // "The notification identifier in the error response indicates the last notification
            // that was successfully sent."
            r.accepted.append(named)
        } else {
            r.failed = named
        }
        r.discarded = Array(entries.dropFirst(offset + 1))
        return r
    }

    /// Empties the buffer (connection lost without an error response): returns the entries that were
    /// written (their fate is unknown: "ambiguous") and those that never left the process.
    mutating func takeAll() -> (written: [Entry], unwritten: [Entry]) {
        var written: [Entry] = []
        var unwritten: [Entry] = []
        for e in entries {
            if e.flush != nil { written.append(e) } else { unwritten.append(e) }
        }
        removeAll()
        return (written, unwritten)
    }

    /// Everything is accepted: a drain probe came back naming an identifier after all of these.
    mutating func acceptAll() -> [Entry] {
        let all = Array(entries)
        removeAll()
        return all
    }

    private mutating func popFirst() -> Entry {
        let e = entries.removeFirst()
        bytes -= e.bytes
        return e
    }

    private mutating func removeAll() {
        entries.removeAll(keepingCapacity: true)
        bytes = 0
    }
}

extension CircularBuffer {
    /// Element at an integer offset from the start (O(1)).
    subscript(at offset: Int) -> Element {
        get { self[index(startIndex, offsetBy: offset)] }
        set { self[index(startIndex, offsetBy: offset)] = newValue }
    }
}
