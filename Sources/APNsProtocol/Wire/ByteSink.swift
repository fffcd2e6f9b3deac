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
    /// Appends exactly `count` bytes that `body` writes through a raw cursor: one capacity check per
    /// frame instead of one per field, which is what makes encoding run at memory speed.
    mutating func putFixed(count: Int, _ body: (inout RawCursor) -> Void)
}

/// A write cursor over memory the sink has reserved. Only the encoders use it, for exactly the number
/// of bytes they reserved (checked in debug builds).
public struct RawCursor {
    @usableFromInline var pointer: UnsafeMutableRawPointer
    @usableFromInline let end: UnsafeMutableRawPointer

    @inlinable
    public init(_ buffer: UnsafeMutableRawBufferPointer) {
        pointer = buffer.baseAddress!
        end = buffer.baseAddress! + buffer.count
    }

    @inlinable
    public mutating func byte(_ b: UInt8) {
        assert(pointer < end)
        pointer.storeBytes(of: b, as: UInt8.self)
        pointer += 1
    }

    @inlinable
    public mutating func uint16BE(_ v: UInt16) {
        assert(pointer + 2 <= end)
        pointer.storeBytes(of: v.bigEndian, as: UInt16.self)
        pointer += 2
    }

    @inlinable
    public mutating func uint32BE(_ v: UInt32) {
        assert(pointer + 4 <= end)
        pointer.storeBytes(of: v.bigEndian, as: UInt32.self)
        pointer += 4
    }

    @inlinable
    public mutating func bytes(_ raw: UnsafeRawBufferPointer) {
        assert(pointer + raw.count <= end)
        if let base = raw.baseAddress { pointer.copyMemory(from: base, byteCount: raw.count) }
        pointer += raw.count
    }
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

    @inlinable
    public mutating func putFixed(count n: Int, _ body: (inout RawCursor) -> Void) {
        let start = count
        append(contentsOf: repeatElement(0, count: n))
        withUnsafeMutableBytes { raw in
            var cursor = RawCursor(UnsafeMutableRawBufferPointer(rebasing: raw[start..<(start + n)]))
            body(&cursor)
        }
    }
}
