import APNsProtocol
import NIOCore

/// An item a `ReplayBuffer` keeps, and the smaller form it keeps of it once it is settled.
///
/// A settled item's outcome went out; all that may still be asked of it in the grace window is to be
/// written again (an error proved it discarded) or named in a log line. The grace window holds rate ×
/// `settle_grace` of them per shard (~120 000 at 55 000/s and 2.25 s), so what each one keeps is what
/// sets a binary `run`'s memory: the buffer keeps only `settled` of it.
protocol ReplayItem {
    associatedtype Settled
    var settled: Settled { get }
}

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
/// Identifiers are consecutive on a connection, so they are not stored: an entry's is the oldest kept
/// one's plus its position, and finding X is O(1), its distance from the oldest, computed wrap-safely.
/// Pure logic with no I/O: times are the event loop's (`NIODeadline`, `TimeAmount`), passed in.
struct ReplayBuffer<Item: ReplayItem> {
    typealias Settled = Item.Settled

    /// An entry not settled yet.
    struct Entry {
        var identifier: UInt32
        var item: Item
        var bytes: Int
        /// The write this frame went out in; nil while it sits in the unflushed batch.
        var flush: UInt64?
        /// When that write completed (handed to the kernel); settlement counts from here.
        var writtenAt: NIODeadline?
    }

    /// An unsettled entry without its item: plain values, so the scans of every write and settle tick
    /// (which touch these only) copy no references.
    private struct Meta {
        var bytes: Int
        var flush: UInt64?
        var writtenAt: NIODeadline?
    }

    /// A settled entry of the grace window: its outcome was reported accepted when it settled; an error
    /// naming an older identifier proves it discarded, and it is resent.
    private struct SettledEntry {
        var item: Settled
        var bytes: UInt32
    }

    /// When settled entries settled: the entries of one settle tick share its time, so the window keeps
    /// one of these per tick (`count` entries from the oldest on) rather than a time per entry.
    private struct SettleRun {
        var at: NIODeadline
        var count: Int
    }

    /// Kept in identifier order: the settled ones of the grace window, then those written (or about to
    /// be) and not settled. `items[i]` belongs to `meta[i]`.
    private var settled = ChunkedQueue<SettledEntry>()
    private var settleRuns = CircularBuffer<SettleRun>(initialCapacity: 64)
    private var meta = CircularBuffer<Meta>(initialCapacity: 1024)
    private var items = CircularBuffer<Item>(initialCapacity: 1024)
    /// The identifier of the oldest entry kept (meaningless while nothing is).
    private var oldest: UInt32 = 0
    /// Bytes and count of the entries not settled: the window a connection may have unsettled.
    private(set) var bytes = 0
    var count: Int { meta.count }
    /// Bytes of every entry kept, the settled ones of the grace window included.
    private(set) var keptBytes = 0
    /// The entries that left the grace window on this connection, newest last, at most
    /// `forgottenMemory`: what names the notifications an error naming an identifier before the oldest
    /// kept one proves lost. `lastForgotten` is the identifier of the newest of them.
    private(set) var forgotten = CircularBuffer<Settled>(initialCapacity: 64)
    private(set) var forgottenTotal = 0
    private var lastForgotten: UInt32?
    var forgottenMemory = 4096

    /// Nothing kept, settled or not.
    var isEmpty: Bool { settled.isEmpty && meta.isEmpty }
    var keptCount: Int { settled.count + meta.count }
    var hasUnsettled: Bool { !meta.isEmpty }
    var settledCount: Int { settled.count }
    /// The identifier of the oldest entry kept.
    var oldestIdentifier: UInt32? { isEmpty ? nil : oldest }

    /// The unsettled entry at `i` (0: the oldest unsettled).
    private func entry(_ i: Int) -> Entry {
        let m = meta[offset: i]
        return Entry(
            identifier: oldest &+ UInt32(truncatingIfNeeded: settled.count + i), item: items[offset: i], bytes: m.bytes,
            flush: m.flush, writtenAt: m.writtenAt)
    }

