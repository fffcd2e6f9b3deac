/// Puts gated batches back in their intake order (pure): the gate workers finish their calls in any
/// order, and the send stage must send the intake's batches in the order they were taken from Kafka, so
/// that one token's jobs reach Apple in the order they were published. A batch without an intake
/// number (gated again) goes at once.
///
/// It holds at most what the lane lets run ahead of the send stage (`BulkLane`'s bound), since a
/// batch is taken from the intake only while that bound has room, and a batch frees its place only
/// when it is sent.
struct SendOrder<Element> {
    private var next = 0
    private var waiting: [Int: Element] = [:]

    /// Batches waiting for one taken before them.
    var waitingCount: Int { waiting.count }

    /// `element` arrived: what may be sent now, in order — nothing while one taken before it is still
    /// being gated, else it and the waiting ones that follow it.
    mutating func arrived(_ element: Element, intakeOrder: Int?) -> [Element] {
        guard let order = intakeOrder else { return [element] }
        guard order == next else {
            waiting[order] = element
            return []
        }
        next += 1
        if waiting.isEmpty { return [element] }
        var ready = [element]
        while let following = waiting.removeValue(forKey: next) {
            ready.append(following)
            next += 1
        }
        return ready
    }

    /// At the end (the gate workers are done): whatever still waits, in intake order. A batch the
    /// intake dropped as it stopped leaves a gap that nothing after it waits for.
    mutating func rest() -> [Element] {
        let ready = waiting.sorted { $0.key < $1.key }.map(\.value)
        waiting = [:]
        return ready
    }
}
