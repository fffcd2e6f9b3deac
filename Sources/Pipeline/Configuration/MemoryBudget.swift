import Kafka

extension PipelineConfiguration {
    /// The most memory `run` needs with this file, as design §1.2 accounts it: the jobs it may hold (every
    /// message taken and not settled: `max_in_flight` of up to 4 KiB each, counted by number, and
    /// `max_in_flight_bytes` of larger ones), the consumers' buffers and librdkafka's fetch queues ahead
    /// of them, and the process itself at full speed. A container's memory limit (or systemd's
    /// `MemoryMax`) below ``total`` lets a burst of large jobs get the process killed; the deployment
    /// examples are checked against it (`DeploymentExamplesTests`).
    public struct MemoryBudget: Sendable, CustomStringConvertible {
        /// `max_in_flight` × 4 KiB: messages at or under 4 KiB are bounded by their number only.
        public var smallJobs: Int
        /// `max_in_flight_bytes`: messages over 4 KiB, by their bytes.
        public var largeJobs: Int
        /// The jobs consumer's buffer (32 MiB of message values) and librdkafka's fetch queue
        /// (`queued.max.messages.kbytes`, ~2× its size resident).
        public var buffers: Int
        /// With `kafka.priority_topic`: its own budget (`priority_max_in_flight` × 4 KiB and a quarter of
        /// `max_in_flight_bytes`, at least 1 MiB), buffer and queue.
        public var priorityLane: Int
        /// The process at full speed beside what it holds (40–140 MiB measured: benchmarks §7).
        public var process: Int

        public var total: Int { smallJobs + largeJobs + buffers + priorityLane + process }

        public var description: String {
            func mib(_ bytes: Int) -> String { "\(Int((Double(bytes) / Double(1 << 20)).rounded(.up))) MiB" }
            return "\(mib(total)): small jobs \(mib(smallJobs)) + large jobs \(mib(largeJobs)) + buffers \(mib(buffers))"
                + (priorityLane > 0 ? " + priority lane \(mib(priorityLane))" : "") + " + the process \(mib(process))"
        }
    }

    /// The process's own memory at full speed, beside the messages it holds.
    public static let processMemory = 140 << 20

    public var memoryBudget: MemoryBudget {
        let small = InFlightBudget.largeMessageBytes
        let consumerBuffer = KafkaConsumerConfiguration(bootstrapServers: "", groupID: "", topics: []).maxBufferedBytes
        let queueKB = Int(kafka.properties["queued.max.messages.kbytes"] ?? "") ?? PipelineRunner.prefetchKilobytes
        var priority = 0
        if kafka.priorityTopic != nil {
            let priorityQueueKB = Int(kafka.properties["queued.max.messages.kbytes"] ?? "") ?? 1024
            priority = priorityMaxInFlight * small + max(1 << 20, maxInFlightBytes / 4) + consumerBuffer + 2 * (priorityQueueKB << 10)
        }
        return MemoryBudget(
            smallJobs: maxInFlight * small, largeJobs: maxInFlightBytes, buffers: consumerBuffer + 2 * (queueKB << 10),
            priorityLane: priority, process: Self.processMemory)
    }
}
