import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// librdkafka's mock Kafka cluster, served on loopback TCP: real Kafka protocol (produce, fetch,
/// consumer groups, committed offsets) for development, tests and the demo.
///
/// Traits of the librdkafka 2.0.2 mock worth knowing: it keeps only about 5 MiB / 100k message sets
/// per partition and silently drops older data (give topics enough partitions; the consumer reports the
/// resulting gaps); a new group's first assignment takes about 3 s; after the last member leaves, a new
/// member waits about `session.timeout.ms`; commits are refused while a group is rebalancing.
///
/// `@unchecked Sendable`: the cluster and its host handle are thread-safe librdkafka objects; `stop()`
/// is serialised by `state`.
public final class MockCluster: @unchecked Sendable {
    /// A topic to create: name and partition count.
    public struct Topic: Sendable, Hashable {
        public var name: String
        public var partitions: Int32
        public init(name: String, partitions: Int32) {
            self.name = name
            self.partitions = partitions
        }
    }

    /// `host:port,...` of the brokers, for `bootstrap.servers`.
    public let bootstrapServers: String
    public let brokerCount: Int
    private let logger: Logger
    private let state: Mutex<(host: RDKafkaClient, cluster: OpaquePointer)?>
    /// Who leads what, so taking a broker down can move its partitions and groups elsewhere (the mock
    /// itself never changes a leader: `rd_kafka_mock_broker_set_down` only closes the connections).
    private let placement: Mutex<Placement>

    /// The cluster's placement: each partition's leader (at creation partition p of every topic on
    /// broker p mod n + 1, so every broker leads some), each pinned group's coordinator, and which
    /// brokers are down.
    private struct Placement {
        var leaders: [String: [Int32]] = [:]
        var coordinators: [String: Int32] = [:]
        var down: Set<Int32> = []
    }

    public init(brokers: Int = 3, topics: [Topic] = [], logger: Logger) throws {
        precondition(brokers > 0)
        // The mock cluster lives inside an rd_kafka_t (its internal bookkeeping and threads): a producer
        // handle with no brokers of its own, used for nothing else (librdkafka's own tests do the same).
        let host = try RDKafkaClient.make(
            kind: .producer, properties: ["client.id": "kafka-dev-mock-host", "log_level": "4"], logger: logger)
        guard let cluster = host.startMockCluster(brokers: Int32(brokers)) else {
            host.destroy()
            throw KafkaError(kind: .mockCluster, message: "rd_kafka_mock_cluster_new failed")
        }
        self.bootstrapServers = RDKafkaClient.mockBootstraps(cluster)
        self.brokerCount = brokers
        self.logger = logger
        self.state = Mutex((host, cluster))
        self.placement = Mutex(Placement())
        for topic in topics { try createTopic(topic.name, partitions: topic.partitions) }
        logger.info(
            "Kafka mock cluster started",
            metadata: ["kafka.bootstrap": "\(bootstrapServers)", "kafka.brokers": "\(brokers)"])
    }

    deinit { stop() }

    /// Creates a topic. The mock keeps one copy of the data whatever the replication factor (it lists
    /// min(3, brokers) replicas), so a broker taken down loses nothing; partition p's leader is broker
    /// p mod n + 1.
    public func createTopic(_ name: String, partitions: Int32) throws {
        try state.withLock { s in
            guard let s else { throw KafkaError(kind: .mockCluster, message: "mock cluster stopped") }
            try RDKafkaClient.mockCreateTopic(
                s.cluster, name: name, partitions: partitions, replication: Int32(min(3, brokerCount)))
            let leaders = (0..<partitions).map { $0 % Int32(brokerCount) + 1 }
            // With one broker it leads every partition already. Each `rd_kafka_mock_partition_set_leader`
            // waits for the mock's thread without a timeout, and librdkafka 2.0.2 now and then never
            // answers one: a 1 282-partition topic hung kafka-dev's start (three of five starts with ~1 000 partitions).
            if brokerCount > 1 {
                for (partition, leader) in leaders.enumerated() {
                    try RDKafkaClient.mockSetLeader(s.cluster, topic: name, partition: Int32(partition), broker: leader)
                }
            }
            placement.withLock { $0.leaders[name] = leaders }
        }
        logger.debug("Kafka mock topic created", metadata: ["kafka.topic": "\(name)", "kafka.partitions": "\(partitions)"])
    }

    /// Pins the coordinator of consumer group `group` (by default the mock hashes the group id onto a
    /// broker), so ``setBroker(_:up:)`` can move it off a broker taken down, as a real cluster moves the
    /// leadership of the group's `__consumer_offsets` partition. The group's state (members, committed
    /// offsets) is the cluster's, not the broker's, so moving it loses nothing.
    public func pinGroupCoordinator(_ group: String, broker: Int32) throws {
        try state.withLock { s in
            guard let s else { throw KafkaError(kind: .mockCluster, message: "mock cluster stopped") }
            try RDKafkaClient.mockSetGroupCoordinator(s.cluster, group: group, broker: broker)
            placement.withLock { $0.coordinators[group] = broker }
        }
    }

