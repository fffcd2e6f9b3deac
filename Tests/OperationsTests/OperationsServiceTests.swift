import Foundation
import Logging
import NIOPosix
import ServiceLifecycle
import Testing

@testable import Operations

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The operations port as `run` runs it: a service before the pipeline in one service group, on the
/// pipeline's event loops.
@Suite struct OperationsServiceTests {
    /// Stands in for the pipeline: told to stop, it drains until the test lets it end.
    struct Draining: Service {
        let stopping: AsyncStream<Void>.Continuation
        let release: AsyncStream<Void>

        func run() async throws {
            try? await gracefulShutdown()
            stopping.yield()
            for await _ in release { return }
        }
    }

    /// The group stops the pipeline first: the port answers the probes and `/metrics` while it drains,
    /// and closes once it is done; the loops it ran on are the caller's and outlive it.
    @Test func thePortAnswersWhileThePipelineDrainsThenCloses() async throws {
        let loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let server = try await OperationsServer(
            host: "127.0.0.1", port: 0, routes: .init(metrics: { Array("apns_up 1\n".utf8) }, readiness: { ["stopping"] }),
            logger: testLogger, eventLoopGroup: loops)
        let base = "http://127.0.0.1:\(server.port)"
        let (stopping, stoppingIn) = AsyncStream<Void>.makeStream()
        let (release, releaseIn) = AsyncStream<Void>.makeStream()
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: server), .init(service: Draining(stopping: stoppingIn, release: release))], logger: testLogger))
        let running = Task { try await group.run() }
        #expect(try await get(base + "/healthz").status == 200)

        await group.triggerGracefulShutdown()
        for await _ in stopping { break }
        #expect(try await get(base + "/healthz").body == "ok\n")
        #expect(try await get(base + "/readyz").status == 503)
        #expect(try await get(base + "/metrics").body == "apns_up 1\n")

        releaseIn.yield()
        try await running.value
        await #expect(throws: (any Error).self) { try await get(base + "/healthz", headers: [:], timeout: 10) }
        #expect(server.openConnections == 0)
        // Still the caller's to use, and to shut down.
        #expect(try await loops.next().submit { 1 }.get() == 1)
        try await loops.shutdownGracefully()
    }
}
