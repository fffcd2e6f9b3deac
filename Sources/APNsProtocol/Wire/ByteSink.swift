/// Where encoders write: a caller-provided, growable byte buffer.
///
/// Encoders are generic over this protocol (and `@inlinable`), so the sender can write frames straight
/// into a SwiftNIO `ByteBuffer` while tests and the fuzzer use `[UInt8]`. A sink that is reused
/// (`removeAll(keepingCapacity: true)`, or NIO's `clear()`) allocates nothing once it has grown to the
/// size of a batch: that is the "no heap allocation per frame in steady state" property.
public protocol ByteSink {
    mutating func writeByte(_ byte: UInt8)
    mutating func writeBytes(_ bytes: UnsafeRawBufferPointer)
}

extension ByteSink {
    @inlinable
    public mutating func writeUInt16BE(_ value: UInt16) {
        writeByte(UInt8(truncatingIfNeeded: value >> 8))
        writeByte(UInt8(truncatingIfNeeded: value))
    }

    @inlinable
    public mutating func writeUInt32BE(_ value: UInt32) {
        withUnsafeBytes(of: value.bigEndian) { writeBytes($0) }
    }

    @inlinable
    public mutating func writeBytes(_ bytes: some Sequence<UInt8>) {
        let done: Void? = bytes.withContiguousStorageIfAvailable { writeBytes(UnsafeRawBufferPointer($0)) }
        if done == nil {
            for byte in bytes { writeByte(byte) }
        }
    }
}

extension Array: ByteSink where Element == UInt8 {
    @inlinable
    public mutating func writeByte(_ byte: UInt8) { append(byte) }

    @inlinable
    public mutating func writeBytes(_ bytes: UnsafeRawBufferPointer) { append(contentsOf: bytes) }
}
