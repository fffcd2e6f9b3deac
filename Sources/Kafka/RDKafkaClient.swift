import CRdKafka
import Foundation
import Logging
import Synchronization

/// The one type that calls librdkafka (besides the mock-cluster calls in `MockCluster`'s section at the
/// end of this file). Public types (`KafkaProducer`, `KafkaConsumer`, `MockCluster`) are thin policy
/// layers over it, so the C surface we depend on is in one place.
///
/// `@unchecked Sendable`: an `rd_kafka_t` handle is thread-safe per librdkafka's documentation
/// (INTRODUCTION.md, "Threads and callbacks"); the queue handle likewise. The only non-thread-safe
/// operation is `destroy()`, which the owners call exactly once, from their poll thread (or, closed before
/// their `run()` ran, from the close's thread), after every other user of the handle is finished.
final class RDKafkaClient: @unchecked Sendable {
    enum Kind { case producer, consumer }

    /// A partition's offsets as librdkafka's statistics last reported them (-1: unknown).
    struct PartitionOffsets: Sendable {
        var high: Int64
        var low: Int64
        var librdkafkaLag: Int64
    }

    let handle: OpaquePointer
    let kind: Kind
    /// Kept alive as long as the handle: librdkafka's callbacks reach it through the conf opaque.
    let context: CallbackContext
    private var destroyed = false

    /// State the C callbacks need. Set up before `rd_kafka_new` and not changed afterwards, except for
    /// `rebalanceHandler`, which is set once before `subscribe` (the only thing that can trigger it).
    final class CallbackContext: @unchecked Sendable {
        // @unchecked: `logger` and `counters` are immutable or self-locking; `rebalanceHandler` is written
        // once before any callback can fire (see above) and read only from librdkafka's callback.
        let logger: Logger
        let offsetResets: Mutex<Int>
        /// Per partition of the consumed topics, from librdkafka's statistics (emitted every
        /// `statistics.interval.ms` when that property is set; served on the poll thread).
        let partitionOffsets = Mutex<[TopicPartition: PartitionOffsets]>([:])
        var rebalanceHandler: ((rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> Void)?

        init(logger: Logger) {
            self.logger = logger
            self.offsetResets = Mutex(0)
        }
    }

    private init(handle: OpaquePointer, kind: Kind, context: CallbackContext) {
        self.handle = handle
        self.kind = kind
        self.context = context
    }

    // MARK: - Creation

    /// Creates a handle from librdkafka properties. Properties are passed through unchanged, so
    /// production settings (`security.protocol`, `sasl.*`, `ssl.*`) need no code here.
    static func make(kind: Kind, properties: [String: String], logger: Logger) throws -> RDKafkaClient {
        let context = CallbackContext(logger: logger)
        guard let conf = rd_kafka_conf_new() else {
            throw KafkaError(kind: .configuration, message: "rd_kafka_conf_new failed")
        }
        var errstr = [CChar](repeating: 0, count: 512)
        // Sorted so that errors (and logs) are deterministic.
        for (name, value) in properties.sorted(by: { $0.key < $1.key }) {
            if rd_kafka_conf_set(conf, name, value, &errstr, errstr.count) != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(conf)
                var detail = String(decoding: errstr.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                // librdkafka may quote the value: never a secret's (sasl.password, ssl.key.password…).
                let n = name.lowercased()
                if !value.isEmpty,
                    ["password", "secret", "key", "token", "credential", "sasl.oauthbearer.config"].contains(where: { n.contains($0) })
                {
                    detail = detail.replacingOccurrences(of: value, with: "***")
                }
                throw KafkaError(kind: .configuration, message: "librdkafka property \(name): \(detail)")
            }
        }
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(context).toOpaque())
        // librdkafka logs go to swift-log, with its facility as metadata, instead of stderr.
        rd_kafka_conf_set_log_cb(conf, rdLogCallback)
        rd_kafka_conf_set_error_cb(conf, rdErrorCallback)
        switch kind {
        case .producer:
            rd_kafka_conf_set_dr_msg_cb(conf, rdDeliveryReportCallback)
        case .consumer:
            rd_kafka_conf_set_rebalance_cb(conf, rdRebalanceCallback)
            if let interval = properties["statistics.interval.ms"], interval != "0" {
                rd_kafka_conf_set_stats_cb(conf, rdStatisticsCallback)
            }
        }
        let type = kind == .producer ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER
        // On success rd_kafka_new owns `conf`; on failure we still own it.
        guard let rk = rd_kafka_new(type, conf, &errstr, errstr.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(
                kind: .configuration,
                message: "rd_kafka_new: \(String(decoding: errstr.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
        }
        return RDKafkaClient(handle: rk, kind: kind, context: context)
    }

