import APNsProtocol
import NIOCore

// The sender's own HTTP/2 client codec (RFC 9113), in place of NIOHTTP2Handler: it does only what an
// APNs client needs — one HEADERS + one DATA per request, answers read for `:status` and a short
// error body — and writes every frame of a flush straight into one buffer. NIO-HTTP2's general
// machinery (per-stream state machines in sorted arrays, header validation, a frame object and a
// write per frame, Huffman coding) was about half of the sender's CPU per request. The pure parts
// (frame parsing, flow control, HPACK encoding) are values here, driven by `HTTP2ClientHandler`
// and tested without sockets; answers' header blocks are decoded by `HPACKAnswerDecoder`
// (APNsProtocol), which keeps the HPACK table but builds no String for a header the client ignores.

/// An HTTP/2 error code on the wire (RFC 9113 §7), named for logs.
struct HTTP2WireErrorCode: Equatable, Sendable, CustomStringConvertible {
    var rawValue: UInt32

    static let noError = Self(rawValue: 0x0)
    static let protocolError = Self(rawValue: 0x1)
    static let internalError = Self(rawValue: 0x2)
    static let flowControlError = Self(rawValue: 0x3)
    static let streamClosed = Self(rawValue: 0x5)
    static let frameSizeError = Self(rawValue: 0x6)
    static let refusedStream = Self(rawValue: 0x7)
    static let cancel = Self(rawValue: 0x8)
    static let compressionError = Self(rawValue: 0x9)
    static let enhanceYourCalm = Self(rawValue: 0xB)

    var description: String {
        let names = [
            "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED",
            "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
        ]
        return Int(rawValue) < names.count ? names[Int(rawValue)] : "0x" + String(rawValue, radix: 16)
    }
}

/// A connection error this client detected in what the server sent: it answers with GOAWAY carrying
/// `code` and closes the connection (RFC 9113 §5.4.1).
struct HTTP2ConnectionError: Error, Equatable, CustomStringConvertible {
    var code: HTTP2WireErrorCode
    var message: String
    var description: String { "HTTP/2 \(code): \(message)" }
}

/// The fixed 9-byte header of every frame (RFC 9113 §4.1).
struct HTTP2FrameHeader: Equatable {
    var length: Int
    var type: UInt8
    var flags: UInt8
    var streamID: UInt32

    static let size = 9

    enum Kind {
        static let data: UInt8 = 0x0
        static let headers: UInt8 = 0x1
        static let priority: UInt8 = 0x2
        static let rstStream: UInt8 = 0x3
        static let settings: UInt8 = 0x4
        static let pushPromise: UInt8 = 0x5
        static let ping: UInt8 = 0x6
        static let goAway: UInt8 = 0x7
        static let windowUpdate: UInt8 = 0x8
        static let continuation: UInt8 = 0x9
    }

    enum Flag {
        static let endStream: UInt8 = 0x1
        static let ack: UInt8 = 0x1
        static let endHeaders: UInt8 = 0x4
        static let padded: UInt8 = 0x8
        static let priority: UInt8 = 0x20
    }

    /// Reads a header at `index` without consuming it; nil when fewer than 9 bytes are there.
    static func peek(_ buffer: ByteBuffer, at index: Int) -> HTTP2FrameHeader? {
        guard buffer.writerIndex - index >= size,
            let high = buffer.getInteger(at: index, as: UInt16.self),
            let low = buffer.getInteger(at: index + 2, as: UInt8.self),
            let type = buffer.getInteger(at: index + 3, as: UInt8.self),
            let flags = buffer.getInteger(at: index + 4, as: UInt8.self),
            let stream = buffer.getInteger(at: index + 5, as: UInt32.self)
        else { return nil }
        return HTTP2FrameHeader(length: Int(high) << 8 | Int(low), type: type, flags: flags, streamID: stream & 0x7FFF_FFFF)
    }

    func write(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(truncatingIfNeeded: length >> 8))
        buffer.writeInteger(UInt8(truncatingIfNeeded: length))
        buffer.writeInteger(type)
        buffer.writeInteger(flags)
        buffer.writeInteger(streamID)
    }
}

/// Cuts a byte stream into frames, however the reads split it. Holds at most one partial frame
/// (bounded by `maxFrameSize`) beyond the read being parsed; a whole frame inside a read is a slice
/// of it, not a copy.
struct HTTP2FrameParser {
    /// The largest payload accepted: our SETTINGS_MAX_FRAME_SIZE, which we leave at the default.
    var maxFrameSize = 16384
    private var buffered: ByteBuffer?

    mutating func append(_ bytes: ByteBuffer) {
        if buffered == nil || buffered!.readableBytes == 0 {
            buffered = bytes
        } else {
            var bytes = bytes
            buffered!.writeBuffer(&bytes)
        }
    }

    /// The next complete frame, or nil until more bytes arrive. A length above `maxFrameSize` is a
    /// connection error (FRAME_SIZE_ERROR), noticed from the header alone, before the payload is held.
    mutating func next() throws(HTTP2ConnectionError) -> (header: HTTP2FrameHeader, payload: ByteBuffer)? {
        guard var bytes = buffered, let header = HTTP2FrameHeader.peek(bytes, at: bytes.readerIndex) else { return nil }
        guard header.length <= maxFrameSize else {
            throw HTTP2ConnectionError(code: .frameSizeError, message: "frame of \(header.length) bytes exceeds \(maxFrameSize)")
        }
        guard bytes.readableBytes >= HTTP2FrameHeader.size + header.length else { return nil }
        buffered = nil  // unique again while it is consumed, so reading it does not copy
        bytes.moveReaderIndex(forwardBy: HTTP2FrameHeader.size)
        let payload = bytes.readSlice(length: header.length)!
        buffered = bytes.readableBytes > 0 ? bytes : nil
        return (header, payload)
    }

