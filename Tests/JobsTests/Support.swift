import TestSupport

/// The mock-cluster helpers, shared with KafkaTests and OperationsTests (TestSupport).
typealias Support = KafkaTestSupport
