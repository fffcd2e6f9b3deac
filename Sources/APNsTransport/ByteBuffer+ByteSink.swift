import APNsProtocol
import NIOCore

/// Lets the protocol encoders write straight into a SwiftNIO `ByteBuffer`: no intermediate array
/// between encoding a frame and handing it to the socket.
extension ByteBuffer: ByteSink {
    @inlinable
    public mutating func putByte(_ byte: UInt8) { writeInteger(byte) }

    @inlinable
    public mutating func putBytes(_ bytes: UnsafeRawBufferPointer) { writeBytes(bytes) }

    @inlinable
    public mutating func putUInt16BE(_ value: UInt16) { writeInteger(value, endianness: .big) }

    @inlinable
    public mutating func putUInt32BE(_ value: UInt32) { writeInteger(value, endianness: .big) }

    @inlinable
    public mutating func putFixed(count: Int, _ body: (inout RawCursor) -> Void) {
        writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
            var cursor = RawCursor(UnsafeMutableRawBufferPointer(rebasing: raw[..<count]))
            body(&cursor)
            return count
        }
    }
}
