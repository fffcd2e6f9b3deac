import APNsProtocol
import NIOCore
import NIOHPACK
import Testing

@testable import Sender

private typealias Kind = HTTP2FrameHeader.Kind
private typealias Flag = HTTP2FrameHeader.Flag

private func frame(_ type: UInt8, flags: UInt8 = 0, stream: UInt32 = 0, _ payload: [UInt8] = []) -> [UInt8] {
    var b = ByteBuffer()
    HTTP2FrameHeader(length: payload.count, type: type, flags: flags, streamID: stream).write(into: &b)
    b.writeBytes(payload)
    return Array(b.readableBytesView)
}

private func frame(_ type: UInt8, flags: UInt8 = 0, stream: UInt32 = 0, _ payload: ByteBuffer) -> [UInt8] {
    frame(type, flags: flags, stream: stream, Array(payload.readableBytesView))
}

private func u32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
private func setting(_ id: UInt16, _ v: UInt32) -> [UInt8] { [UInt8(id >> 8), UInt8(id & 0xFF)] + u32(v) }

/// The sender's HTTP/2 codec without sockets: requests as the server's HPACK decoder (NIO's) reads
/// them, a response burst split at every byte, protocol violations as connection errors, and send
/// flow control.
@Suite struct HTTP2ClientFrameCodecTests {
    static let allocator = ByteBufferAllocator()
    static let authorization = "bearer " + String(repeating: "eyJhbGciOiJFUzI1NiJ9", count: 10)

    static func head(_ i: Int, collapseID: String? = nil) throws -> HTTP2Request {
        try HTTP2Request(HTTP2RequestTests.notification(collapseID: collapseID, jobID: "job-\(i)"))
    }

    /// A codec that has written requests on streams 1, 3, …, 2n-1 (and taken its output).
    static func codec(requests n: Int = 4, payload: [UInt8] = Array("{}".utf8)) throws -> HTTP2ClientFrameCodec {
        var codec = HTTP2ClientFrameCodec(allocator: allocator)
        codec.writePreface()
        for i in 0..<n {
            codec.writeRequest(
                streamID: UInt32(2 * i + 1), head: try head(i), authority: "localhost", authorization: authorization, payload: payload)
        }
        _ = codec.takeOutbound()
        return codec
    }

