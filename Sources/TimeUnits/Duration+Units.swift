extension Duration {
    /// Whole milliseconds, rounded towards zero: the unit librdkafka's settings, Redis's `PX` and our log
    /// metadata (`…_ms`) use. The standard library has `Duration.milliseconds(_:)` to make one, nothing to
    /// read one back; this is the one place that does, for every module.
    public var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// Seconds as a `Double`: what a log line or a message says of a timeout (`"10.0"`) and what a
    /// back-off's arithmetic (powers, jitter) works in. The counterpart of `Duration.seconds(_: Double)`.
    public var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