    private func entries(_ range: Range<Int>) -> [Entry] {
        var out: [Entry] = []
        out.reserveCapacity(range.count)
        for i in range { out.append(entry(i)) }
        return out
    }

    private func settledItems(from start: Int) -> [Settled] {
        var out: [Settled] = []
        out.reserveCapacity(max(0, settled.count - start))
        for i in start..<settled.count { out.append(settled[offset: i].item) }
        return out
    }

    mutating func append(identifier: UInt32, item: Item, bytes: Int) {
        if isEmpty {
            oldest = identifier
        } else {
            precondition(identifier == oldest &+ UInt32(truncatingIfNeeded: keptCount), "identifiers on a connection are consecutive")
        }
        meta.append(Meta(bytes: bytes, flush: nil, writtenAt: nil))
        items.append(item)
        self.bytes += bytes
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
    mutating func writeCompleted(_ flush: UInt64, at now: NIODeadline) {
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
    /// returns them (their outcome is now "accepted"). They stay in the buffer, as `Item.settled`,
    /// until `forgetSettled` lets them go.
    mutating func settleExpired(now: NIODeadline, settleAfter: TimeAmount) -> [Entry] {
        var out: [Entry] = []
        settleExpired(now: now, settleAfter: settleAfter) { entry in out.append(entry) }
        return out
    }

    /// As `settleExpired(now:settleAfter:)`, handing each settled entry to `body` in order instead of
    /// building an array (the per-tick path).
    mutating func settleExpired(now: NIODeadline, settleAfter: TimeAmount, _ body: (Entry) -> Void) {
        while let m = meta.first, let at = m.writtenAt, at + settleAfter <= now {
            let identifier = oldest &+ UInt32(truncatingIfNeeded: settled.count)
            meta.removeFirst()
            // Moved out, not copied: a settled notification's object is cold by now (written a settle
            // window ago), and each copy of it is a retain and a release on that cold line.
            let item = items.removeFirst()
            bytes -= m.bytes
            settled.append(SettledEntry(item: item.settled, bytes: UInt32(m.bytes)))
            if let last = settleRuns.last, last.at == now {
                settleRuns[settleRuns.index(before: settleRuns.endIndex)].count += 1
            } else {
                settleRuns.append(SettleRun(at: now, count: 1))
            }
            body(Entry(identifier: identifier, item: item, bytes: m.bytes, flush: m.flush, writtenAt: m.writtenAt))
        }
    }

    /// Lets settled entries go once they have been settled for `grace`, and the oldest settled ones
    /// earlier while the settled ones take more than `maxBytes`. The newest `forgottenMemory` of them
    /// are remembered, to name what a later error proves lost.
    mutating func forgetSettled(now: NIODeadline, grace: TimeAmount, maxBytes: Int) {
        while let run = settleRuns.first, run.at + grace <= now || keptBytes - bytes > maxBytes {
            let first = settled.removeFirst()
            if run.count == 1 { settleRuns.removeFirst() } else { settleRuns[settleRuns.startIndex].count -= 1 }
            keptBytes -= Int(first.bytes)
            lastForgotten = oldest
            oldest &+= 1
            forgottenTotal += 1
            // Make room first: a ring buffer that reached forgottenMemory + 1 would double its storage.
            if forgottenMemory > 0 {
                if forgotten.count >= forgottenMemory { forgotten.removeFirst() }
                forgotten.append(first.item)
            }
        }
    }

    struct Resolution {
        /// Processed before the named one and not yet reported: accepted.
        var accepted: [Entry] = []
        /// The notification the response names, when it was still here and not settled (not for status
        /// 10: it is processed).
        var failed: Entry?
        /// The same when it was settled (reported accepted already).
        var failedSettled: Settled?
        /// Sent after the named one: discarded by the gateway, to be resent in this order: first those
        /// settled (reported accepted already: resent, but not reported again), then the others.
        var discardedSettled: [Settled] = []
        var discarded: [Entry] = []
        /// The named identifier is not here: it left the grace window, or it was never sent here.
        var sequenceUnknown = false
        /// Notifications the response proves discarded although they had been settled and forgotten:
        /// nothing can resend them. `lost` are those still remembered (the newest ones).
        var lostAfterSettle = 0
        var lost: [Settled] = []
        /// The named notification was forgotten (settled, reported accepted) and the status says it
        /// failed: a refusal after settlement. `forgottenNamed` is it when still remembered.
        var forgottenNamedFailed = false
        var forgottenNamed: Settled?
    }

    /// Applies an error response and empties the buffer: the gateway closes the connection after one.
    mutating func resolve(_ response: ErrorResponse) -> Resolution {
        var r = Resolution()
        defer { removeAll() }
        // The oldest identifier kept (or that would be): right after the newest forgotten one.
        let oldest: UInt32
        if !isEmpty {
            oldest = self.oldest
        } else if let last = lastForgotten {
            oldest = last &+ 1
        } else {
            r.sequenceUnknown = true
            return r
        }
        let offset = NotificationIdentifier.distance(from: oldest, to: response.identifier)
        let processed = response.status == .shutdown || response.status == .noErrors
        guard offset >= 0, offset < keptCount else {
            r.sequenceUnknown = true
            r.discardedSettled = settledItems(from: 0)
            r.discarded = entries(0..<meta.count)
            // Named before the oldest kept, among those forgotten on this connection: every identifier
            // after it was discarded by the gateway, the forgotten ones between included.
            if offset < 0, -offset <= forgottenTotal {
                let k = -offset  // the named one is the k-th newest forgotten
                r.lostAfterSettle = k - 1
                let remembered = Array(forgotten.suffix(min(k, forgotten.count)))
                if remembered.count == k {
                    r.forgottenNamed = remembered.first
                    r.lost = Array(remembered.dropFirst())
                } else {
                    r.lost = remembered
                }
                r.forgottenNamedFailed = !processed
            }
            return r
        }
        if offset < settled.count {
            // A settled one: it and those before it were reported when they settled.
            if !processed { r.failedSettled = settled[offset: offset].item }
            r.discardedSettled = settledItems(from: offset + 1)
            r.discarded = entries(0..<meta.count)
            return r
        }
        let named = offset - settled.count
        r.accepted = entries(0..<named)
        // Status 10: "The notification identifier in the error response indicates the last notification
        // that was successfully sent."
        if processed { r.accepted.append(entry(named)) } else { r.failed = entry(named) }
        r.discarded = entries((named + 1)..<meta.count)
        return r
    }

    /// Empties the buffer (connection lost without an error response): returns the unsettled entries
    /// that were written (their fate is unknown: "ambiguous") and those that never left the process.
    /// Settled ones stay settled: nothing says they were not processed.
    mutating func takeAll() -> (written: [Entry], unwritten: [Entry]) {
        var written: [Entry] = []
        var unwritten: [Entry] = []
        for i in 0..<meta.count {
            let e = entry(i)
            if e.flush != nil { written.append(e) } else { unwritten.append(e) }
        }
        removeAll()
        return (written, unwritten)
    }

    /// Everything is accepted: a drain probe came back naming an identifier after all of these.
    /// Returns the ones not reported yet.
    mutating func acceptAll() -> [Entry] {
        let all = entries(0..<meta.count)
        removeAll()
        return all
    }

    /// Forgets everything, including what was forgotten: the connection is over, and identifiers on
    /// the next one start after these.
    private mutating func removeAll() {
        settled.removeAll()
        settleRuns.removeAll(keepingCapacity: true)
        meta.removeAll(keepingCapacity: true)
        items.removeAll(keepingCapacity: true)
        bytes = 0
        keptBytes = 0
        forgotten.removeAll(keepingCapacity: true)
        forgottenTotal = 0
        lastForgotten = nil
    }
}
