import Synchronization

/// A FIFO of at most `capacity` batches between two stages, so that the first (Kafka + decoding, CPU
/// in this process) works on the next batch while the second (the gate's Redis round trip, sending)
/// handles this one. Order is kept: one token's jobs stay in order.
final class BatchHandoff<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var finished = false
        var consumer: CheckedContinuation<Element?, Never>?
        var producers: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())
    private let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// Waits while the hand-off is full. After `finish`, elements are dropped (whatever they carry is
    /// left unsettled, so Kafka redelivers it).
    func put(_ element: Element) async {
        while true {
            let delivered: CheckedContinuation<Element?, Never>?? = state.withLock { s in
                if s.finished { return .some(nil) }
                if let c = s.consumer {
                    s.consumer = nil
                    return .some(c)
                }
                if s.items.count < capacity {
                    s.items.append(element)
                    return .some(nil)
                }
                return nil
            }
            switch delivered {
            case .some(.some(let consumer)):
                consumer.resume(returning: element)
                return
            case .some(.none):
                return
            case .none:
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let roomNow = state.withLock { s -> Bool in
                        if s.finished || s.items.count < capacity || s.consumer != nil { return true }
                        s.producers.append(c)
                        return false
                    }
                    if roomNow { c.resume() }
                }
            }
        }
    }

    /// The producer is done: `next` returns what is left, then nil.
    func finish() {
        let (consumer, producers) = state.withLock { s -> (CheckedContinuation<Element?, Never>?, [CheckedContinuation<Void, Never>]) in
            s.finished = true
            let c = s.consumer
            s.consumer = nil
            let p = s.producers
            s.producers = []
            return (c, p)
        }
        consumer?.resume(returning: nil)
        for p in producers { p.resume() }  // they see `finished` and drop their element
    }

    func next() async -> Element? {
        await withCheckedContinuation { (c: CheckedContinuation<Element?, Never>) in
            let (ready, waking): (Element??, CheckedContinuation<Void, Never>?) = state.withLock { s in
                if !s.items.isEmpty {
                    let e = s.items.removeFirst()
                    return (.some(e), s.producers.isEmpty ? nil : s.producers.removeFirst())
                }
                if s.finished { return (.some(nil), nil) }
                s.consumer = c
                return (nil, s.producers.isEmpty ? nil : s.producers.removeFirst())
            }
            waking?.resume()
            if let ready { c.resume(returning: ready) }
        }
    }
}