    /// Bytes held of a frame not yet complete.
    var bufferedBytes: Int { buffered?.readableBytes ?? 0 }
}

/// HPACK encoding of a request's header block (RFC 7541), without Huffman coding (it was ~11 % of
/// the sender's CPU for a few bytes per request, and every shared field is a one-byte index after
/// its first use). The indexing policy: the fields shared by a connection's requests (`:authority`,
/// `authorization`, `apns-topic`, expiration, priority, push type) are literals with incremental
/// indexing the first time and an index afterwards; `:path`, `apns-id` and `apns-collapse-id`, which
/// change per request, are literals without indexing so they never push the shared ones out of the
/// table. The encoder keeps the dynamic table's bookkeeping (sizes and insertion order) to know which
/// of its entries the server still has, and never lets it grow past the server's HEADER_TABLE_SIZE.
struct HTTP2RequestHeaderEncoder {
    /// The shared fields, each with its static-table name index (0: the name is a literal).
    enum Field: Int, CaseIterable {
        case authority, authorization, topic, expiration, priority, pushType

        var name: String {
            switch self {
            case .authority: APNsHeader.authority
            case .authorization: APNsHeader.authorization
            case .topic: APNsHeader.topic
            case .expiration: APNsHeader.expiration
            case .priority: APNsHeader.priority
            case .pushType: APNsHeader.pushType
            }
        }

        var staticNameIndex: Int {
            switch self {
            case .authority: 1
            case .authorization: 23
            default: 0
            }
        }
    }

    /// The table size we use: the HPACK default, or less if the server allows less.
    static let preferredTableSize = 4096
    private(set) var maxTableSize = preferredTableSize
    private(set) var tableSize = 0
    /// Entry sizes, oldest first.
    private var entrySizes = CircularBuffer<Int>()
    private var inserted = 0
    private var evicted = 0
    /// Size updates to signal at the start of the next block: the smallest since the last block, then the last.
    private var pendingSizeUpdate: (smallest: Int, last: Int)?
    /// Per shared field, its values in the table (insertion number), newest last; a few per field, so a
    /// connection alternating between two topics or push types keeps both indexed.
    private var entries: [[(value: String, insertion: Int)]] = Array(repeating: [], count: Field.allCases.count)
    static let valuesPerField = 4

    /// The server's SETTINGS_HEADER_TABLE_SIZE: entries beyond it are evicted, and the change is
    /// signalled at the start of the next header block (RFC 7541 §6.3).
    mutating func setServerTableSize(_ size: Int) {
        let size = min(size, Self.preferredTableSize)
        guard size != maxTableSize else { return }
        maxTableSize = size
        evict(toFit: 0)
        pendingSizeUpdate = (min(pendingSizeUpdate?.smallest ?? size, size), size)
    }

    /// At most what ``beginBlock(into:)`` writes: two size updates.
    static let beginBlockBound = 2 * HTTP2FrameWriter.integerBound

    mutating func beginBlock(into out: inout HTTP2FrameWriter) {
        guard let update = pendingSizeUpdate else { return }
        pendingSizeUpdate = nil
        if update.smallest < update.last { out.integer(update.smallest, prefix: 5, flags: 0x20) }
        out.integer(update.last, prefix: 5, flags: 0x20)
    }

    /// At most what ``encode(_:_:into:)`` writes for `value`: a literal name and the value.
    static func encodeBound(_ field: Field, _ value: String) -> Int {
        HTTP2FrameWriter.integerBound + HTTP2FrameWriter.stringBound(field.name.utf8.count) + HTTP2FrameWriter.stringBound(value.utf8.count)
    }

    /// At most what an unindexed field writes: a literal name and `count` bytes of value.
    static func unindexedBound(name: String, count: Int) -> Int {
        1 + HTTP2FrameWriter.stringBound(name.utf8.count) + HTTP2FrameWriter.stringBound(count)
    }

    /// One shared field: an index when the server's table has this value, else a literal that the
    /// server adds to its table.
    mutating func encode(_ field: Field, _ value: String, into out: inout HTTP2FrameWriter) {
        let f = field.rawValue
        var newestLive: Int?
        if let oldest = entries[f].first {
            // Entries the table has evicted since are forgotten (rare: only when a new value is added).
            if oldest.insertion < evicted { entries[f].removeAll { $0.insertion < evicted } }
            for e in entries[f] where e.value == value {
                out.integer(index(of: e.insertion), prefix: 7, flags: 0x80)
                return
            }
            newestLive = entries[f].last?.insertion
        }
        if field.staticNameIndex > 0 {
            out.integer(field.staticNameIndex, prefix: 6, flags: 0x40)
        } else if let newestLive {
            out.integer(index(of: newestLive), prefix: 6, flags: 0x40)
        } else {
            out.byte(0x40)
            out.string(field.name)
        }
        out.string(value)
        if insert(size: field.name.utf8.count + value.utf8.count + 32) {
            if entries[f].count == Self.valuesPerField { entries[f].removeFirst() }
            entries[f].append((value, inserted - 1))
        }
    }

    /// A literal without indexing, its name from the static table (`staticNameIndex` > 0) or a literal.
    static func encodeUnindexed(name: String, staticNameIndex: Int, value: String, into out: inout HTTP2FrameWriter) {
        writeUnindexedName(name, staticNameIndex: staticNameIndex, into: &out)
        out.string(value)
    }

