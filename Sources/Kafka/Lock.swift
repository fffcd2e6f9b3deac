import Foundation

/// A mutex-protected value. Small critical sections only: the hot paths (delivery reports, batch
/// hand-off) take it once per message or per batch, never across a librdkafka call that can block.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked: every access to `value` goes through `lock`.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
