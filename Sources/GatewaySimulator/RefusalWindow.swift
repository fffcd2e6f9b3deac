/// The "refuse connections" fault both simulators share: connections are accepted and closed at once
/// from `from` seconds after the simulator started, for `length` seconds.
package func isWithinRefusalWindow(from: Double?, length: Double, startedAt: ContinuousClock.Instant) -> Bool {
    guard let from else { return false }
    let elapsed = ContinuousClock.now - startedAt
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    return seconds >= from && seconds < from + length
}