    /// The same with a value of `count` bytes that `write` puts straight into the block: for the
    /// per-request values (`:path`, `apns-id`), which then need no String of their own.
    static func encodeUnindexed(
        name: String, staticNameIndex: Int, count: Int, into out: inout HTTP2FrameWriter,
        write: (UnsafeMutableRawBufferPointer) -> Void
    ) {
        writeUnindexedName(name, staticNameIndex: staticNameIndex, into: &out)
        out.integer(count, prefix: 7, flags: 0x00)
        write(out.reserve(count))
    }

    private static func writeUnindexedName(_ name: String, staticNameIndex: Int, into out: inout HTTP2FrameWriter) {
        if staticNameIndex > 0 {
            out.integer(staticNameIndex, prefix: 4, flags: 0x00)
        } else {
            out.byte(0x00)
            out.string(name)
        }
    }

    /// The dynamic-table index of the entry inserted `insertion`-th: the newest is 62.
    private func index(of insertion: Int) -> Int { 62 + (inserted - 1 - insertion) }

    /// Adds an entry as the server's decoder will (RFC 7541 §4.4): evicting the oldest until it fits;
    /// one larger than the table empties it and is not added.
    private mutating func insert(size: Int) -> Bool {
        guard size <= maxTableSize else {
            evict(toFit: maxTableSize + 1)
            return false
        }
        evict(toFit: size)
        entrySizes.append(size)
        tableSize += size
        inserted += 1
        return true
    }

    private mutating func evict(toFit size: Int) {
        while tableSize + size > maxTableSize, let oldest = entrySizes.popFirst() {
            tableSize -= oldest
            evicted += 1
        }
    }
}

/// One HTTP/2 client connection's protocol state, as a value: what it writes goes to `outbound`
/// (taken by the handler at each flush), what it reads becomes `Event`s. Stream ids come from the
/// connection's state machine; this codec checks the server's frames against them.
struct HTTP2ClientFrameCodec {
    typealias Answer = HTTP2ConnectionStateMachine<HTTP2Job>.Answer

    enum Event: Equatable {
        /// A stream's complete answer.
        case answer(Answer)
        case reset(streamID: UInt32, code: HTTP2WireErrorCode)
        case goAway(lastStreamID: UInt32, code: HTTP2WireErrorCode, debug: ByteBuffer?)
        /// The server's SETTINGS (already acknowledged and applied here); the stream limit if it names one.
        case settings(maxConcurrentStreams: Int?)
        /// The answer to our PING.
        case pingAck
    }

    /// Our SETTINGS_INITIAL_WINDOW_SIZE: answers are small, but a stream never waits on it.
    static let initialWindowSize = 1 << 20
    /// What the connection's receive window is opened by at once (answers are small, but many).
    static let connectionWindowIncrement = 16 << 20
    /// Received DATA is returned to the connection window in steps of this size.
    static let windowTopUp = 1 << 20
    /// Of an error body, what is kept (APNs' are ~50 bytes; anything longer is not one).
    static let bodyLimit = 4096
    /// A header block (HEADERS + CONTINUATION) longer than this is refused.
    static let maxHeaderBlock = 64 << 10
    static let maxWindow = Int(Int32.max)

    private(set) var outbound: ByteBuffer
    private var parser = HTTP2FrameParser()
    /// The server's HPACK table, as our SETTINGS_HEADER_TABLE_SIZE (never sent: 4096) allows.
    private var decoder = HPACKAnswerDecoder()
    private(set) var encoder = HTTP2RequestHeaderEncoder()
    private let allocator: ByteBufferAllocator

    // Send side, as the server set it.
    private(set) var connectionSendWindow = 65535
    private(set) var initialStreamSendWindow = 65535
    private(set) var peerMaxFrameSize = 16384
    /// DATA waiting for window, in the order written.
    private var waitingData = CircularBuffer<WaitingData>()
    private struct WaitingData {
        var streamID: UInt32
        var payload: [UInt8]
        var sent: Int
        /// The stream's send window.
        var window: Int
    }

    /// The highest stream id we opened: a frame on a stream above it (or on a server-initiated,
    /// even one) is a protocol error.
    private(set) var highestStreamID: UInt32 = 0
    /// The streams written and not yet answered, reset or given up on: frames on any other stream
    /// (an old one, answered long ago) are read for the connection's state (HPACK, the window) and
    /// otherwise ignored, so nothing the server repeats there is kept.
    private(set) var openStreams = HTTP2OpenStreams()
    /// Answers being assembled, open streams only: `:status` from HEADERS, the body from DATA.
    private var responses: [UInt32: (status: Int, body: ByteBuffer?, uniqueID: String?)] = [:]
    /// A header block waiting for its CONTINUATION frames.
    private var headerBlock: (streamID: UInt32, endStream: Bool, bytes: ByteBuffer)?
    /// Received DATA not yet returned to the connection window.
    private(set) var unacknowledgedBytes = 0
    /// A connection error was found and GOAWAY written: nothing more is read or written.
    private(set) var failed: HTTP2ConnectionError?

    init(allocator: ByteBufferAllocator) {
        self.allocator = allocator
        outbound = allocator.buffer(capacity: 16 << 10)
    }

    // MARK: writing

