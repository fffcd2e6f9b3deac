/// When the consumer's poll thread should wake librdkafka's fetcher, and through which partition.
///
/// librdkafka before 2.1 stops fetching once the consumer queue holds `queued.max.messages.kbytes` (or
/// `queued.min.messages`) and decides to fetch again only when the partition leader's broker thread
/// next wakes up: with nothing else to do that is up to a second later (librdkafka 2.1 added
/// `fetch.queue.backoff.ms` for exactly this). A backlog bigger than the queue was therefore consumed
/// in bursts of one queue per second: in `ops/bench e2e` 57k jobs/s with the 16 MiB queue, the cores
/// half idle, 91k only with a 64 MiB queue and 70 MiB more resident memory. A request to the leader
/// wakes its broker thread, which then sees the drained queue and fetches; a watermark query
/// (`ListOffsets`) is the cheapest such request that reads nothing and changes nothing.
///
/// Pure logic: the poll thread asks after each `rd_kafka_consume_batch_queue`. Only a full batch (a
/// backlog: the fetcher may be waiting on a full queue) leads to a nudge, at most one per `interval`,
/// each through the next assigned partition in turn, so that with several brokers every leader is
/// reached within a few intervals. An idle or slow topic (batches not full) is never nudged: its fetches
/// wait on the broker (`fetch.wait.max.ms`), not on the queue.
struct FetchNudge {
    /// The least time between two nudges.
    var interval: Duration
    private var last: ContinuousClock.Instant?
    private var turn = 0
    /// Nudges sent (statistics).
    private(set) var sent = 0

    init(interval: Duration) {
        self.interval = interval
    }

    /// After a consume call that returned `received` of at most `capacity` messages: whether to nudge now.
    mutating func isDue(afterReceiving received: Int, capacity: Int, now: ContinuousClock.Instant) -> Bool {
        guard received >= capacity else { return false }
        if let last, now - last < interval { return false }
        last = now
        return true
    }

    /// The partition to nudge through, the next one of `assigned` in turn (nil: none assigned).
    mutating func partition(of assigned: [TopicPartition]) -> TopicPartition? {
        guard !assigned.isEmpty else { return nil }
        let sorted = assigned.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
        sent += 1
        defer { turn &+= 1 }
        return sorted[turn % sorted.count]
    }
}