    /// Takes broker `id` (1…brokers) down or brings it up again, as a broker crash and restart in a
    /// cluster with replicas look to clients: down closes its connections and refuses new ones, and the
    /// partitions it led and the pinned groups it coordinated move to the next broker that is up (the
    /// controller's fail-over); up accepts connections again and moves nothing back — a restarted Kafka
    /// broker rejoins as a follower, and leadership returns only at the next preferred-leader election
    /// (minutes later by default). That is also what keeps it safe for tests: librdkafka 2.0.2's consumer
    /// sometimes stopped fetching a partition whose leader moved back within a second of having moved
    /// away (2 runs in ~60 of `BrokerFaultTests`, a fetch left waiting on the old leader), which is a
    /// client hazard of rapid flip-flops, not what a broker fault looks like. With every broker down,
    /// partitions stay where they are. No data is lost either way: the mock keeps a partition's log
    /// outside its brokers. Returns how many partitions and groups moved.
    ///
    /// A broker keeps its port while down, and librdkafka (2.0.2, and still upstream) aborts the whole
    /// process on an assert when it cannot: going down, `rd_kafka_mock_broker_set_down` closes the
    /// listening socket and at once binds a new one to the same port (not listening until up), and coming
    /// up it listens on that socket. Two ways that fails, and what keeps each from aborting:
    /// - Going down, the re-bind fails while the old listener is still alive, which it is while a child
    ///   process being started holds a copy of our descriptors (from the fork until its exec closes
    ///   them; with a thread starting processes beside it, a few dozen downs were enough to abort). Only
    ///   the caller can rule that out: a process that starts children (the tests) must not start one
    ///   during this call (the tests hold ProcessSupport's `withNoChildStarting` around it). kafka-dev
    ///   starts none.
    /// - While down, the bound socket (SO_REUSEADDR, not listening) does not stop another SO_REUSEADDR
    ///   socket (redis-server's, tinyproxy's) from binding and listening on the port, and then our listen
    ///   fails. The kernel never hands out a port that is bound (neither to `bind` port 0 nor to
    ///   `connect`), so that takes a server started on a port it was told, picked before the broker
    ///   got it; before bringing a broker up this checks that the port is free of other listeners (a
    ///   probe bind with SO_REUSEADDR, which only a listener or a socket without it refuses), and throws
    ///   instead — the broker stays down — when it is still taken after a second.
    @discardableResult
    public func setBroker(_ id: Int32, up: Bool) throws -> (partitions: Int, groups: Int) {
        guard (1...Int32(brokerCount)).contains(id) else {
            throw KafkaError(kind: .mockCluster, message: "no broker \(id) (brokers are 1…\(brokerCount))")
        }
        return try state.withLock { s in
            guard let s else { throw KafkaError(kind: .mockCluster, message: "mock cluster stopped") }
            if up, placement.withLock({ $0.down.contains(id) }) { try checkPortFree(broker: id) }
            try RDKafkaClient.mockSetBroker(s.cluster, id: id, up: up)
            var moved = (partitions: 0, groups: 0)
            try placement.withLock { p in
                if up {
                    p.down.remove(id)
                    return
                }
                p.down.insert(id)
                let down = p.down
                // The next broker up after `current` (in id order, wrapping), or `current` when all are down.
                func failOver(from current: Int32) -> Int32 {
                    let n = Int32(brokerCount)
                    return (1...n).map { (current - 1 + $0) % n + 1 }.first { !down.contains($0) } ?? current
                }
                for (topic, leaders) in p.leaders {
                    for (partition, now) in leaders.enumerated() where now == id {
                        let next = failOver(from: now)
                        guard next != now else { continue }
                        try RDKafkaClient.mockSetLeader(s.cluster, topic: topic, partition: Int32(partition), broker: next)
                        p.leaders[topic]![partition] = next
                        moved.partitions += 1
                    }
                }
                for (group, now) in p.coordinators where now == id {
                    let next = failOver(from: now)
                    guard next != now else { continue }
                    try RDKafkaClient.mockSetGroupCoordinator(s.cluster, group: group, broker: next)
                    p.coordinators[group] = next
                    moved.groups += 1
                }
            }
            return moved
        }
    }

    /// Throws unless broker `id`'s port (its address in `bootstrapServers`, listed in id order) can be
    /// bound with SO_REUSEADDR, retrying for about a second: before librdkafka listens on it again (see
    /// ``setBroker(_:up:)``).
    private func checkPortFree(broker id: Int32) throws {
        let addresses = bootstrapServers.split(separator: ",")
        guard addresses.count == brokerCount, let colon = addresses[Int(id) - 1].lastIndex(of: ":"),
            let port = UInt16(addresses[Int(id) - 1][addresses[Int(id) - 1].index(after: colon)...])
        else {
            throw KafkaError(kind: .mockCluster, message: "broker \(id): no port in bootstrap servers \(bootstrapServers)")
        }
        var problem = ""
        for attempt in 0..<20 {
            if attempt > 0 { usleep(50_000) }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else {
                problem = "socket(): \(String(cString: strerror(errno)))"
                continue
            }
            defer { close(fd) }
            var on: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if bound == 0 { return }
            problem = String(cString: strerror(errno))
        }
        throw KafkaError(
            kind: .mockCluster,
            message:
                "broker \(id) stays down: its port 127.0.0.1:\(port) is taken by another socket (\(problem)); a mock broker comes back on its own port, and librdkafka would abort the process on a listen that fails"
        )
    }

    /// Makes every request for `topic` fail with the broker error `code` (e.g. 29,
    /// TOPIC_AUTHORIZATION_FAILED) until called again with 0: a topic that refuses writes, for tests of
    /// what the pipeline does when its dead-letter topic is unusable.
    public func setTopicError(_ topic: String, code: Int32) {
        state.withLock { s in
            guard let s else { return }
            RDKafkaClient.mockSetTopicError(s.cluster, name: topic, code: code)
        }
    }

    /// Closes the listeners and frees the data. Idempotent. Clients still connected see broker-down errors.
    public func stop() {
        let s = state.withLock { s -> (host: RDKafkaClient, cluster: OpaquePointer)? in
            defer { s = nil }
            return s
        }
        guard let s else { return }
        RDKafkaClient.mockDestroy(s.cluster)
        s.host.destroy()
        logger.info("Kafka mock cluster stopped", metadata: ["kafka.bootstrap": "\(bootstrapServers)"])
    }
}