    /// A broadcast's header block after `:method` and `:scheme` (`APNsBroadcast`): its path and
    /// channel are per request (unindexed, as a device's path); the shared headers are indexed as for
    /// every request, so a connection mixing broadcasts and device pushes keeps both cheap.
    private static func writeBroadcastHeaders(
        _ head: HTTP2Request, channel: String, authority: String, authorization: String?, encoder: inout HTTP2RequestHeaderEncoder,
        into out: inout HTTP2FrameWriter
    ) {
        // `/4/broadcasts/apps/` + the bundle id (the head's topic), written in place.
        let prefix = APNsBroadcast.pathPrefix
        HTTP2RequestHeaderEncoder.encodeUnindexed(
            name: APNsHeader.path, staticNameIndex: 4, count: prefix.utf8.count + head.topic.utf8.count, into: &out
        ) { target in
            var path = HTTP2FrameWriter(target)
            path.bytes(prefix)
            path.bytes(head.topic)
        }
        encoder.encode(.authority, authority, into: &out)
        if let authorization { encoder.encode(.authorization, authorization, into: &out) }
        HTTP2RequestHeaderEncoder.encodeUnindexed(name: APNsHeader.channelID, staticNameIndex: 0, value: channel, into: &out)
        HTTP2RequestHeaderEncoder.encodeUnindexed(name: APNsHeader.requestID, staticNameIndex: 0, count: APNsID.textCount, into: &out) {
            target in
            head.id.withBytes { APNsID.write(uuidBytes: $0, into: target) }
        }
        writeDeliveryHeaders(head, encoder: &encoder, into: &out)
    }

    /// What every request ends with, to a device or a channel: `apns-expiration`, `apns-priority`,
    /// `apns-push-type` and the collapse id.
    private static func writeDeliveryHeaders(
        _ head: HTTP2Request, encoder: inout HTTP2RequestHeaderEncoder, into out: inout HTTP2FrameWriter
    ) {
        encoder.encode(.expiration, head.expiration, into: &out)
        encoder.encode(.priority, head.priority, into: &out)
        // From the enum, typed from the job on (its raw value is a small literal: nothing is parsed or
        // allocated per request, and after a connection's first use of a type it is a one-byte index).
        encoder.encode(.pushType, head.pushType.rawValue, into: &out)
        if let c = head.collapseID {
            HTTP2RequestHeaderEncoder.encodeUnindexed(name: APNsHeader.collapseID, staticNameIndex: 0, value: c, into: &out)
        }
    }

    /// An upper bound of the HEADERS frame `writeRequest` writes for `head`: its frame header, the block's
    /// size updates, `:method` and `:scheme`, and `writeHeaderBlock`'s fields.
    private static func headersBound(_ head: HTTP2Request, authority: String, authorization: String?) -> Int {
        typealias E = HTTP2RequestHeaderEncoder
        var bound = HTTP2FrameHeader.size + E.beginBlockBound + 2
        if let channel = head.channel {
            bound += E.unindexedBound(name: APNsHeader.path, count: APNsBroadcast.pathPrefix.utf8.count + head.topic.utf8.count)
            bound += E.unindexedBound(name: APNsHeader.channelID, count: channel.utf8.count)
            bound += E.unindexedBound(name: APNsHeader.requestID, count: APNsID.textCount)
        } else {
            bound += E.unindexedBound(name: APNsHeader.path, count: HTTP2Request.devicePathCount(head.token))
            bound += E.encodeBound(.topic, head.topic)
            bound += E.unindexedBound(name: APNsHeader.id, count: APNsID.textCount)
        }
        bound += E.encodeBound(.authority, authority)
        if let authorization { bound += E.encodeBound(.authorization, authorization) }
        bound += E.encodeBound(.expiration, head.expiration) + E.encodeBound(.priority, head.priority)
        bound += E.encodeBound(.pushType, head.pushType.rawValue)
        if let c = head.collapseID { bound += E.unindexedBound(name: APNsHeader.collapseID, count: c.utf8.count) }
        return bound
    }

    /// The client preface, our SETTINGS (no push; a 1 MiB stream window) and a wide connection window.
    mutating func writePreface() {
        outbound.writeString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        HTTP2FrameHeader(length: 12, type: HTTP2FrameHeader.Kind.settings, flags: 0, streamID: 0).write(into: &outbound)
        outbound.writeInteger(UInt16(0x2))  // ENABLE_PUSH
        outbound.writeInteger(UInt32(0))
        outbound.writeInteger(UInt16(0x4))  // INITIAL_WINDOW_SIZE
        outbound.writeInteger(UInt32(Self.initialWindowSize))
        writeWindowUpdate(streamID: 0, increment: Self.connectionWindowIncrement)
    }

    /// One request: HEADERS (END_HEADERS) and DATA (END_STREAM), the DATA held back, in order, while
    /// the connection or stream window is too small for it.
    mutating func writeRequest(
        streamID: UInt32, head: HTTP2Request, authority: String, authorization: String?, payload: [UInt8]
    ) {
        guard failed == nil else { return }
        highestStreamID = max(highestStreamID, streamID)
        openStreams.open(streamID)
        let start = outbound.writerIndex
        let bound = Self.headersBound(head, authority: authority, authorization: authorization)
        let peerMaxFrameSize = peerMaxFrameSize
        let blockLength =
            outbound.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { region in
                var out = HTTP2FrameWriter(UnsafeMutableRawBufferPointer(rebasing: region[..<bound]))
                let header = out.skipFrameHeader()  // filled in below, or by `splitHeaderBlock`
                Self.writeHeaderBlock(head, authority: authority, authorization: authorization, encoder: &encoder, into: &out)
                let length = out.count - HTTP2FrameHeader.size
                if length <= peerMaxFrameSize {
                    out.frameHeader(
                        HTTP2FrameHeader(
                            length: length, type: HTTP2FrameHeader.Kind.headers, flags: HTTP2FrameHeader.Flag.endHeaders, streamID: streamID
                        ),
                        at: header)
                }
                return out.count
            } - HTTP2FrameHeader.size
        if blockLength > peerMaxFrameSize { splitHeaderBlock(at: start, streamID: streamID) }

        if waitingData.isEmpty, payload.count <= connectionSendWindow, payload.count <= initialStreamSendWindow,
            payload.count <= peerMaxFrameSize
        {
            writeDataFrame(streamID: streamID, payload: payload[...], endStream: true)
            connectionSendWindow -= payload.count
        } else {
            waitingData.append(WaitingData(streamID: streamID, payload: payload, sent: 0, window: initialStreamSendWindow))
            writeWaitingData()
        }
    }