    /// librdkafka 2.1 or later: it has `fetch.queue.backoff.ms` (the version linked at run time).
    static let hasFetchQueueBackoff = rd_kafka_version() >= 0x0201_0000

    /// Requests the metadata of the topics this client knows from a broker that is up, waiting at most
    /// `timeoutMs`; the answer is not kept (``FetchNudge``: the request wakes that broker's thread).
    /// Unlike a watermark query, which waits for the partition leader's answer for up to
    /// `socket.timeout.ms` whatever its timeout says (it blocked the poll thread for a whole test when
    /// that leader went down), this returns after `timeoutMs`.
    func requestMetadata(timeoutMs: Int32) {
        var metadata: UnsafePointer<rd_kafka_metadata>?
        if rd_kafka_metadata(handle, 0, nil, &metadata, timeoutMs) == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata {
            rd_kafka_metadata_destroy(metadata)
        }
    }

    /// Destroys the handle. Call once, after `consumerClose()` for consumers, from the thread that closes.
    func destroy() {
        precondition(!destroyed)
        destroyed = true
        rd_kafka_destroy(handle)
    }

    // MARK: - Producer

    /// Enqueues one message. `opaque` comes back in the delivery report (`_private`).
    /// Key, value and headers are copied by librdkafka (`RD_KAFKA_MSG_F_COPY`), so the buffers only need
    /// to live for the call.
    func produce(_ message: KafkaProducerMessage, opaque: UnsafeMutableRawPointer) -> rd_kafka_resp_err_t {
        // TOPIC, PARTITION, VALUE, KEY, OPAQUE, MSGFLAGS, then one entry per header.
        let count = 6 + message.headers.count
        return message.topic.withCString { topic in
            message.value.withUnsafeBytes { value in
                withOptionalBytes(message.key) { key in
                    withUnsafeTemporaryAllocation(of: rd_kafka_vu_t.self, capacity: count) { vus in
                        var i = 0
                        func add(_ type: rd_kafka_vtype_t, _ fill: (inout rd_kafka_vu_t) -> Void) {
                            var vu = rd_kafka_vu_t()
                            vu.vtype = type
                            fill(&vu)
                            vus.initializeElement(at: i, to: vu)
                            i += 1
                        }
                        add(RD_KAFKA_VTYPE_TOPIC) { $0.u.cstr = topic }
                        add(RD_KAFKA_VTYPE_PARTITION) { $0.u.i32 = message.partition ?? RD_KAFKA_PARTITION_UA }
                        add(RD_KAFKA_VTYPE_VALUE) {
                            $0.u.mem.ptr = UnsafeMutableRawPointer(mutating: value.baseAddress)
                            $0.u.mem.size = value.count
                        }
                        add(RD_KAFKA_VTYPE_KEY) {
                            $0.u.mem.ptr = key.flatMap { UnsafeMutableRawPointer(mutating: $0.baseAddress) }
                            $0.u.mem.size = key?.count ?? 0
                        }
                        add(RD_KAFKA_VTYPE_OPAQUE) { $0.u.ptr = opaque }
                        add(RD_KAFKA_VTYPE_MSGFLAGS) { $0.u.i = RD_KAFKA_MSG_F_COPY }
                        return withHeaderStorage(message.headers) { headers in
                            for h in headers {
                                add(RD_KAFKA_VTYPE_HEADER) {
                                    $0.u.header.name = h.name
                                    $0.u.header.val = h.value
                                    $0.u.header.size = h.size
                                }
                            }
                            defer { vus.baseAddress!.deinitialize(count: i) }
                            guard let error = rd_kafka_produceva(handle, vus.baseAddress, i) else {
                                return RD_KAFKA_RESP_ERR_NO_ERROR
                            }
                            let code = rd_kafka_error_code(error)
                            rd_kafka_error_destroy(error)
                            return code
                        }
                    }
                }
            }
        }
    }

