import APNsProtocol
import APNsTransport
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Sender

/// Gateway throughput: the simulator's "raw TLS limit" (a writer that only streams pre-encoded frames
/// in big writes) and the sender with 1, 4 and 8 shards, against the same simulator process, in one run.
///
/// Both end the same way: a drain probe (a frame with no payload) after the last notification, and the
/// clock stops when the gateway answers it — which proves every notification before it was processed.
enum GatewayBenchmark {
    static var certificates: String { ProcessInfo.processInfo.environment["APNS_CERTS_DIR"] ?? ".run/certs" }

    static func run(arguments: [String]) async throws {
        var port = 2195
        var jobs = 1_000_000
        var shardCounts = [1, 4, 8]
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--port":
                port = Int(arguments[i + 1])!
                i += 1
            case "--jobs":
                jobs = Int(arguments[i + 1])!
                i += 1
            case "--shards":
                shardCounts = arguments[i + 1].split(separator: ",").map { Int($0)! }
                i += 1
            default: break
            }
            i += 1
        }
        let raw = try await rawTLS(port: port, frames: jobs)
        var rows = [raw]
        for shards in shardCounts {
            rows.append(try await sender(port: port, jobs: jobs, shards: shards))
        }
        print("\n## Sender vs the simulator's raw TLS limit (\(jobs.formatted()) notifications, 166-byte frames)")
        print("| writer | notifications/s | vs raw TLS | frames/write | KiB/write | CPU s per million (writer process) |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows {
            print(
                "| \(r.name) | \(Int(r.perSecond).formatted()) | \(String(format: "%.2f×", r.perSecond / raw.perSecond)) | \(r.framesPerWrite.map { String(format: "%.0f", $0) } ?? "–") | \(r.bytesPerWrite.map { String(format: "%.0f", $0 / 1024) } ?? "–") | \(String(format: "%.2f", r.cpuSeconds / Double(jobs) * 1e6)) |"
            )
        }
    }

    struct Row {
        var name: String
        var perSecond: Double
        var cpuSeconds: Double
        var framesPerWrite: Double?
        var bytesPerWrite: Double?
    }

    static let payload = Array(#"{"aps":{"alert":"Spring sale: 20% off everything until Sunday","badge":1}}"#.utf8)

    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// Streams pre-encoded frames in 256 KiB writes, then a probe; stops the clock at the probe's answer.
    static func rawTLS(port: Int, frames: Int) async throws -> Row {
        let frameSize = FrameEncoder.command2Size(payloadCount: payload.count)
        let perChunk = (256 * 1024) / frameSize
        let chunks = (frames + perChunk - 1) / perChunk
        var chunk = ByteBufferAllocator().buffer(capacity: perChunk * frameSize)
        payload.withUnsafeBytes { p in
            for i in 0..<perChunk {
                FrameEncoder.writeCommand2(
                    token: try! DeviceToken(hex: String(format: "%064x", i + 1)), payload: p, identifier: UInt32(i + 1),
                    expiry: 0, priority: .immediate, into: &chunk)
            }
        }
        var probe = ByteBufferAllocator().buffer(capacity: 64)
        probe.putByte(2)
        probe.putUInt32BE(42)
        probe.putByte(1)
        probe.putUInt16BE(32)
        probe.writeRepeatingByte(0, count: 32)
        probe.putByte(3)
        probe.putUInt16BE(4)
        probe.putUInt32BE(0xFFFF_FFFF)

        let context = try ProviderCredentials.test(app: "com.example.shop", in: certificates).makeClientContext()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let answered = group.next().makePromise(of: [UInt8].self)
        let channel = try await ClientBootstrap(group: group)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    try ch.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    try ch.pipeline.syncOperations.addHandler(AnswerCollector(promise: answered))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        let cpu0 = cpuSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        var inFlight: [EventLoopFuture<Void>] = []
        for _ in 0..<chunks {
            inFlight.append(channel.writeAndFlush(chunk))
            if inFlight.count >= 8 { try await inFlight.removeFirst().get() }
        }
        try await channel.writeAndFlush(probe).get()
        let answer = try await answered.futureResult.get()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpu = cpuSeconds() - cpu0
        precondition(answer == [8, 4, 0xFF, 0xFF, 0xFF, 0xFF], "the probe was not answered as expected: \(answer)")
        try? await channel.close()
        try await group.shutdownGracefully()
        return Row(
            name: "raw TLS limit (1 connection, pre-encoded, 256 KiB writes)", perSecond: Double(chunks * perChunk) / seconds,
            cpuSeconds: cpu * Double(frames) / Double(chunks * perChunk), framesPerWrite: Double(perChunk),
            bytesPerWrite: Double(perChunk * frameSize))
    }

    final class AnswerCollector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let promise: EventLoopPromise<[UInt8]>
        init(promise: EventLoopPromise<[UInt8]>) { self.promise = promise }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let b = unwrapInboundIn(data)
            promise.succeed(Array(b.readableBytesView))
        }
        func channelInactive(context: ChannelHandlerContext) { promise.fail(ChannelError.ioOnClosedChannel) }
    }

    /// The sender: `jobs` notifications through a pool of `shards`, then a drain (probe on every shard).
    static func sender(port: Int, jobs: Int, shards: Int) async throws -> Row {
        let events = EventTotals()
        // The replay buffer caps a shard at replayMaxCount ÷ settleAfter notifications/s (everything
        // written in the last `settleAfter` must be kept): size it for the rate, as the README says.
        var shard = ShardConfiguration()
        shard.settleAfter = .milliseconds(500)
        shard.replayMaxCount = 262_144
        shard.replayMaxBytes = 64 * 1024 * 1024
        // The unsettled window's default (settle_after × 16 MiB/s) is sized for a pipeline's rate, not for
        // the raw TLS limit on loopback: here the whole replay buffer may be unsettled.
        shard.maxUnsettledBytes = shard.replayMaxBytes
        shard.minUnsettledBytes = shard.replayMaxBytes
        let config = BinaryTransportConfiguration(
            credentials: .test(app: "com.example.shop", in: certificates),
            gateways: [GatewayAddress(host: "127.0.0.1", port: port)], shards: shards, shard: shard,
            serverHostname: "localhost")
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pool = try BinaryTransport(configuration: config, group: group, onOutcomes: { events.add($0) })
        // Notifications are built before the clock starts: this measures the sender, not job decoding.
        let batch = 1000
        var batches: [[PushNotification]] = []
        for start in stride(from: 0, to: jobs, by: batch) {
            batches.append(
                (start..<min(jobs, start + batch)).map { n in
                    PushNotification(
                        jobID: "bench:\(n)", app: "com.example.shop", token: try! DeviceToken(hex: String(format: "%064x", n + 1)),
                        payload: payload, expiry: 0, priority: .immediate)
                })
        }
        let cpu0 = cpuSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        for b in batches { try await pool.send(b) }
        let results = await pool.drainAndClose()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpu = cpuSeconds() - cpu0
        try await group.shutdownGracefully()
        let e = events.value
        precondition(results.allSatisfy { $0 == .provedByProbe }, "drain not proved by probe: \(results)")
        precondition(e.accepted == jobs, "accepted \(e.accepted) of \(jobs)")
        return Row(
            name: "sender, \(shards) shard\(shards == 1 ? "" : "s")", perSecond: Double(jobs) / seconds, cpuSeconds: cpu,
            framesPerWrite: Double(e.events.framesWritten) / Double(max(1, e.events.writes)),
            bytesPerWrite: Double(e.events.bytesWritten) / Double(max(1, e.events.writes)))
    }

    final class EventTotals: @unchecked Sendable {
        private let lock = NSLock()
        private var accepted = 0
        private var events = SenderEvents()
        func add(_ b: OutcomeBatch) {
            lock.lock()
            accepted += b.outcomes.lazy.filter { $0.kind == .accepted }.count
            events += b.events
            lock.unlock()
        }
        var value: (accepted: Int, events: SenderEvents) {
            lock.lock()
            defer { lock.unlock() }
            return (accepted, events)
        }
    }
}