    /// A request's header block after its frame header: `:method` and `:scheme`, then a device's or a
    /// broadcast's fields.
    private static func writeHeaderBlock(
        _ head: HTTP2Request, authority: String, authorization: String?, encoder: inout HTTP2RequestHeaderEncoder,
        into out: inout HTTP2FrameWriter
    ) {
        encoder.beginBlock(into: &out)
        out.byte(0x83)  // :method POST (static 3)
        out.byte(0x87)  // :scheme https (static 7)
        if let channel = head.channel {
            return writeBroadcastHeaders(
                head, channel: channel, authority: authority, authorization: authorization, encoder: &encoder, into: &out)
        }
        HTTP2RequestHeaderEncoder.encodeUnindexed(
            name: APNsHeader.path, staticNameIndex: 4, count: HTTP2Request.devicePathCount(head.token), into: &out
        ) {
            HTTP2Request.writeDevicePath(head.token, into: $0)
        }
        encoder.encode(.authority, authority, into: &out)
        // The token is indexed: the same ~200 bytes on every request of the connection, sent once
        // and then as a table index (as nghttp2 does). HPACK only ever matches a whole field, so an
        // index reveals nothing short of guessing the entire signed token.
        if let authorization { encoder.encode(.authorization, authorization, into: &out) }
        encoder.encode(.topic, head.topic, into: &out)
        HTTP2RequestHeaderEncoder.encodeUnindexed(name: APNsHeader.id, staticNameIndex: 0, count: APNsID.textCount, into: &out) {
            target in
            head.id.withBytes { APNsID.write(uuidBytes: $0, into: target) }
        }
        writeDeliveryHeaders(head, encoder: &encoder, into: &out)
    }

    /// One DATA frame: its header and its bytes in one write.
    private mutating func writeDataFrame(streamID: UInt32, payload: ArraySlice<UInt8>, endStream: Bool) {
        let total = HTTP2FrameHeader.size + payload.count
        outbound.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { region in
            var out = HTTP2FrameWriter(UnsafeMutableRawBufferPointer(rebasing: region[..<total]))
            out.frameHeader(
                HTTP2FrameHeader(
                    length: payload.count, type: HTTP2FrameHeader.Kind.data, flags: endStream ? HTTP2FrameHeader.Flag.endStream : 0,
                    streamID: streamID),
                at: out.skipFrameHeader())
            payload.withUnsafeBytes { out.bytes($0) }
            return out.count
        }
    }

    /// A header block longer than the server's frame size: HEADERS and CONTINUATION frames (rare:
    /// an APNs request's headers are a few hundred bytes).
    private mutating func splitHeaderBlock(at start: Int, streamID: UInt32) {
        var block = outbound.getSlice(at: start + HTTP2FrameHeader.size, length: outbound.writerIndex - start - HTTP2FrameHeader.size)!
        outbound.moveWriterIndex(to: start)
        var type = HTTP2FrameHeader.Kind.headers
        while block.readableBytes > 0 {
            let n = min(block.readableBytes, peerMaxFrameSize)
            var chunk = block.readSlice(length: n)!
            let flags = block.readableBytes == 0 ? HTTP2FrameHeader.Flag.endHeaders : 0
            HTTP2FrameHeader(length: n, type: type, flags: flags, streamID: streamID).write(into: &outbound)
            outbound.writeBuffer(&chunk)
            type = HTTP2FrameHeader.Kind.continuation
        }
    }

    /// Sends what the windows allow of the waiting DATA, in order, in frames no larger than the server's.
    private mutating func writeWaitingData() {
        while var w = waitingData.first {
            let remaining = w.payload.count - w.sent
            // A window may be negative (a smaller INITIAL_WINDOW_SIZE): nothing goes until it is positive.
            let n = max(0, min(remaining, connectionSendWindow, w.window, peerMaxFrameSize))
            if n == 0 && remaining > 0 { return }
            let last = n == remaining
            writeDataFrame(streamID: w.streamID, payload: w.payload[w.sent..<(w.sent + n)], endStream: last)
            connectionSendWindow -= n
            if last {
                waitingData.removeFirst()
            } else {
                w.sent += n
                w.window -= n
                waitingData[waitingData.startIndex] = w
            }
        }
    }

    /// DATA frames waiting for a WINDOW_UPDATE.
    var waitingDataCount: Int { waitingData.count }

    /// Answers whose HEADERS came and whose end has not (state kept per stream, for tests).
    var answersInProgress: Int { responses.count }

