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
        /// When it was settled by time (its outcome reported accepted). A settled entry stays for the
        /// grace window: an error naming an older identifier proves it discarded, and it is resent.
        var settledAt: UInt64?
    }

    /// An entry without its item: plain values, so the scans of every write and settle tick (which
    /// touch these only) copy no references.
    struct Meta {
        var identifier: UInt32
        var bytes: Int
        var flush: UInt64?
        var writtenAt: UInt64?
        var settledAt: UInt64?
    }

    /// Written (or about to be) and not settled, then — as a prefix — the settled ones kept for the
    /// grace window: `[settled…][unsettled…]`, in identifier order. `items[i]` belongs to `meta[i]`.
    private var meta = CircularBuffer<Meta>(initialCapacity: 1024)
    private var items = CircularBuffer<Item>(initialCapacity: 1024)
    /// Bytes and count of the entries not settled: the window a connection may have unsettled.
    private(set) var bytes = 0
    private(set) var count = 0
    /// Bytes of every entry kept, the settled ones of the grace window included.
    private(set) var keptBytes = 0
    /// Labels (job ids) of the entries that left the grace window on this connection, newest last,
    /// at most `forgottenMemory`: what an error naming an identifier before the oldest kept one proves
    /// lost. `lastForgotten` is the identifier of the newest of them.
    private(set) var forgotten = CircularBuffer<String>(initialCapacity: 64)
    private(set) var forgottenTotal = 0
    private var lastForgotten: UInt32?
    var forgottenMemory = 4096

    /// Nothing kept, settled or not.
    var isEmpty: Bool { meta.isEmpty }
    var keptCount: Int { meta.count }
    var hasUnsettled: Bool { count > 0 }
    var settledCount: Int { meta.count - count }
    /// The identifier of the oldest entry kept.
    var oldestIdentifier: UInt32? { meta.first?.identifier }

    private func entry(_ i: Int) -> Entry {
        let m = meta[offset: i]
        return Entry(identifier: m.identifier, item: items[offset: i], bytes: m.bytes, flush: m.flush, writtenAt: m.writtenAt, settledAt: m.settledAt)
    }

    private func entries(_ range: Range<Int>) -> [Entry] {
        var out: [Entry] = []
        out.reserveCapacity(range.count)
        for i in range { out.append(entry(i)) }
        return out
    }

    mutating func append(identifier: UInt32, item: Item, bytes: Int) {
        if let last = meta.last {
            precondition(identifier == last.identifier &+ 1, "identifiers on a connection are consecutive")
        }
        meta.append(Meta(identifier: identifier, bytes: bytes, flush: nil, writtenAt: nil))
        items.append(item)
        self.bytes += bytes
        count += 1
        keptBytes += bytes
    }

    /// Marks the frames not yet flushed as part of write number `flush`.
    mutating func assignUnflushed(to flush: UInt64) {
        var i = meta.count - 1
        while i >= 0, meta[offset: i].flush == nil {
            meta[offset: i].flush = flush
            i -= 1
        }
    }

    /// Write number `flush` completed at `now`.
    mutating func writeCompleted(_ flush: UInt64, at now: UInt64) {
        // Writes complete in order; the frames of one write are contiguous. Walk back from the newest.
        var i = meta.count - 1
        while i >= 0 {
            let m = meta[offset: i]
            if let f = m.flush, f <= flush {
                if m.writtenAt != nil { break }
                meta[offset: i].writtenAt = now
            }
            i -= 1
        }
    }

    /// Settles the oldest unsettled entries whose write completed at least `settleAfter` ago, and
    /// returns them (their outcome is now "accepted"). They stay in the buffer, marked settled, until
    /// `forgetSettled` lets them go.
    mutating func settleExpired(now: UInt64, settleAfter: UInt64) -> [Entry] {
        let range = settleExpiredRange(now: now, settleAfter: settleAfter)
        return entries(range)
    }

    /// As `settleExpired(now:settleAfter:)`, handing each settled item and its bytes to `body` in order
    /// instead of building entries (the per-tick path: no array of copies).
    mutating func settleExpired(now: UInt64, settleAfter: UInt64, _ body: (Item, Int) -> Void) {
        for i in settleExpiredRange(now: now, settleAfter: settleAfter) { body(items[offset: i], meta[offset: i].bytes) }
    }

    private mutating func settleExpiredRange(now: UInt64, settleAfter: UInt64) -> Range<Int> {
        let first = settledCount
        var i = first
        while i < meta.count, let at = meta[offset: i].writtenAt, at + settleAfter <= now {
            meta[offset: i].settledAt = now
            bytes -= meta[offset: i].bytes
            count -= 1
            i += 1
        }
        return first..<i
    }

    /// Lets settled entries go once they have been settled for `grace`, and the oldest settled ones
    /// earlier while the settled ones take more than `maxBytes`. `label` names what is forgotten (job ids,
    /// for the log line of a later loss).
    mutating func forgetSettled(now: UInt64, grace: UInt64, maxBytes: Int, label: (Item) -> String) {
        while let first = meta.first, let at = first.settledAt, at + grace <= now || keptBytes - bytes > maxBytes {
            meta.removeFirst()
            let item = items.removeFirst()
            keptBytes -= first.bytes
            lastForgotten = first.identifier
            forgottenTotal += 1
            forgotten.append(label(item))
            if forgotten.count > forgottenMemory { forgotten.removeFirst() }
        }
    }

    struct Resolution {
        /// Processed before the named one and not yet reported: accepted.
        var accepted: [Entry] = []
        /// The notification the response names, when it was still here (not for status 10: it is
        /// processed). Its `settledAt` says whether it had been reported accepted already.
        var failed: Entry?
        /// Sent after the named one: discarded by the gateway, to be resent in this order. Those with a
        /// `settledAt` had been reported accepted: resent, but not reported again.
        var discarded: [Entry] = []
        /// The named identifier is not here: it left the grace window, or it was never sent here.
        var sequenceUnknown = false
        /// Notifications the response proves discarded although they had been settled and forgotten:
        /// nothing can resend them. `lostLabels` are the labels still remembered (the newest ones).
        var lostAfterSettle = 0
        var lostLabels: [String] = []
        /// The named notification was forgotten (settled, reported accepted) and the status says it
        /// failed: a refusal after settlement. `forgottenNamed` is its label when still remembered.
        var forgottenNamedFailed = false
        var forgottenNamed: String?
    }

    /// Applies an error response and empties the buffer: the gateway closes the connection after one.
    mutating func resolve(_ response: ErrorResponse) -> Resolution {
        var r = Resolution()
        defer { removeAll() }
        // The oldest identifier kept (or that would be): right after the newest forgotten one.
        let oldest: UInt32
        if let first = meta.first {
            oldest = first.identifier
        } else if let last = lastForgotten {
            oldest = last &+ 1
        } else {
            r.sequenceUnknown = true
            return r
        }
        let offset = NotificationIdentifier.distance(from: oldest, to: response.identifier)
        guard offset >= 0, offset < meta.count else {
            r.sequenceUnknown = true
            r.discarded = entries(0..<meta.count)
            // Named before the oldest kept, among those forgotten on this connection: every identifier
            // after it was discarded by the gateway, the forgotten ones between included.
            if offset < 0, -offset <= forgottenTotal {
                let k = -offset  // the named one is the k-th newest forgotten
                r.lostAfterSettle = k - 1
                let remembered = Array(forgotten.suffix(min(k, forgotten.count)))
                if remembered.count == k {
                    r.forgottenNamed = remembered.first
                    r.lostLabels = Array(remembered.dropFirst())
                } else {
                    r.lostLabels = remembered
                }
                r.forgottenNamedFailed = !(response.status == .shutdown || response.status == .noErrors)
            }
            return r
        }
        for i in 0..<offset where meta[offset: i].settledAt == nil { r.accepted.append(entry(i)) }
        let named = entry(offset)
        if response.status == .shutdown || response.status == .noErrors {
            // "The notification identifier in the error response indicates the last notification
            // that was successfully sent."
            if named.settledAt == nil { r.accepted.append(named) }
        } else {
            r.failed = named
        }
        r.discarded = entries((offset + 1)..<meta.count)
        return r
    }

    /// Empties the buffer (connection lost without an error response): returns the unsettled entries
    /// that were written (their fate is unknown: "ambiguous") and those that never left the process.
    /// Settled ones stay settled: nothing says they were not processed.
    mutating func takeAll() -> (written: [Entry], unwritten: [Entry]) {
        var written: [Entry] = []
        var unwritten: [Entry] = []
        for i in 0..<meta.count where meta[offset: i].settledAt == nil {
            let e = entry(i)
            if e.flush != nil { written.append(e) } else { unwritten.append(e) }
        }
        removeAll()
        return (written, unwritten)
    }

    /// Everything is accepted: a drain probe came back naming an identifier after all of these.
    /// Returns the ones not reported yet.
    mutating func acceptAll() -> [Entry] {
        var all: [Entry] = []
        for i in 0..<meta.count where meta[offset: i].settledAt == nil { all.append(entry(i)) }
        removeAll()
        return all
    }

    /// Forgets everything, including what was forgotten: the connection is over, and identifiers on
    /// the next one start after these.
    private mutating func removeAll() {
        meta.removeAll(keepingCapacity: true)
        items.removeAll(keepingCapacity: true)
        bytes = 0
        count = 0
        keptBytes = 0
        forgotten.removeAll(keepingCapacity: true)
        forgottenTotal = 0
        lastForgotten = nil
    }
}

