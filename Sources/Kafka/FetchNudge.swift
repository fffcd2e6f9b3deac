/// When the consumer's poll thread should wake librdkafka's fetcher.
///
/// librdkafka before 2.1 stops fetching once the consumer queue holds `queued.max.messages.kbytes` (or
/// `queued.min.messages`) and decides to fetch again only when the partition leader's broker thread
/// next wakes up: with nothing else to do that is up to a second later (librdkafka 2.1 added
/// `fetch.queue.backoff.ms` for exactly this). A backlog bigger than the queue was therefore consumed
/// in bursts of one queue per second: in `ops/bench e2e` 57k jobs/s with the 16 MiB queue, the cores
/// half idle, 91k only with a 64 MiB queue and 70 MiB more resident memory. A request to a broker
/// wakes its broker thread, which then sees the drained queue and fetches: the poll thread asks for the
/// subscribed topics' metadata, which librdkafka sends to a broker that is up (with several brokers, a
/// random one each time, so each leader is woken within a few nudges rather than after a second).
///
/// Pure logic: the poll thread asks after each `rd_kafka_consume_batch_queue`. Only a full batch (a
/// backlog: the fetcher may be waiting on a full queue) leads to a nudge, at most one per `interval`.
/// An idle or slow topic (batches not full) is never nudged: its fetches wait on the broker
/// (`fetch.wait.max.ms`), not on the queue.
struct FetchNudge {
    /// The least time between two nudges.
    var interval: Duration
    private var last: ContinuousClock.Instant?

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
}