    /// Serves queued callbacks (delivery reports, logs, errors) for up to `timeoutMs`.
    @discardableResult
    func poll(timeoutMs: Int32) -> Int32 { rd_kafka_poll(handle, timeoutMs) }

    /// Waits (serving callbacks) until every enqueued message is delivered or failed, or the timeout.
    func flush(timeoutMs: Int32) -> rd_kafka_resp_err_t { rd_kafka_flush(handle, timeoutMs) }

    /// Fails every message still queued or in flight; their delivery reports say `_PURGE_*`.
    func purgeAll() {
        _ = rd_kafka_purge(handle, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
    }

    var outQueueLength: Int32 { rd_kafka_outq_len(handle) }

    // MARK: - Consumer

    /// Routes the main queue (logs, errors, rebalances) to the consumer queue, and returns that queue:
    /// one queue to poll, on one thread.
    func consumerQueue() -> OpaquePointer {
        _ = rd_kafka_poll_set_consumer(handle)
        return rd_kafka_queue_get_consumer(handle)!
    }

    func subscribe(topics: [String]) throws {
        let list = rd_kafka_topic_partition_list_new(Int32(topics.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in topics {
            rd_kafka_topic_partition_list_add(list, topic, RD_KAFKA_PARTITION_UA)
        }
        let err = rd_kafka_subscribe(handle, list)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "subscribe") }
    }

    /// Up to `capacity` messages (or events as messages with `err` set) from `queue`, waiting up to
    /// `timeoutMs` for the first. Serves rebalance/log/error callbacks on the calling thread.
    func consumeBatch(
        queue: OpaquePointer, timeoutMs: Int32,
        into buffer: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>, capacity: Int
    ) -> Int {
        max(0, rd_kafka_consume_batch_queue(queue, timeoutMs, buffer, capacity))
    }

    /// Makes a blocked `consumeBatch` on `queue` return early.
    func wake(queue: OpaquePointer) { rd_kafka_queue_yield(queue) }

    /// The group's rebalance protocol, read once (it is fixed by the configuration): asked again from the
    /// revoke callback that `rd_kafka_consumer_close` serves, `rd_kafka_rebalance_protocol` blocked for
    /// good now and then (a stop of one of two in-process consumers of a group hung).
    /// The first ask is the first assignment's callback, served by an ordinary poll.
    var rebalanceProtocolIsCooperative: Bool {
        if let known = cooperative.withLock({ $0 }) { return known }
        guard let p = rd_kafka_rebalance_protocol(handle) else { return false }
        let answer = String(cString: p) == "COOPERATIVE"
        cooperative.withLock { $0 = answer }
        return answer
    }
    private let cooperative = Mutex<Bool?>(nil)

    var assignmentLost: Bool { rd_kafka_assignment_lost(handle) != 0 }

    /// Applies a rebalance: (incremental) assign or unassign, by protocol.
    func applyRebalance(
        _ event: rd_kafka_resp_err_t, _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    ) throws {
        if rebalanceProtocolIsCooperative {
            let error =
                event == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS
                ? rd_kafka_incremental_assign(handle, partitions)
                : rd_kafka_incremental_unassign(handle, partitions)
            if let error {
                let code = rd_kafka_error_code(error)
                rd_kafka_error_destroy(error)
                throw KafkaError(code, "incremental rebalance")
            }
        } else {
            let err = rd_kafka_assign(handle, event == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS ? partitions : nil)
            if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "assign") }
        }
    }