    /// The frames in `bytes` (after the client preface, if it starts with one).
    static func frames(_ bytes: ByteBuffer?) -> [(header: HTTP2FrameHeader, payload: ByteBuffer)] {
        guard var bytes else { return [] }
        if bytes.readableBytesView.starts(with: Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)) { bytes.moveReaderIndex(forwardBy: 24) }
        var parser = HTTP2FrameParser()
        parser.maxFrameSize = 1 << 24
        parser.append(bytes)
        var out: [(HTTP2FrameHeader, ByteBuffer)] = []
        while let f = try! parser.next() { out.append(f) }
        #expect(parser.bufferedBytes == 0)
        return out
    }

    static func receive(_ codec: inout HTTP2ClientFrameCodec, _ bytes: [UInt8]) -> [HTTP2ClientFrameCodec.Event] {
        var events: [HTTP2ClientFrameCodec.Event] = []
        codec.receive(ByteBuffer(bytes: bytes), into: &events)
        return events
    }

    // MARK: requests

    @Test func requestsAreHeadersAndDataThatNIOsDecoderReads() throws {
        var codec = HTTP2ClientFrameCodec(allocator: Self.allocator)
        codec.writePreface()
        let payload = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        // Enough requests to outgrow the buffer's first allocation.
        let count = 300
        for i in 0..<count {
            codec.writeRequest(
                streamID: UInt32(2 * i + 1), head: try Self.head(i, collapseID: i == 1 ? "sale" : nil), authority: "localhost",
                authorization: Self.authorization, payload: payload)
        }
        let out = codec.takeOutbound()
        #expect(out?.readableBytesView.starts(with: Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)) == true)
        let frames = Self.frames(out)
        #expect(frames.count == 2 + 2 * count)
        // Our SETTINGS: no push, a 1 MiB stream window; then the connection window opened by 16 MiB.
        #expect(frames[0].header == HTTP2FrameHeader(length: 12, type: Kind.settings, flags: 0, streamID: 0))
        #expect(Array(frames[0].payload.readableBytesView) == setting(2, 0) + setting(4, 1 << 20))
        #expect(
            frames[1].header.type == Kind.windowUpdate
                && frames[1].payload.getInteger(at: frames[1].payload.readerIndex, as: UInt32.self) == 16 << 20)

        var decoder = HPACKDecoder(allocator: Self.allocator)
        var blockLengths: [Int] = []
        for i in 0..<count {
            let (h, d) = (frames[2 + 2 * i], frames[3 + 2 * i])
            #expect(h.header.type == Kind.headers && h.header.flags == Flag.endHeaders && h.header.streamID == UInt32(2 * i + 1))
            #expect(d.header.type == Kind.data && d.header.flags == Flag.endStream && d.header.streamID == UInt32(2 * i + 1))
            #expect(Array(d.payload.readableBytesView) == payload)
            var block = h.payload
            let headers = try decoder.decodeHeaders(from: &block)
            let r = try Self.head(i, collapseID: i == 1 ? "sale" : nil)
            var expected: [(String, String)] = [
                (":method", "POST"), (":scheme", "https"), (":path", r.path), (":authority", "localhost"),
                ("authorization", Self.authorization), ("apns-topic", r.topic), ("apns-id", r.apnsID),
                ("apns-expiration", r.expiration), ("apns-priority", r.priority), ("apns-push-type", r.pushType.rawValue),
            ]
            if i == 1 { expected.append(("apns-collapse-id", "sale")) }
            #expect(headers.map { "\($0.name): \($0.value)" } == expected.map { "\($0.0): \($0.1)" })
            // Unique per request: never entered into the table.
            for field in headers where [":path", "apns-id", "apns-collapse-id"].contains(field.name) {
                #expect(field.indexable == .nonIndexable)
            }
            blockLengths.append(h.header.length)
        }
        // After the first request the shared fields are one-byte indexes: what remains is :path and
        // apns-id (and their literal names), ~120 bytes, whatever the token's length.
        #expect(blockLengths[0] > Self.authorization.utf8.count)
        #expect(blockLengths[2] < 140)
        #expect(Set(blockLengths.dropFirst(2)).count == 1)
    }

    /// A header block longer than the server's frame size (a 20 kB authorization: 16 384 is the
    /// smallest SETTINGS_MAX_FRAME_SIZE) leaves as HEADERS and CONTINUATION frames, the last one with
    /// END_HEADERS, then its DATA; the server's decoder reads the whole block.
    @Test func aLongHeaderBlockIsSplitIntoContinuationFrames() throws {
        var codec = try Self.codec(requests: 0)
        let authorization = "bearer " + String(repeating: "x", count: 20_000)
        let payload = Array(#"{"aps":{}}"#.utf8)
        codec.writeRequest(streamID: 1, head: try Self.head(1), authority: "localhost", authorization: authorization, payload: payload)
        let frames = Self.frames(codec.takeOutbound())
        #expect(frames.map(\.header.type) == [Kind.headers, Kind.continuation, Kind.data])
        #expect(frames[0].header.flags == 0 && frames[0].header.length == 16_384)
        #expect(frames[1].header.flags == Flag.endHeaders && frames[1].header.streamID == 1)
        #expect(frames[2].header.flags == Flag.endStream && Array(frames[2].payload.readableBytesView) == payload)
        var block = frames[0].payload
        var rest = frames[1].payload
        block.writeBuffer(&rest)
        var decoder = HPACKDecoder(allocator: Self.allocator, maxDynamicTableSize: 4096, maxHeaderListSize: 1 << 20)
        let headers = try decoder.decodeHeaders(from: &block)
        #expect(headers.first(name: "authorization") == authorization)
        #expect(headers.first(name: "apns-id") == (try Self.head(1)).apnsID)
    }

    @Test func theServersHeaderTableSizeBoundsTheEncoder() throws {
        var codec = try Self.codec(requests: 0)
        _ = Self.receive(&codec, frame(Kind.settings, setting(1, 0)))
        #expect(codec.failed == nil)
        _ = codec.takeOutbound()  // the SETTINGS ack
        // The server's decoder, told the same size.
        var decoder = HPACKDecoder(allocator: Self.allocator, maxDynamicTableSize: 0)
        for i in 0..<3 {
            codec.writeRequest(
                streamID: UInt32(2 * i + 1), head: try Self.head(i), authority: "localhost", authorization: Self.authorization, payload: [1]
            )
            var block = Self.frames(codec.takeOutbound())[0].payload
            // The first block after the change signals it: a dynamic table size update to 0.
            if i == 0 { #expect(block.getInteger(at: block.readerIndex, as: UInt8.self) == 0x20) }
            let headers = try decoder.decodeHeaders(from: &block)
            #expect(headers.first(name: "authorization") == Self.authorization)
            #expect(codec.encoder.tableSize == 0)
        }
        // Allowed a table again: signalled, and the shared fields are indexed again.
        _ = Self.receive(&codec, frame(Kind.settings, setting(1, 8192)))
        decoder.maxDynamicTableLength = 8192
        for i in 3..<5 {
            codec.writeRequest(
                streamID: UInt32(2 * i + 1), head: try Self.head(i), authority: "localhost", authorization: Self.authorization, payload: [1]
            )
            var block = Self.frames(codec.takeOutbound()).last { $0.header.type == Kind.headers }!.payload
            _ = try decoder.decodeHeaders(from: &block)
        }
        // At most our preferred 4096, even when the server allows more.
        #expect(codec.encoder.maxTableSize == 4096 && codec.encoder.tableSize > 0)
    }

    /// Values that keep changing (topics, expirations, a long token renewed) churn the table: what the
    /// encoder believes the server's table holds must stay what NIO's decoder holds, through evictions.
    @Test func theEncodersTableStaysInStepWithTheDecodersThroughEvictions() throws {
        var codec = HTTP2ClientFrameCodec(allocator: Self.allocator)
        var decoder = HPACKDecoder(allocator: Self.allocator)
        for i in 0..<400 {
            var head = try Self.head(i)
            head.topic = "com.example.app\(i % 7)"
            head.expiration = String(1_700_000_000 + i / 3)
            head.priority = i % 5 == 0 ? "5" : "10"
            let token = "bearer " + String(repeating: Character(String(i / 50)), count: 900)
            codec.writeRequest(streamID: UInt32(2 * i + 1), head: head, authority: "localhost", authorization: token, payload: [1])
            var block = Self.frames(codec.takeOutbound())[0].payload
            let headers = try decoder.decodeHeaders(from: &block)
            #expect(headers.first(name: "apns-topic") == head.topic)
            #expect(headers.first(name: "apns-expiration") == head.expiration)
            #expect(headers.first(name: "apns-priority") == head.priority)
            #expect(headers.first(name: "authorization") == token)
            #expect(headers.first(name: ":path") == head.path)
            #expect(codec.encoder.tableSize <= 4096)
        }
    }

    // MARK: responses

    /// A burst from the server touching every frame type the codec reads, and what it must make of it.
    static func responseBurst() -> (bytes: [UInt8], events: [HTTP2ClientFrameCodec.Event]) {
        var encoder = HPACKEncoder(allocator: allocator)  // Huffman and the dynamic table, as a server may use them
        func block(_ status: String, id: String) -> ByteBuffer {
            var b = ByteBuffer()
            try! encoder.encode(headers: [":status": status, "apns-id": id], to: &b)
            return b
        }
        let body = Array(#"{"reason":"BadDeviceToken"}"#.utf8)
        var bytes: [UInt8] = []
        bytes += frame(Kind.settings, setting(3, 10) + setting(4, 1 << 16) + setting(5, 32768) + setting(1, 4096))
        bytes += frame(Kind.headers, flags: Flag.endHeaders | Flag.endStream, stream: 1, block("200", id: "A"))
        bytes += frame(Kind.ping, flags: Flag.ack, [0, 0, 0, 0, 0, 0, 0, 1])
        bytes += frame(0x20, flags: 0xFF, stream: 3, [1, 2, 3])  // an unknown type: ignored
        bytes += frame(Kind.priority, stream: 3, [0, 0, 0, 1, 16])
        // PADDED and PRIORITY: pad length, 5 priority bytes, the block, the padding.
        bytes += frame(
            Kind.headers, flags: Flag.endHeaders | Flag.padded | Flag.priority, stream: 3,
            [3] + [0, 0, 0, 0, 7] + Array(block("400", id: "B").readableBytesView) + [0, 0, 0])
        bytes += frame(Kind.data, flags: Flag.padded, stream: 3, [4] + body.prefix(10) + [0, 0, 0, 0])
        bytes += frame(Kind.data, flags: Flag.endStream, stream: 3, Array(body.dropFirst(10)))
        bytes += frame(Kind.ping, [9, 8, 7, 6, 5, 4, 3, 2])
        bytes += frame(Kind.windowUpdate, u32(1000))
        let split = Array(block("200", id: "C").readableBytesView)
        bytes += frame(Kind.headers, flags: Flag.endStream, stream: 5, Array(split.prefix(2)))
        bytes += frame(Kind.continuation, stream: 5, Array(split.dropFirst(2).prefix(1)))
        bytes += frame(Kind.continuation, flags: Flag.endHeaders, stream: 5, Array(split.dropFirst(3)))
        bytes += frame(Kind.rstStream, stream: 7, u32(0x7))
        bytes += frame(Kind.goAway, u32(5) + u32(0))
        bytes += frame(Kind.settings, flags: Flag.ack)
        let events: [HTTP2ClientFrameCodec.Event] = [
            .settings(maxConcurrentStreams: 10),
            .answer(.init(streamID: 1, status: 200, reason: nil, timestamp: nil)),
            .pingAck,
            .answer(.init(streamID: 3, status: 400, reason: "BadDeviceToken", timestamp: nil)),
            .answer(.init(streamID: 5, status: 200, reason: nil, timestamp: nil)),
            .reset(streamID: 7, code: .refusedStream),
            .goAway(lastStreamID: 5, code: .noError, debug: nil),
        ]
        return (bytes, events)
    }

    @Test func aResponseBurstSplitAtEveryByteGivesTheSameEvents() throws {
        let (bytes, expected) = Self.responseBurst()
        var whole = try Self.codec()
        #expect(Self.receive(&whole, bytes) == expected)
        #expect(whole.failed == nil)
        #expect(whole.unacknowledgedBytes == 15 + 17)  // DATA counts its padding and pad length against the window
        // Our answers: the SETTINGS ack and the PING's ack with its data.
        let acks = Self.frames(whole.takeOutbound())
        #expect(
            acks.map(\.header) == [
                HTTP2FrameHeader(length: 0, type: Kind.settings, flags: Flag.ack, streamID: 0),
                HTTP2FrameHeader(length: 8, type: Kind.ping, flags: Flag.ack, streamID: 0),
            ])
        #expect(Array(acks[1].payload.readableBytesView) == [9, 8, 7, 6, 5, 4, 3, 2])
        #expect(whole.peerMaxFrameSize == 32768 && whole.initialStreamSendWindow == 1 << 16)

        for cut in 1..<bytes.count {
            var codec = try Self.codec()
            let events = Self.receive(&codec, Array(bytes[..<cut])) + Self.receive(&codec, Array(bytes[cut...]))
            #expect(events == expected, "split at \(cut)")
            #expect(codec.failed == nil)
        }
        var trickle = try Self.codec()
        var events: [HTTP2ClientFrameCodec.Event] = []
        for b in bytes { events += Self.receive(&trickle, [b]) }
        #expect(events == expected)
    }

    @Test(
        arguments: [
            // A frame longer than our MAX_FRAME_SIZE: refused from its header alone.
            ("oversized frame", [0x00, 0x40, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01], HTTP2WireErrorCode.frameSizeError),
            ("DATA on a stream never opened", frame(Kind.data, stream: 9, [1]), .protocolError),
            ("DATA on stream 0", frame(Kind.data, [1]), .protocolError),
            ("HEADERS on a server stream", frame(Kind.headers, flags: Flag.endHeaders, stream: 2, [0x88]), .protocolError),
            ("PING of 7 bytes", frame(Kind.ping, [1, 2, 3, 4, 5, 6, 7]), .frameSizeError),
            ("padding longer than the frame", frame(Kind.data, flags: Flag.padded, stream: 1, [5, 1, 2]), .protocolError),
            ("CONTINUATION alone", frame(Kind.continuation, flags: Flag.endHeaders, stream: 1, [0x88]), .protocolError),
            ("header block interrupted", frame(Kind.headers, stream: 1, [0x88]) + frame(Kind.data, stream: 1, [1]), .protocolError),
            ("SETTINGS of 5 bytes", frame(Kind.settings, [0, 3, 0, 0, 1]), .frameSizeError),
            ("PUSH_PROMISE", frame(Kind.pushPromise, flags: Flag.endHeaders, stream: 1, u32(2) + [0x88]), .protocolError),
            (
                "a header block NIO cannot decode",
                frame(Kind.headers, flags: Flag.endHeaders, stream: 1, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]), .compressionError
            ),
            ("window beyond 2^31-1", frame(Kind.windowUpdate, u32(0x7FFF_FFFF)), .flowControlError),
            ("MAX_FRAME_SIZE below 16384", frame(Kind.settings, setting(5, 100)), .protocolError),
            ("RST_STREAM of 3 bytes", frame(Kind.rstStream, stream: 1, [0, 0, 7]), .frameSizeError),
        ] as [(String, [UInt8], HTTP2WireErrorCode)])
    func protocolViolationsAreConnectionErrors(_ name: String, _ bytes: [UInt8], _ code: HTTP2WireErrorCode) throws {
        var codec = try Self.codec()
        _ = Self.receive(&codec, bytes)
        #expect(codec.failed?.code == code, "\(name)")
        // GOAWAY with the code leaves before the close; nothing read afterwards counts.
        let goAway = Self.frames(codec.takeOutbound()).last
        #expect(goAway?.header.type == Kind.goAway)
        #expect(goAway.flatMap { $0.payload.getInteger(at: $0.payload.readerIndex + 4, as: UInt32.self) } == code.rawValue)
        #expect(Self.receive(&codec, frame(Kind.ping, flags: Flag.ack, [0, 0, 0, 0, 0, 0, 0, 1])).isEmpty)
    }

    // MARK: send flow control

    /// (stream, bytes, END_STREAM) of each DATA frame in `out`.
    static func data(_ out: ByteBuffer?) -> [(UInt32, Int, Bool)] {
        frames(out).filter { $0.header.type == Kind.data }.map {
            ($0.header.streamID, $0.header.length, $0.header.flags & Flag.endStream != 0)
        }
    }

    @Test func dataWaitsForTheStreamWindowInOrder() throws {
        var codec = try Self.codec(requests: 0)
        _ = Self.receive(&codec, frame(Kind.settings, setting(4, 100)))
        _ = codec.takeOutbound()
        codec.writeRequest(
            streamID: 1, head: try Self.head(1), authority: "a", authorization: nil, payload: Array(repeating: 1, count: 300))
        codec.writeRequest(streamID: 3, head: try Self.head(3), authority: "a", authorization: nil, payload: Array(repeating: 3, count: 50))
        // Stream 1 sends what its window allows; stream 3's DATA, which would fit, waits behind it.
        #expect(Self.data(codec.takeOutbound()).map { "\($0)" } == ["(1, 100, false)"])
        #expect(codec.waitingDataCount == 2)
        // A WINDOW_UPDATE for stream 3 alone changes nothing: order is kept.
        #expect(Self.receive(&codec, frame(Kind.windowUpdate, stream: 3, u32(10))).isEmpty)
        #expect(codec.takeOutbound() == nil)
        _ = Self.receive(&codec, frame(Kind.windowUpdate, stream: 1, u32(150)))
        #expect(Self.data(codec.takeOutbound()).map { "\($0)" } == ["(1, 150, false)"])
        // A larger INITIAL_WINDOW_SIZE applies to the waiting streams as a change (+900).
        _ = Self.receive(&codec, frame(Kind.settings, setting(4, 1000)))
        #expect(Self.data(codec.takeOutbound()).map { "\($0)" } == ["(1, 50, true)", "(3, 50, true)"])
        #expect(codec.waitingDataCount == 0)
    }

    @Test func aSmallerInitialWindowCanMakeAWaitingStreamsWindowNegative() throws {
        var codec = try Self.codec(requests: 0)
        _ = Self.receive(&codec, frame(Kind.settings, setting(4, 100)))
        codec.writeRequest(
            streamID: 1, head: try Self.head(1), authority: "a", authorization: nil, payload: Array(repeating: 1, count: 300))
        #expect(Self.data(codec.takeOutbound()).map { "\($0)" } == ["(1, 100, false)"])
        // 100 sent of a window now 50: the stream owes 50 (RFC 9113 §6.9.2) before anything more goes.
        _ = Self.receive(&codec, frame(Kind.settings, setting(4, 50)))
        _ = Self.receive(&codec, frame(Kind.windowUpdate, stream: 1, u32(40)))
        #expect(Self.data(codec.takeOutbound()).isEmpty)
        _ = Self.receive(&codec, frame(Kind.windowUpdate, stream: 1, u32(20)))
        #expect(Self.data(codec.takeOutbound()).map { "\($0)" } == ["(1, 10, false)"])
    }

    @Test func anInformationalAnswerIsFollowedByTheFinalOne() throws {
        var codec = try Self.codec()
        var encoder = HPACKEncoder(allocator: Self.allocator)
        var interim = ByteBuffer()
        var final = ByteBuffer()
        try encoder.encode(headers: [":status": "100"], to: &interim)
        try encoder.encode(headers: [":status": "410"], to: &final)
        let body = Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8)
        let events = Self.receive(
            &codec,
            frame(Kind.headers, flags: Flag.endHeaders, stream: 1, interim) + frame(Kind.headers, flags: Flag.endHeaders, stream: 1, final)
                + frame(Kind.data, flags: Flag.endStream, stream: 1, body))
        #expect(events == [.answer(.init(streamID: 1, status: 410, reason: "Unregistered", timestamp: 1_700_000_000_000))])
    }

    @Test func dataWaitsForTheConnectionWindowAndNeverExceedsTheFrameSize() throws {
        var codec = try Self.codec(requests: 0)
        _ = Self.receive(&codec, frame(Kind.settings, setting(4, 1 << 20)))
        _ = codec.takeOutbound()
        // 14 × 5000 bytes against the connection's 65,535.
        for i in 0..<14 {
            codec.writeRequest(
                streamID: UInt32(2 * i + 1), head: try Self.head(i), authority: "a", authorization: nil,
                payload: Array(repeating: UInt8(i), count: 5000))
        }
        var sent = Self.data(codec.takeOutbound())
        #expect(sent.reduce(0) { $0 + $1.1 } == 65535)
        #expect(codec.connectionSendWindow == 0 && codec.waitingDataCount == 1)
        _ = Self.receive(&codec, frame(Kind.windowUpdate, u32(100_000)))
        sent += Self.data(codec.takeOutbound())
        // Every stream's payload in full, END_STREAM once, on its last frame.
        for i in 0..<14 {
            let frames = sent.filter { $0.0 == UInt32(2 * i + 1) }
            #expect(frames.reduce(0) { $0 + $1.1 } == 5000)
            #expect(frames.map(\.2) == Array(repeating: false, count: frames.count - 1) + [true])
        }
        // A payload longer than the server's MAX_FRAME_SIZE (16384) goes in frames no longer than it.
        codec.writeRequest(
            streamID: 29, head: try Self.head(29), authority: "a", authorization: nil, payload: Array(repeating: 9, count: 20000))
        #expect(Self.data(codec.takeOutbound()).map { "\($0)" } == ["(29, 16384, false)", "(29, 3616, true)"])
    }

    @Test func aResetOrGoAwayDropsWaitingData() throws {
        var codec = try Self.codec(requests: 0)
        _ = Self.receive(&codec, frame(Kind.settings, setting(4, 10)))
        for i in 0..<3 {
            codec.writeRequest(
                streamID: UInt32(2 * i + 1), head: try Self.head(i), authority: "a", authorization: nil,
                payload: Array(repeating: 1, count: 20))
        }
        _ = codec.takeOutbound()
        #expect(codec.waitingDataCount == 3)
        #expect(Self.receive(&codec, frame(Kind.rstStream, stream: 1, u32(8))) == [.reset(streamID: 1, code: .cancel)])
        // Stream 3 is now first: what its window allows goes.
        #expect(Self.data(codec.takeOutbound()).map { "\($0)" } == ["(3, 10, false)"])
        _ = Self.receive(&codec, frame(Kind.goAway, u32(3) + u32(0)))
        #expect(codec.waitingDataCount == 1)
    }
}

