import AsyncAlgorithms

/// At most about `capacity` batches between two stages, so that the first (Kafka + decoding, CPU in
/// this process) works on the next batch while the second (the gate's Redis round trip, sending) handles
/// this one: swift-async-algorithms' `AsyncChannel` (several producers: intake, regates, cap waits),
/// read by one consumer through a bounded buffer (`batches`) or by several (`sharedBatches`). Order is
/// kept: one token's jobs stay in order.
///
/// Both waits end when the waiting task is cancelled (a stop must not hang on a stage that will never
/// take or give again, `docs/design.md §1.3`): a cancelled `put` drops its element, a cancelled consumer
/// ends its loop. What a dropped batch carries is left unsettled, so Kafka redelivers it.
struct BatchHandoff<Element: Sendable>: Sendable {
    private let channel = AsyncChannel<Element>()
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Waits while the consumer's buffer is full. After `finish`, or once the caller is cancelled, the
    /// element is dropped (whatever it carries is left unsettled, so Kafka redelivers it).
    func put(_ element: Element) async { await channel.send(element) }

    /// The producers are done: the consumer gets what is left, then its loop ends.
    func finish() { channel.finish() }

    /// The batches, oldest first, for one consumer (iterate it once): ends after `finish` once empty, or
    /// when the consumer is cancelled.
    var batches: AsyncBufferSequence<AsyncChannel<Element>> { channel.buffer(policy: .bounded(capacity)) }

    /// The batches for one of several consumers, each iterating its own: every batch goes to one of them,
    /// oldest first, to whichever asked first. No buffer: a `put` waits until a consumer takes its batch.
    var sharedBatches: AsyncChannel<Element> { channel }
}
