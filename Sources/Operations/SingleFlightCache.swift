/// One value shared by every caller for `ttl`, read by one caller at a time: while a read is under way,
/// callers wait for it instead of starting their own; a value younger than `ttl` (counted from the start
/// of the read that made it) is returned as is. The dashboard's Redis reads go through it, so the cost of
/// the page does not grow with its viewers.
actor SingleFlightCache<Value: Sendable> {
    private let ttl: Duration
    private let clock = ContinuousClock()
    private var cached: (value: Value, readAt: ContinuousClock.Instant)?
    private var reading: Task<Value, Never>?

    init(ttl: Duration) {
        self.ttl = ttl
    }

    func value(_ read: @escaping @Sendable () async -> Value) async -> Value {
        if let cached, clock.now - cached.readAt < ttl { return cached.value }
        if let reading { return await reading.value }
        let started = clock.now
        // Unstructured: a caller that goes away (its request cancelled) leaves the read to the others.
        let task = Task { await read() }
        reading = task
        let value = await task.value
        cached = (value, started)
        reading = nil
        return value
    }
}
