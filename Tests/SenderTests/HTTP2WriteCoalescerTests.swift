import NIOCore
import NIOEmbedded
import Testing

@testable import Sender

/// The buffer before TLS: what NIO-HTTP2 writes between two flushes leaves as one write, in order,
/// and every promise is kept (succeeded with the joined write, failed when the channel closes first).
@Suite struct HTTP2WriteCoalescerTests {
    @Test func writesBetweenFlushesLeaveAsOneBufferInOrder() throws {
        let channel = EmbeddedChannel(handler: HTTP2WriteCoalescer())
        let first = channel.eventLoop.makePromise(of: Void.self)
        let second = channel.eventLoop.makePromise(of: Void.self)
        channel.write(IOData.byteBuffer(ByteBuffer(string: "HEADERS")), promise: first)
        channel.write(IOData.byteBuffer(ByteBuffer(string: "+DATA")), promise: nil)
        channel.write(IOData.byteBuffer(ByteBuffer(string: "+payload")), promise: second)
        #expect(try channel.readOutbound(as: IOData.self) == nil)  // nothing before the flush
        channel.flush()
        guard case .byteBuffer(let joined) = try channel.readOutbound(as: IOData.self) else {
            Issue.record("expected one buffer")
            return
        }
        #expect(String(buffer: joined) == "HEADERS+DATA+payload")
        #expect(try channel.readOutbound(as: IOData.self) == nil)
        try first.futureResult.wait()
        try second.futureResult.wait()

        // The next flush carries only what was written after the last one.
        channel.writeAndFlush(IOData.byteBuffer(ByteBuffer(string: "PING")), promise: nil)
        guard case .byteBuffer(let next) = try channel.readOutbound(as: IOData.self) else {
            Issue.record("expected a second buffer")
            return
        }
        #expect(String(buffer: next) == "PING")
        _ = try channel.finish()
    }

    @Test func unflushedWritesFailWhenTheChannelCloses() throws {
        let channel = EmbeddedChannel(handler: HTTP2WriteCoalescer())
        let promise = channel.eventLoop.makePromise(of: Void.self)
        channel.write(IOData.byteBuffer(ByteBuffer(string: "never flushed")), promise: promise)
        try channel.close().wait()
        #expect(throws: ChannelError.self) { try promise.futureResult.wait() }
        #expect(try channel.readOutbound(as: IOData.self) == nil)
    }
}
