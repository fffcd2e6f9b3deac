/// One entry of the feedback service: `time u32 | token length u16 | token` (Apple's "The Feedback Service", Figure 5-3).
/// "A timestamp … indicating when APNs determined that the app no longer exists on the device."
public struct FeedbackTuple: Hashable, Sendable {
    /// Seconds since 1970-01-01 UTC (a four-byte `time_t` in network order).
    public var timestamp: UInt32
    /// The token bytes as sent; normally 32, but kept whatever the service said.
    public var token: [UInt8]

    public init(timestamp: UInt32, token: [UInt8]) {
        self.timestamp = timestamp
        self.token = token
    }

    public init(timestamp: UInt32, token: DeviceToken) {
        self.init(timestamp: timestamp, token: token.bytes)
    }

    /// The token as a `DeviceToken`, or nil when it is not 32 bytes long.
    /// (The feedback service is the binary interface's: its tokens are 32 bytes, as in command 2.)
    public var deviceToken: DeviceToken? {
        token.count == DeviceToken.binaryByteCount ? try? DeviceToken(bytes: token) : nil
    }

    public static let headerSize = 6
}

/// Reads feedback tuples from bytes that arrive in pieces of any size. The service sends tuples and then
/// closes; `isAtTupleBoundary` tells whether the stream ended cleanly (no half tuple left over).
public struct FeedbackDecoder: Sendable {
    private var buffer = ByteAccumulator()

    public init() {}

    public mutating func append(_ bytes: UnsafeRawBufferPointer) { buffer.append(bytes) }
    public mutating func append(_ bytes: some Sequence<UInt8>) { buffer.append(bytes) }

    public var isAtTupleBoundary: Bool { buffer.count == 0 }

    public mutating func next() -> FeedbackTuple? {
        guard buffer.count >= FeedbackTuple.headerSize else { return nil }
        let length = Int(buffer.uint16BE(at: 4))  // at most 65 535: a bounded wait, never a huge allocation
        guard buffer.count >= FeedbackTuple.headerSize + length else { return nil }
        let tuple = FeedbackTuple(
            timestamp: buffer.uint32BE(at: 0),
            token: buffer.bytes(at: FeedbackTuple.headerSize, count: length)
        )
        buffer.consume(FeedbackTuple.headerSize + length)
        return tuple
    }
}
