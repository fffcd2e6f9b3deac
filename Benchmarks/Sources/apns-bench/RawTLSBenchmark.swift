import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import NIOCore
import NIOPosix
import NIOSSL

/// The "raw TLS limit": how many notifications per second the gateway simulator accepts when a writer
/// does nothing but stream pre-encoded frames in big TLS writes. Later benchmarks of the sender
/// compare against this figure, measured in the same run.
enum RawTLSBenchmark {
    static func run(arguments: [String]) async throws {
        let frames = arguments.first.flatMap(Int.init) ?? 1_000_000
        let result = try await measure(frames: frames, connections: 1)
        print("\n## Gateway simulator, raw TLS limit")
        print("| writer | notifications | seconds | notifications/s | MB/s |")
        print("|---|---:|---:|---:|---:|")
        print(result.row)
    }

    struct Result {
        var frames: Int
        var bytes: Int
        var seconds: Double
        var perSecond: Double { Double(frames) / seconds }
        var row: String {
            "| raw TLS, 1 connection, 256 KiB writes | \(frames.formatted()) | \(String(format: "%.2f", seconds)) | \(Int(perSecond).formatted()) | \(String(format: "%.0f", Double(bytes) / seconds / 1e6)) |"
        }
    }

    static var certificates: String {
        ProcessInfo.processInfo.environment["APNS_CERTS_DIR"] ?? ".run/certs"
    }

    /// Starts a simulator (recording to a file, as in tests), streams `frames` pre-encoded frames over
    /// one TLS connection, and times until the simulator has accepted them all.
    static func measure(frames: Int, connections: Int) async throws -> Result {
        var config = SimulatorConfiguration(tls: .testCertificates(in: certificates))
        let records = FileManager.default.temporaryDirectory.appendingPathComponent("apns-bench-records-\(getpid()).ndjson").path
        config.recordsPath = records
        let simulator = try GatewaySimulator(configuration: config)
        try await simulator.start()
        defer { try? FileManager.default.removeItem(atPath: records) }

        // 256 KiB of frames, written again and again (identifiers differ per chunk position only:
        // the simulator does not care, and the writer must not spend time encoding).
        let payload = Array(#"{"aps":{"alert":"Spring sale: 20% off everything until Sunday","badge":1,"sound":"default"}}"#.utf8)
        let frameSize = FrameEncoder.command2Size(payloadCount: payload.count)
        let perChunk = (256 * 1024) / frameSize
        var chunk = ByteBufferAllocator().buffer(capacity: perChunk * frameSize)
        payload.withUnsafeBytes { p in
            for i in 0..<perChunk {
                FrameEncoder.writeCommand2(
                    token: try! DeviceToken(hex: String(format: "%064x", i)), payload: p, identifier: UInt32(i + 1),
                    expiry: 0, priority: .immediate, into: &chunk)
            }
        }

        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file("\(certificates)/ca.pem")
        tls.certificateChain = try NIOSSLCertificate.fromPEMFile("\(certificates)/com.example.shop.pem").map { .certificate($0) }
        tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: "\(certificates)/com.example.shop.key", format: .pem))
        let context = try NIOSSLContext(configuration: tls)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let channel = try await ClientBootstrap(group: group)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    try ch.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                }
            }
            .connect(host: "127.0.0.1", port: simulator.ports.gateway).get()

        let chunks = (frames + perChunk - 1) / perChunk
        let total = chunks * perChunk
        let start = DispatchTime.now().uptimeNanoseconds
        // Keep a few writes in flight: enough to never let the socket idle, bounded memory.
        var inFlight: [EventLoopFuture<Void>] = []
        for _ in 0..<chunks {
            inFlight.append(channel.writeAndFlush(chunk))
            if inFlight.count >= 8 { try await inFlight.removeFirst().get() }
        }
        for f in inFlight { try await f.get() }
        while simulator.totals.accepted < total { try await Task.sleep(for: .milliseconds(1)) }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        try await channel.close()
        try await group.shutdownGracefully()
        try await simulator.stop()
        return Result(frames: total, bytes: total * frameSize, seconds: seconds)
    }
}