    /// The group's committed offsets for `partitions` (nil: none committed yet). Blocks up to `timeoutMs`.
    func committed(_ partitions: [TopicPartition], timeoutMs: Int32) throws -> [TopicPartition: Int64?] {
        let list = Self.makeList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_committed(handle, list, timeoutMs)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "committed") }
        var result: [TopicPartition: Int64?] = [:]
        for (tp, offset, _) in Self.read(list) { result[tp] = offset >= 0 ? offset : nil }
        return result
    }

    /// Synchronous commit of explicit positions (next offset to read). Returns per-partition errors.
    func commit(_ positions: [TopicPartition: Int64]) -> Result<Void, KafkaError> {
        guard !positions.isEmpty else { return .success(()) }
        let list = Self.makeList(positions.map { ($0.key, $0.value) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_commit(handle, list, 0)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { return .failure(KafkaError(err, "commit")) }
        for (tp, _, perr) in Self.read(list) where perr != RD_KAFKA_RESP_ERR_NO_ERROR {
            return .failure(KafkaError(perr, "commit \(tp)"))
        }
        return .success(())
    }

    /// Stops fetching `partitions` (`rd_kafka_pause_partitions`: what librdkafka prefetched of them is
    /// dropped, and fetched again from the application's position on resume). Nil, or the error.
    func pause(_ partitions: [TopicPartition]) -> KafkaError? {
        let list = Self.makeList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_pause_partitions(handle, list)
        return err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError(err, "pause")
    }

    /// Fetches `partitions` again, from the first message not handed to the application.
    func resume(_ partitions: [TopicPartition]) -> KafkaError? {
        let list = Self.makeList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_resume_partitions(handle, list)
        return err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError(err, "resume")
    }

    /// Leaves the group (serving the final revoke through the rebalance callback) and stops fetching.
    func consumerClose() -> rd_kafka_resp_err_t { rd_kafka_consumer_close(handle) }

    func destroyQueue(_ queue: OpaquePointer) { rd_kafka_queue_destroy(queue) }

    // MARK: - Partition lists

    static func makeList(_ items: [(TopicPartition, Int64)]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        let list = rd_kafka_topic_partition_list_new(Int32(max(items.count, 1)))!
        for (tp, offset) in items {
            rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)!.pointee.offset = offset
        }
        return list
    }

    static func read(
        _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    ) -> [(TopicPartition, Int64, rd_kafka_resp_err_t)] {
        (0..<Int(list.pointee.cnt)).map { i in
            let e = list.pointee.elems[i]
            return (TopicPartition(topic: String(cString: e.topic), partition: e.partition), e.offset, e.err)
        }
    }
}

// MARK: - Helpers for building produce arguments

private func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
    guard let bytes else { return body(nil) }
    return bytes.withUnsafeBytes { body($0) }
}

private struct HeaderPointers {
    var name: UnsafePointer<CChar>
    var value: UnsafeRawPointer?
    var size: Int
}

/// Lays header names (NUL-terminated) and values out in one scratch allocation, valid for `body` only.
/// One allocation per message with headers, none without (the common case for jobs).
private func withHeaderStorage<R>(_ headers: [KafkaHeader], _ body: ([HeaderPointers]) -> R) -> R {
    guard !headers.isEmpty else { return body([]) }
    let size = headers.reduce(0) { $0 + $1.key.utf8.count + 1 + ($1.value?.count ?? 0) }
    let storage = UnsafeMutableRawPointer.allocate(byteCount: max(size, 1), alignment: 1)
    defer { storage.deallocate() }
    var cursor = storage
    var pointers: [HeaderPointers] = []
    pointers.reserveCapacity(headers.count)
    for header in headers {
        let name = cursor.assumingMemoryBound(to: CChar.self)
        for byte in header.key.utf8 {
            cursor.storeBytes(of: byte, as: UInt8.self)
            cursor += 1
        }
        cursor.storeBytes(of: 0, as: UInt8.self)
        cursor += 1
        var value: UnsafeRawPointer? = nil
        if let bytes = header.value, !bytes.isEmpty {
            bytes.withUnsafeBytes { cursor.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            value = UnsafeRawPointer(cursor)
            cursor += bytes.count
        } else if header.value != nil {
            value = UnsafeRawPointer(cursor)  // empty, non-null value
        }
        pointers.append(HeaderPointers(name: UnsafePointer(name), value: value, size: header.value?.count ?? 0))
    }
    return body(pointers)
}

// MARK: - Reading consumed messages

extension RDKafkaClient {
    /// Copies a consumed message out of librdkafka's memory. `topicName` caches topic names per handle.
    static func copyMessage(
        _ m: UnsafeMutablePointer<rd_kafka_message_t>, topicName: String
    ) -> KafkaConsumerMessage {
        let msg = m.pointee
        let value: [UInt8] =
            msg.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: msg.len)) } ?? []
        let key: [UInt8]? = msg.key.map { Array(UnsafeRawBufferPointer(start: $0, count: msg.key_len)) }
        var headers: [KafkaHeader] = []
        var hdrs: OpaquePointer? = nil
        if rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR, let hdrs {
            var idx = 0
            var name: UnsafePointer<CChar>? = nil
            var val: UnsafeRawPointer? = nil
            var size = 0
            while rd_kafka_header_get_all(hdrs, idx, &name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(
                    KafkaHeader(
                        key: String(cString: name!),
                        value: val.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }))
                idx += 1
            }
        }
        var tsType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let ts = rd_kafka_message_timestamp(m, &tsType)
        return KafkaConsumerMessage(
            topic: topicName, partition: msg.partition, offset: msg.offset, key: key, value: value,
            headers: headers, timestampMilliseconds: tsType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : ts)
    }

    static func topicName(of m: UnsafeMutablePointer<rd_kafka_message_t>) -> String {
        String(cString: rd_kafka_topic_name(m.pointee.rkt))
    }

    static func destroyMessage(_ m: UnsafeMutablePointer<rd_kafka_message_t>) { rd_kafka_message_destroy(m) }
}