extension HTTP2ClientFrameCodecTests {
    /// A header block with the dynamic table in use, as a server may send it.
    static func block(_ encoder: inout HPACKEncoder, status: String, id: String) -> ByteBuffer {
        var b = ByteBuffer()
        try! encoder.encode(headers: [":status": status, "apns-id": id], to: &b)
        return b
    }

    /// HEADERS without END_STREAM, DATA and RST_STREAM on streams already answered (a server repeating
    /// old stream ids, as often as it likes): nothing is kept and nothing reported, yet every header
    /// block still updates the HPACK table (the next answer on an open stream decodes); the open
    /// streams are answered as before.
    @Test func framesOnClosedStreamsKeepNoState() throws {
        var codec = try Self.codec(requests: 4)  // streams 1, 3, 5, 7
        var encoder = HPACKEncoder(allocator: Self.allocator)
        var answered = Self.receive(
            &codec,
            frame(Kind.headers, flags: Flag.endHeaders | Flag.endStream, stream: 1, Self.block(&encoder, status: "200", id: "A"))
                + frame(Kind.headers, flags: Flag.endHeaders | Flag.endStream, stream: 3, Self.block(&encoder, status: "200", id: "B")))
        #expect(answered.count == 2)
        #expect(codec.openStreams.count == 2)
        for i in 0..<1000 {
            let id = UInt32(1 + 2 * (i % 2))
            let events = Self.receive(
                &codec,
                frame(Kind.headers, flags: Flag.endHeaders, stream: id, Self.block(&encoder, status: "503", id: "old-\(i)"))
                    + frame(Kind.data, stream: id, Array(#"{"reason":"ServiceUnavailable"}"#.utf8)))
            #expect(events.isEmpty)
        }
        #expect(codec.answersInProgress == 0)
        #expect(codec.failed == nil)
        // An answer repeated in full, and a reset, on a closed stream: not reported again.
        #expect(
            Self.receive(
                &codec,
                frame(Kind.headers, flags: Flag.endHeaders | Flag.endStream, stream: 1, Self.block(&encoder, status: "200", id: "A"))
                    + frame(Kind.rstStream, stream: 3, u32(2))
            ).isEmpty)
        // DATA on closed streams still counts against the connection window (it must be returned).
        #expect(codec.unacknowledgedBytes >= 1000 * 31)
        // The open streams: the blocks above changed the table, and this one (same fields) decodes.
        answered = Self.receive(
            &codec,
            frame(Kind.headers, flags: Flag.endHeaders, stream: 5, Self.block(&encoder, status: "503", id: "old-999"))
                + frame(Kind.data, flags: Flag.endStream, stream: 5, Array(#"{"reason":"ServiceUnavailable"}"#.utf8))
                + frame(Kind.rstStream, stream: 7, u32(7)))
        #expect(
            answered == [
                .answer(.init(streamID: 5, status: 503, reason: "ServiceUnavailable", timestamp: nil)),
                .reset(streamID: 7, code: .refusedStream),
            ])
        #expect(codec.openStreams.isEmpty && codec.answersInProgress == 0)
    }

    /// Streams we gave up on (RST_STREAM CANCEL) and streams above a GOAWAY's last stream id are closed
    /// too: an answer that comes for them later is not kept or reported.
    @Test func streamsResetByUsOrAboveAGoAwayAreClosed() throws {
        var codec = try Self.codec(requests: 4)
        var encoder = HPACKEncoder(allocator: Self.allocator)
        // Half an answer on stream 7, then we reset it.
        #expect(
            Self.receive(&codec, frame(Kind.headers, flags: Flag.endHeaders, stream: 7, Self.block(&encoder, status: "500", id: "D")))
                .isEmpty)
        #expect(codec.answersInProgress == 1)
        codec.writeReset(streamID: 7, code: .cancel)
        #expect(codec.answersInProgress == 0 && !codec.openStreams.contains(7))
        // GOAWAY naming stream 1: 3 and 5 will never be processed.
        _ = Self.receive(&codec, frame(Kind.goAway, u32(1) + u32(0)))
        #expect(codec.openStreams.count == 1 && codec.openStreams.contains(1))
        let late = Self.receive(
            &codec,
            [3, 5, 7].flatMap { frame(Kind.headers, flags: Flag.endHeaders, stream: $0, Self.block(&encoder, status: "200", id: "L")) })
        #expect(late.isEmpty && codec.answersInProgress == 0)
        let last = Self.receive(
            &codec, frame(Kind.headers, flags: Flag.endHeaders | Flag.endStream, stream: 1, Self.block(&encoder, status: "200", id: "A")))
        #expect(last == [.answer(.init(streamID: 1, status: 200, reason: nil, timestamp: nil))])
    }

    /// Many thousands of streams opened and answered, then every old id answered again without an end:
    /// the codec holds no entry per id, and its set of open streams stays a few words.
    @Test func oldStreamIDsCannotGrowTheCodec() throws {
        var codec = try Self.codec(requests: 0)
        var encoder = HPACKEncoder(allocator: Self.allocator)
        let head = try Self.head(0)
        for k in 0..<20_000 {
            let id = UInt32(2 * k + 1)
            codec.writeRequest(streamID: id, head: head, authority: "a", authorization: nil, payload: [])
            _ = codec.takeOutbound()
            _ = Self.receive(
                &codec,
                frame(Kind.headers, flags: Flag.endHeaders | Flag.endStream, stream: id, Self.block(&encoder, status: "200", id: "x")))
            #expect(codec.openStreams.storedWords <= 1)
        }
        var bytes: [UInt8] = []
        for k in 0..<20_000 {
            bytes += frame(Kind.headers, flags: Flag.endHeaders, stream: UInt32(2 * k + 1), Self.block(&encoder, status: "503", id: "x"))
        }
        #expect(Self.receive(&codec, bytes).isEmpty)
        #expect(codec.answersInProgress == 0 && codec.openStreams.isEmpty && codec.failed == nil)
    }

    /// The open-stream set against a plain `Set` under random opens (in increasing order, as a client
    /// opens them), closes (in any order) and GOAWAYs.
    @Test func openStreamsAgreeWithASet() {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<20 {
            var bits = HTTP2OpenStreams()
            var model = Set<UInt32>()
            var next: UInt32 = 1
            for _ in 0..<5_000 {
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<5:
                    bits.open(next)
                    model.insert(next)
                    next += 2 * UInt32.random(in: 1...3, using: &random)
                case 5..<9:
                    let id = model.randomElement(using: &random) ?? UInt32.random(in: 1...next, using: &random)
                    #expect(bits.close(id) == (model.remove(id) != nil))
                default:
                    let last = UInt32.random(in: 0...next, using: &random)
                    bits.close(above: last)
                    model = model.filter { $0 <= last }
                }
                #expect(bits.count == model.count)
            }
            for id in 0...next + 4 { #expect(bits.contains(id) == model.contains(id)) }
        }
        // Ids below the oldest open one and even ids are never open.
        var bits = HTTP2OpenStreams()
        bits.open(101)
        bits.open(50)
        bits.open(102)
        #expect(bits.count == 1 && !bits.contains(50) && !bits.contains(102))
    }
}

/// `apns-unique-id` (sandbox answers, issue 31): kept when it is a UUID's text, ignored otherwise.
@Suite struct HTTP2UniqueIDParsingTests {
    private func uniqueID(_ headers: HPACKHeaders) throws -> String? {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        var block = ByteBuffer()
        try encoder.encode(headers: headers, to: &block)
        var decoder = HPACKAnswerDecoder()
        return try block.withUnsafeReadableBytes { try decoder.decode($0) }.uniqueID
    }

    @Test func aUUIDIsKeptAnythingElseIgnored() throws {
        let id = "7F3C1C3E-3D3A-4B0E-9B1C-2B5C9A3D7E11"
        #expect(try uniqueID(HPACKHeaders([(":status", "200"), ("apns-id", id), ("apns-unique-id", id)])) == id)
        #expect(try uniqueID(HPACKHeaders([(":status", "200"), ("apns-id", id)])) == nil)
        let long = String(repeating: "A", count: 10_000)
        #expect(try uniqueID(HPACKHeaders([(":status", "200"), ("apns-id", id), ("apns-unique-id", long)])) == nil)
    }
}
