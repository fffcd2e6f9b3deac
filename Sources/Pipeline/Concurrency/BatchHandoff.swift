import Synchronization

/// A FIFO of at most `capacity` batches between two stages, so that the first (Kafka + decoding, CPU
/// in this process) works on the next batch while the second (the gate's Redis round trip, sending)
/// handles this one. Order is kept: one token's jobs stay in order.
///
/// Both waits end when the waiting task is cancelled (a stop must not hang on a stage that will never
/// take or give again, `docs/design.md §1.3`): a cancelled `put` drops its element, a cancelled `next`
/// returns nil. What a dropped batch carries is left unsettled, so Kafka redelivers it.
final class BatchHandoff<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var finished = false
        var consumer: (id: UInt64, continuation: CheckedContinuation<Element?, Never>)?
        var producers: [(id: UInt64, continuation: CheckedContinuation<Void, Never>)] = []
        var nextID: UInt64 = 0

        mutating func newID() -> UInt64 {
            nextID &+= 1
            return nextID
        }
    }

    private let state = Mutex(State())
    private let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// Waits while the hand-off is full. After `finish`, or once the caller is cancelled, the element is
    /// dropped (whatever it carries is left unsettled, so Kafka redelivers it).
    func put(_ element: Element) async {
        while true {
            if Task.isCancelled { return }
            let delivered: CheckedContinuation<Element?, Never>?? = state.withLock { s in
                if s.finished { return .some(nil) }
                if let c = s.consumer {
                    s.consumer = nil
                    return .some(c.continuation)
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
                let id = state.withLock { $0.newID() }
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                        let roomNow = state.withLock { s -> Bool in
                            if Task.isCancelled || s.finished || s.items.count < capacity || s.consumer != nil { return true }
                            s.producers.append((id, c))
                            return false
                        }
                        if roomNow { c.resume() }
                    }
                } onCancel: {
                    let waiting = state.withLock { s -> CheckedContinuation<Void, Never>? in
                        guard let i = s.producers.firstIndex(where: { $0.id == id }) else { return nil }
                        return s.producers.remove(at: i).continuation
                    }
                    waiting?.resume()
                }
            }
        }
    }

    /// The producer is done: `next` returns what is left, then nil.
    func finish() {
        let (consumer, producers) = state.withLock { s -> (CheckedContinuation<Element?, Never>?, [CheckedContinuation<Void, Never>]) in
            s.finished = true
            let c = s.consumer?.continuation
            s.consumer = nil
            let p = s.producers.map(\.continuation)
            s.producers = []
            return (c, p)
        }
        consumer?.resume(returning: nil)
        for p in producers { p.resume() }  // they see `finished` and drop their element
    }

    /// The oldest element; nil once finished and empty, or when the caller is cancelled while waiting.
    func next() async -> Element? {
        let id = state.withLock { $0.newID() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Element?, Never>) in
                let (ready, waking): (Element??, CheckedContinuation<Void, Never>?) = state.withLock { s in
                    if !s.items.isEmpty {
                        let e = s.items.removeFirst()
                        return (.some(e), s.producers.isEmpty ? nil : s.producers.removeFirst().continuation)
                    }
                    if s.finished || Task.isCancelled { return (.some(nil), nil) }
                    s.consumer = (id, c)
                    return (nil, s.producers.isEmpty ? nil : s.producers.removeFirst().continuation)
                }
                waking?.resume()
                if let ready { c.resume(returning: ready) }
            }
        } onCancel: {
            let waiting = state.withLock { s -> CheckedContinuation<Element?, Never>? in
                guard let c = s.consumer, c.id == id else { return nil }
                s.consumer = nil
                return c.continuation
            }
            waiting?.resume(returning: nil)
        }
    }
}
