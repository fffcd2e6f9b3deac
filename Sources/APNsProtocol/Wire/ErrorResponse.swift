/// An error-response packet: `08 | status u8 | identifier u32` (Apple's "The Binary Interface and Notification Format", Figure 5-2 and Table 5-1).
/// After writing one, the gateway closes the connection and discards everything sent after `identifier`.
public struct ErrorResponse: Hashable, Sendable, CustomStringConvertible {
    public static let command: UInt8 = 8
    public static let size = 6

    public var status: ErrorStatus
    /// The identifier of the malformed notification, or, for status 10 (shutdown), of the last one
    /// processed.
    public var identifier: UInt32

    public init(status: ErrorStatus, identifier: UInt32) {
        self.status = status
        self.identifier = identifier
    }

    public var description: String { "error-response(status: \(status), identifier: \(identifier))" }
}

/// Reads error-response packets from bytes that arrive in pieces of any size.
///
/// Usage: `append` what the socket gave, then call `next()` until it returns nil.
/// A first byte other than 8 is not an error response at all: `next()` throws and the reader should
/// treat the connection as broken (the gateway sends nothing else on this channel).
public struct ErrorResponseDecoder: Sendable {
    public struct UnexpectedCommand: Error, Equatable, Sendable, CustomStringConvertible {
        public var byte: UInt8
        public init(byte: UInt8) { self.byte = byte }
        public var description: String { "gateway sent command \(byte) where only error responses (8) may come" }
    }

    private var buffer = ByteAccumulator()

    public init() {}

    public mutating func append(_ bytes: UnsafeRawBufferPointer) { buffer.append(bytes) }
    public mutating func append(_ bytes: some Sequence<UInt8>) { buffer.append(bytes) }

    /// Bytes received but not yet part of a whole packet.
    public var pendingByteCount: Int { buffer.count }

    public mutating func next() throws(UnexpectedCommand) -> ErrorResponse? {
        guard buffer.count >= 1 else { return nil }
        let command = buffer.byte(at: 0)
        guard command == ErrorResponse.command else { throw UnexpectedCommand(byte: command) }
        guard buffer.count >= ErrorResponse.size else { return nil }
        let response = ErrorResponse(
            status: ErrorStatus(rawValue: buffer.byte(at: 1)),
            identifier: buffer.uint32BE(at: 2)
        )
        buffer.consume(ErrorResponse.size)
        return response
    }
}
