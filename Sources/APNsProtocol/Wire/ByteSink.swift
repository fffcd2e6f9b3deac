/// Where encoders write: a caller-provided, growable byte buffer.
///
/// Encoders are generic over this protocol (and `@inlinable`), so the sender can write frames straight
/// into a SwiftNIO `ByteBuffer` while tests and the fuzzer use `[UInt8]`. A sink that is reused
/// (`removeAll(keepingCapacity: true)`, or NIO's `clear()`) allocates nothing once it has grown to the
/// size of a batch: that is the "no heap allocation per frame in steady state" property.
public protocol ByteSink {
    mutating func putByte(_ byte: UInt8)
    mutating func putBytes(_ bytes: UnsafeRawBufferPointer)
    /// Big endian ("network order"), as every integer of the binary interface.
    mutating func putUInt16BE(_ value: UInt16)
    mutating func putUInt32BE(_ value: UInt32)
}

extension ByteSink {
    @inlinable
    public mutating func putUInt16BE(_ value: UInt16) {
        withUnsafeBytes(of: value.bigEndian) { putBytes($0) }
    }

    @inlinable
    public mutating func putUInt32BE(_ value: UInt32) {
        withUnsafeBytes(of: value.bigEndian) { putBytes($0) }
    }

    @inlinable
    public mutating func putBytes(_ bytes: some Sequence<UInt8>) {
        let done: Void? = bytes.withContiguousStorageIfAvailable { putBytes(UnsafeRawBufferPointer($0)) }
        if done == nil {
            for byte in bytes { putByte(byte) }
        }
    }
}

extension Array: ByteSink where Element == UInt8 {
    @inlinable
    public mutating func putByte(_ byte: UInt8) { append(byte) }

    @inlinable
    public mutating func putBytes(_ bytes: UnsafeRawBufferPointer) { append(contentsOf: bytes) }
}