    mutating func writePing(ack: Bool = false, data: UInt64 = 1) {
        guard failed == nil else { return }
        HTTP2FrameHeader(length: 8, type: HTTP2FrameHeader.Kind.ping, flags: ack ? HTTP2FrameHeader.Flag.ack : 0, streamID: 0)
            .write(into: &outbound)
        outbound.writeInteger(data)
    }

    /// RST_STREAM for a stream we give up on (unanswered past its deadline): the server may stop
    /// working on it, its DATA still waiting for window is dropped, and a late answer is ignored.
    mutating func writeReset(streamID: UInt32, code: HTTP2WireErrorCode) {
        guard failed == nil else { return }
        openStreams.close(streamID)
        responses[streamID] = nil
        waitingData.removeAll { $0.streamID == streamID }
        HTTP2FrameHeader(length: 4, type: HTTP2FrameHeader.Kind.rstStream, flags: 0, streamID: streamID).write(into: &outbound)
        outbound.writeInteger(code.rawValue)
        writeWaitingData()  // the stream may have been the one at the head of the queue
    }

    private mutating func writeWindowUpdate(streamID: UInt32, increment: Int) {
        HTTP2FrameHeader(length: 4, type: HTTP2FrameHeader.Kind.windowUpdate, flags: 0, streamID: streamID).write(into: &outbound)
        outbound.writeInteger(UInt32(increment))
    }

    /// Returns the received DATA to the connection window once `windowTopUp` bytes have come in.
    /// Streams' windows are not topped up: an answer's body is far smaller than our 1 MiB stream window.
    mutating func returnReceivedWindow() {
        guard failed == nil, unacknowledgedBytes >= Self.windowTopUp else { return }
        writeWindowUpdate(streamID: 0, increment: unacknowledgedBytes)
        unacknowledgedBytes = 0
    }

    /// The bytes written since the last take, for one write to TLS (one buffer per flush, sealed as
    /// a few 16 KiB records rather than a record per frame).
    mutating func takeOutbound() -> ByteBuffer? {
        guard outbound.readableBytes > 0 else { return nil }
        let bytes = outbound
        outbound = allocator.buffer(capacity: max(16 << 10, bytes.readableBytes))
        return bytes
    }

    var pendingOutboundBytes: Int { outbound.readableBytes }

    // MARK: reading

    /// Parses what was read and appends the events, in order. After a connection error, `failed` is
    /// set, GOAWAY is in `outbound`, and nothing more is read.
    mutating func receive(_ bytes: ByteBuffer, into events: inout [Event]) {
        guard failed == nil else { return }
        parser.append(bytes)
        do {
            while let (header, payload) = try parser.next() {
                try handle(header, payload, into: &events)
            }
        } catch {
            fail(error)
        }
    }

    private mutating func fail(_ error: HTTP2ConnectionError) {
        failed = error
        waitingData.removeAll()
        // GOAWAY: the last stream the server opened, none (pushes are disabled).
        var debug = ByteBuffer()
        debug.writeString(error.message)
        HTTP2FrameHeader(length: 8 + debug.readableBytes, type: HTTP2FrameHeader.Kind.goAway, flags: 0, streamID: 0).write(into: &outbound)
        outbound.writeInteger(UInt32(0))
        outbound.writeInteger(error.code.rawValue)
        outbound.writeBuffer(&debug)
    }

    private func protocolError(_ message: String) -> HTTP2ConnectionError {
        HTTP2ConnectionError(code: .protocolError, message: message)
    }

    /// A stream the server may speak on: one we opened (odd, at most the highest we used).
    private func checkStream(_ header: HTTP2FrameHeader) throws(HTTP2ConnectionError) {
        guard header.streamID != 0 else { throw protocolError("frame type \(header.type) on stream 0") }
        guard header.streamID & 1 == 1, header.streamID <= highestStreamID else {
            throw protocolError("frame type \(header.type) on stream \(header.streamID), which the client never opened")
        }
    }

    /// The payload without its padding (PADDED flag: a length byte first, that many bytes last).
    private func unpadded(_ header: HTTP2FrameHeader, _ payload: ByteBuffer) throws(HTTP2ConnectionError) -> ByteBuffer {
        guard header.flags & HTTP2FrameHeader.Flag.padded != 0 else { return payload }
        var payload = payload
        guard let pad = payload.readInteger(as: UInt8.self), Int(pad) <= payload.readableBytes else {
            throw protocolError("padding longer than the frame on stream \(header.streamID)")
        }
        return payload.readSlice(length: payload.readableBytes - Int(pad))!
    }