// MARK: - C callbacks (no captures; they find their Swift state through opaques)

private func context(of rk: OpaquePointer?) -> RDKafkaClient.CallbackContext? {
    guard let rk, let opaque = rd_kafka_opaque(rk) else { return nil }
    return Unmanaged<RDKafkaClient.CallbackContext>.fromOpaque(opaque).takeUnretainedValue()
}

private let rdLogCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
    rk, level, fac, buf in
    guard let ctx = context(of: rk) else { return }
    let facility = fac.map { String(cString: $0) } ?? ""
    let text = buf.map { String(cString: $0) } ?? ""
    // An offset reset *because of an error* (e.g. "offset out of range": the broker dropped the data we
    // were to read next — the mock cluster does this past ~5 MiB per partition) means messages were
    // skipped. librdkafka only logs it; we count it and log it as an error so it is never passed by.
    if facility == "OFFSET" && text.contains("offset reset") && level <= 4 {
        let total = ctx.offsetResets.withLock { n -> Int in
            n += 1
            return n
        }
        ctx.logger.error(
            "Kafka offset reset: messages may have been skipped",
            metadata: ["librdkafka": "\(text)", "kafka.offset_resets": "\(total)"])
        return
    }
    let swiftLevel: Logger.Level
    switch level {
    case ...3: swiftLevel = .error
    case 4: swiftLevel = .warning
    case 5, 6: swiftLevel = .info
    default: swiftLevel = .debug
    }
    ctx.logger.log(level: swiftLevel, "\(text)", metadata: ["librdkafka.facility": "\(facility)"])
}

private let rdErrorCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = {
    rk, err, reason, _ in
    guard let ctx = context(of: rk) else { return }
    let code = rd_kafka_resp_err_t(rawValue: err)
    // Most errors here are transient (broker connection lost, retried by librdkafka); _FATAL is not.
    let level: Logger.Level = code == RD_KAFKA_RESP_ERR__FATAL ? .critical : .warning
    ctx.logger.log(
        level: level, "Kafka client error",
        metadata: [
            "error": "\(String(cString: rd_kafka_err2name(code)))",
            "reason": "\(reason.map { String(cString: $0) } ?? "")",
        ])
}

private let rdRebalanceCallback:
    @convention(c) (
        OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
        UnsafeMutableRawPointer?
    ) -> Void = { rk, err, partitions, opaque in
        guard let opaque, let partitions else { return }
        let ctx = Unmanaged<RDKafkaClient.CallbackContext>.fromOpaque(opaque).takeUnretainedValue()
        if let handler = ctx.rebalanceHandler {
            handler(err, partitions)
        } else if let rk {
            // No handler (cannot happen after init): keep librdkafka's state machine going.
            _ = rd_kafka_assign(rk, err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS ? partitions : nil)
        }
    }

