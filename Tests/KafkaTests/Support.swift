import Synchronization
import TestSupport

/// The mock-cluster helpers, shared with JobsTests and OperationsTests (TestSupport).
typealias Support = KafkaTestSupport

/// A value for test bookkeeping shared between tasks and librdkafka's callbacks.
final class Shared<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
    func withLock<T: Sendable>(_ body: (inout Value) -> T) -> T {
        value.withLock { body(&$0) }
    }
}