    private mutating func handle(_ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]) throws(HTTP2ConnectionError)
    {
        if let block = headerBlock, header.type != HTTP2FrameHeader.Kind.continuation || header.streamID != block.streamID {
            throw protocolError("header block on stream \(block.streamID) interrupted by frame type \(header.type)")
        }
        switch header.type {
        case HTTP2FrameHeader.Kind.data: try handleData(header, payload, into: &events)
        case HTTP2FrameHeader.Kind.headers: try handleHeaders(header, payload, into: &events)
        case HTTP2FrameHeader.Kind.continuation: try handleContinuation(header, payload, into: &events)
        case HTTP2FrameHeader.Kind.rstStream: try handleRSTStream(header, payload, into: &events)
        case HTTP2FrameHeader.Kind.settings: try handleSettings(header, payload, into: &events)
        case HTTP2FrameHeader.Kind.pushPromise: throw protocolError("PUSH_PROMISE, though SETTINGS_ENABLE_PUSH is 0")
        case HTTP2FrameHeader.Kind.ping: try handlePing(header, payload, into: &events)
        case HTTP2FrameHeader.Kind.goAway: try handleGoAway(header, payload, into: &events)
        case HTTP2FrameHeader.Kind.windowUpdate: try handleWindowUpdate(header, payload, into: &events)
        default: break  // PRIORITY, and frame types this client does not know: ignored (RFC 9113 §4.1, §5.5)
        }
    }

    /// DATA: an answer's body, kept up to `bodyLimit`; END_STREAM completes the answer.
    private mutating func handleData(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        try checkStream(header)
        unacknowledgedBytes += header.length  // padding included: it counts against the window
        var data = try unpadded(header, payload)
        if let index = responses.index(forKey: header.streamID) {
            if (responses.values[index].body?.readableBytes ?? 0) < Self.bodyLimit, data.readableBytes > 0 {
                if responses.values[index].body == nil {
                    responses.values[index].body = data
                } else {
                    responses.values[index].body!.writeBuffer(&data)
                }
            }
            if header.flags & HTTP2FrameHeader.Flag.endStream != 0 {
                let (status, body, uniqueID) = responses.remove(at: index).value
                openStreams.close(header.streamID)
                events.append(.answer(Self.answer(streamID: header.streamID, status: status, body: body, uniqueID: uniqueID)))
            }
        }
    }

    /// HEADERS: an answer's status and headers, or the start of a block its CONTINUATION frames end.
    private mutating func handleHeaders(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        try checkStream(header)
        var block = try unpadded(header, payload)
        if header.flags & HTTP2FrameHeader.Flag.priority != 0 {
            guard block.readableBytes >= 5 else { throw protocolError("HEADERS too short for its priority fields") }
            block.moveReaderIndex(forwardBy: 5)
        }
        let endStream = header.flags & HTTP2FrameHeader.Flag.endStream != 0
        if header.flags & HTTP2FrameHeader.Flag.endHeaders != 0 {
            try headersComplete(streamID: header.streamID, endStream: endStream, block: &block, into: &events)
        } else {
            // Copied: the block outlives this read's buffer until its CONTINUATION frames arrive.
            var bytes = allocator.buffer(capacity: block.readableBytes + 1024)
            bytes.writeBuffer(&block)
            headerBlock = (header.streamID, endStream, bytes)
        }
    }

    /// CONTINUATION: the rest of a header block, bounded by `maxHeaderBlock`.
    private mutating func handleContinuation(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        guard var block = headerBlock else { throw protocolError("CONTINUATION without a header block") }
        var payload = payload
        guard block.bytes.readableBytes + payload.readableBytes <= Self.maxHeaderBlock else {
            throw HTTP2ConnectionError(code: .enhanceYourCalm, message: "header block longer than \(Self.maxHeaderBlock) bytes")
        }
        headerBlock = nil
        block.bytes.writeBuffer(&payload)
        if header.flags & HTTP2FrameHeader.Flag.endHeaders != 0 {
            try headersComplete(streamID: block.streamID, endStream: block.endStream, block: &block.bytes, into: &events)
        } else {
            headerBlock = block
        }
    }

    /// RST_STREAM: the server gave up on a stream.
    private mutating func handleRSTStream(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        try checkStream(header)
        var payload = payload
        guard header.length == 4, let code = payload.readInteger(as: UInt32.self) else {
            throw HTTP2ConnectionError(code: .frameSizeError, message: "RST_STREAM of \(header.length) bytes")
        }
        // A reset of a stream already closed (answered, or reset by us) is news to no one.
        guard openStreams.close(header.streamID) else { return }
        responses[header.streamID] = nil
        waitingData.removeAll { $0.streamID == header.streamID }
        events.append(.reset(streamID: header.streamID, code: HTTP2WireErrorCode(rawValue: code)))
        writeWaitingData()  // a stream blocked at the head of the queue may have gone
    }

    /// SETTINGS: applied and acknowledged; an ack needs nothing.
    private mutating func handleSettings(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        guard header.streamID == 0 else { throw protocolError("SETTINGS on stream \(header.streamID)") }
        if header.flags & HTTP2FrameHeader.Flag.ack != 0 {
            guard header.length == 0 else { throw HTTP2ConnectionError(code: .frameSizeError, message: "SETTINGS ack with a payload") }
            return
        }
        guard header.length % 6 == 0 else {
            throw HTTP2ConnectionError(code: .frameSizeError, message: "SETTINGS of \(header.length) bytes")
        }
        let maxConcurrentStreams = try applySettings(payload)
        HTTP2FrameHeader(length: 0, type: HTTP2FrameHeader.Kind.settings, flags: HTTP2FrameHeader.Flag.ack, streamID: 0).write(
            into: &outbound)
        events.append(.settings(maxConcurrentStreams: maxConcurrentStreams))
        writeWaitingData()
    }

    /// PING: answered, or an ack of ours reported.
    private mutating func handlePing(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        guard header.streamID == 0 else { throw protocolError("PING on stream \(header.streamID)") }
        var payload = payload
        guard header.length == 8, let data = payload.readInteger(as: UInt64.self) else {
            throw HTTP2ConnectionError(code: .frameSizeError, message: "PING of \(header.length) bytes")
        }
        if header.flags & HTTP2FrameHeader.Flag.ack != 0 {
            events.append(.pingAck)
        } else {
            writePing(ack: true, data: data)
        }
    }

    /// GOAWAY: streams above its last stream id will never be processed.
    private mutating func handleGoAway(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        guard header.streamID == 0 else { throw protocolError("GOAWAY on stream \(header.streamID)") }
        var payload = payload
        guard header.length >= 8, let last = payload.readInteger(as: UInt32.self), let code = payload.readInteger(as: UInt32.self)
        else {
            throw HTTP2ConnectionError(code: .frameSizeError, message: "GOAWAY of \(header.length) bytes")
        }
        let lastStreamID = last & 0x7FFF_FFFF
        // Streams above it will never be processed: their DATA is not sent (they are resent
        // elsewhere), and nothing the server says on them later is kept.
        waitingData.removeAll { $0.streamID > lastStreamID }
        openStreams.close(above: lastStreamID)
        if !responses.isEmpty { responses = responses.filter { $0.key <= lastStreamID } }
        events.append(
            .goAway(
                lastStreamID: lastStreamID, code: HTTP2WireErrorCode(rawValue: code), debug: payload.readableBytes > 0 ? payload : nil))
    }

    /// WINDOW_UPDATE: more room for the connection's or a waiting stream's DATA.
    private mutating func handleWindowUpdate(
        _ header: HTTP2FrameHeader, _ payload: ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        var payload = payload
        guard header.length == 4, let raw = payload.readInteger(as: UInt32.self) else {
            throw HTTP2ConnectionError(code: .frameSizeError, message: "WINDOW_UPDATE of \(header.length) bytes")
        }
        let increment = Int(raw & 0x7FFF_FFFF)
        if header.streamID == 0 {
            guard increment > 0 else { throw protocolError("connection WINDOW_UPDATE of 0") }
            connectionSendWindow += increment
            guard connectionSendWindow <= Self.maxWindow else {
                throw HTTP2ConnectionError(code: .flowControlError, message: "connection send window above 2^31-1")
            }
        } else {
            try checkStream(header)
            // A stream's update matters only while its DATA waits; for the others it is moot.
            if let i = waitingData.firstIndex(where: { $0.streamID == header.streamID }) {
                waitingData[i].window += increment
            }
        }
        writeWaitingData()
    }

    /// Applies the server's settings; returns its MAX_CONCURRENT_STREAMS if the frame names one.
    private mutating func applySettings(_ payload: ByteBuffer) throws(HTTP2ConnectionError) -> Int? {
        var payload = payload
        var maxConcurrentStreams: Int?
        while let id = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            switch id {
            case 0x1:  // HEADER_TABLE_SIZE: the largest table our encoder may use
                encoder.setServerTableSize(Int(value))
            case 0x3:  // MAX_CONCURRENT_STREAMS
                maxConcurrentStreams = Int(value)
            case 0x4:  // INITIAL_WINDOW_SIZE: applies to open streams too, as a change (RFC 9113 §6.9.2)
                guard Int(value) <= Self.maxWindow else {
                    throw HTTP2ConnectionError(code: .flowControlError, message: "INITIAL_WINDOW_SIZE \(value) above 2^31-1")
                }
                let delta = Int(value) - initialStreamSendWindow
                initialStreamSendWindow = Int(value)
                for i in waitingData.indices { waitingData[i].window += delta }
            case 0x5:  // MAX_FRAME_SIZE
                guard (16384...16_777_215).contains(value) else { throw protocolError("MAX_FRAME_SIZE \(value) out of range") }
                peerMaxFrameSize = Int(value)
            default:
                break  // ENABLE_PUSH (a server's is meaningless), MAX_HEADER_LIST_SIZE, unknown ones
            }
        }
        return maxConcurrentStreams
    }

    private mutating func headersComplete(
        streamID: UInt32, endStream: Bool, block: inout ByteBuffer, into events: inout [Event]
    ) throws(HTTP2ConnectionError) {
        // Every block is decoded, even one we would ignore: it may change the server's HPACK table.
        // `:status` that is not three digits is read as 0 and retried as a server error.
        // `apns-unique-id`: sandbox answers only, kept when it is a UUID's text (`HPACKAnswer`).
        let answer: HPACKAnswer
        do {
            answer = try block.withUnsafeReadableBytes { try decoder.decode($0) }
        } catch {
            throw HTTP2ConnectionError(code: .compressionError, message: "header block on stream \(streamID): \(error)")
        }
        let (status, uniqueID) = (answer.status, answer.uniqueID)
        // A closed stream's HEADERS (a late or repeated answer) changed the HPACK table above; nothing
        // else of it is kept or reported.
        if endStream {
            guard openStreams.close(streamID) else { return }
            // Nearly every answer (a 200 is HEADERS alone): no look-up when no answer is half read.
            if !responses.isEmpty { responses[streamID] = nil }
            events.append(.answer(Self.answer(streamID: streamID, status: status, body: nil, uniqueID: uniqueID)))
        } else if !openStreams.contains(streamID) {
            return
        } else if responses[streamID].map({ $0.status < 200 }) ?? true {
            // The first HEADERS, or the final one after an informational (1xx) answer.
            responses[streamID] = (status, nil, uniqueID)
        }
        // A later HEADERS (trailers) without END_STREAM changes nothing.
    }

    /// A stream's answer is complete; its error body (about 50 bytes, only for non-200s) is read here.
    static func answer(streamID: UInt32, status: Int, body: ByteBuffer?, uniqueID: String? = nil) -> Answer {
        var reason: String?
        var timestamp: Int64?
        if status != 200, let body, body.readableBytes > 0 {
            // A body that does not decode still settles the request, by its status alone.
            if let decoded = try? APNsErrorBody(decoding: body.readableBytesView) {
                reason = decoded.reasonText
                timestamp = decoded.timestamp
            }
        }
        return Answer(streamID: streamID, status: status, reason: reason, timestamp: timestamp, uniqueID: uniqueID)
    }
}