/// librdkafka's statistics JSON: per partition of the consumed topics, the offsets the lag is computed
/// from (`topics.<t>.partitions.<p>`: `hi_offset`, `ls_offset`, `lo_offset`, `consumer_lag`; -1 = unknown;
/// partition -1 is librdkafka's internal "unassigned" entry).
private let rdStatisticsCallback: @convention(c) (OpaquePointer?, UnsafeMutablePointer<CChar>?, Int, UnsafeMutableRawPointer?) -> Int32 = {
    rk, json, length, _ in
    guard let ctx = context(of: rk), let json else { return 0 }
    let data = Data(bytes: json, count: length)
    guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
        let topics = root["topics"] as? [String: Any]
    else { return 0 }
    var offsets: [TopicPartition: RDKafkaClient.PartitionOffsets] = [:]
    for (topic, value) in topics {
        guard let partitions = (value as? [String: Any])?["partitions"] as? [String: Any] else { continue }
        for (key, p) in partitions {
            guard let partition = Int32(key), partition >= 0, let fields = p as? [String: Any] else { continue }
            func number(_ name: String) -> Int64 { (fields[name] as? NSNumber)?.int64Value ?? -1 }
            // The last stable offset is the high watermark a read_committed consumer sees.
            let ls = number("ls_offset")
            offsets[TopicPartition(topic: topic, partition: partition)] = RDKafkaClient.PartitionOffsets(
                high: ls >= 0 ? ls : number("hi_offset"), low: number("lo_offset"), librdkafkaLag: number("consumer_lag"))
        }
    }
    ctx.partitionOffsets.withLock { $0 = offsets }
    return 0  // librdkafka frees the JSON
}

/// Delivery reports: `_private` is a retained `DeliveryGroup` (one retain per enqueued message).
private let rdDeliveryReportCallback:
    @convention(c) (OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?) -> Void = {
        _, m, _ in
        guard let m, let opaque = m.pointee._private else { return }
        let group = Unmanaged<DeliveryGroup>.fromOpaque(opaque).takeRetainedValue()
        let msg = m.pointee
        if msg.err == RD_KAFKA_RESP_ERR_NO_ERROR {
            group.delivered(failure: nil)
        } else {
            // Failure path only: copy what the caller needs to identify (and maybe re-send) the message.
            group.delivered(
                failure: KafkaDeliveryFailure(
                    topic: msg.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? "?",
                    partition: msg.partition,
                    key: msg.key.map { Array(UnsafeRawBufferPointer(start: $0, count: msg.key_len)) },
                    value: msg.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: msg.len)) } ?? [],
                    error: KafkaError(msg.err, "delivery")))
        }
    }

// MARK: - Mock cluster

extension RDKafkaClient {
    /// Starts librdkafka's mock cluster inside this (producer) handle. Returns the cluster pointer.
    func startMockCluster(brokers: Int32) -> OpaquePointer? { rd_kafka_mock_cluster_new(handle, brokers) }

    static func mockBootstraps(_ cluster: OpaquePointer) -> String {
        String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    static func mockCreateTopic(_ cluster: OpaquePointer, name: String, partitions: Int32, replication: Int32) throws {
        let err = rd_kafka_mock_topic_create(cluster, name, partitions, replication)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "mock topic create \(name)") }
    }

    static func mockSetTopicError(_ cluster: OpaquePointer, name: String, code: Int32) {
        rd_kafka_mock_topic_set_error(cluster, name, rd_kafka_resp_err_t(rawValue: code))
    }

    static func mockDestroy(_ cluster: OpaquePointer) { rd_kafka_mock_cluster_destroy(cluster) }

    static func mockSetBroker(_ cluster: OpaquePointer, id: Int32, up: Bool) throws {
        let err = up ? rd_kafka_mock_broker_set_up(cluster, id) : rd_kafka_mock_broker_set_down(cluster, id)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "mock broker \(id) \(up ? "up" : "down")") }
    }

    static func mockSetLeader(_ cluster: OpaquePointer, topic: String, partition: Int32, broker: Int32) throws {
        let err = rd_kafka_mock_partition_set_leader(cluster, topic, partition, broker)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "mock leader \(topic)/\(partition) → \(broker)") }
    }

    static func mockSetGroupCoordinator(_ cluster: OpaquePointer, group: String, broker: Int32) throws {
        let err = rd_kafka_mock_coordinator_set(cluster, "group", group, broker)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "mock coordinator \(group) → \(broker)") }
    }
}
