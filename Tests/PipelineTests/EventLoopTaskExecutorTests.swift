import NIOCore
import NIOPosix
import Testing

@testable import Pipeline

/// The written marks' task runs on an event loop, not on Swift's pool (`WrittenMarks`): every part of a
/// task with the preference, before and after each suspension, runs on the loop's thread.
@Suite struct EventLoopTaskExecutorTests {
    @Test func aTaskWithThePreferenceRunsOnTheLoopAcrossSuspensions() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let executor = EventLoopTaskExecutor(loop)
        let onLoop = await withTaskExecutorPreference(executor) { () async -> [Bool] in
            var seen = [loop.inEventLoop]
            for _ in 0..<3 {
                try? await Task.sleep(for: .milliseconds(1))
                seen.append(loop.inEventLoop)
                await Task.yield()
                seen.append(loop.inEventLoop)
            }
            return seen
        }
        #expect(onLoop == Array(repeating: true, count: 7))
        try await group.shutdownGracefully()
    }
}
