import NIOCore

/// Writes a request's frames into a region of the outbound buffer reserved at once. A request is two
/// frame headers and a header block of a dozen fields: ~30 writes of a few bytes, and each write into
/// a `ByteBuffer` checks its capacity, its uniqueness and (through its storage class) exclusive
/// access — a few per cent of the sender's CPU per request (`perf`). Here they are stores into memory
/// whose size was bounded first; every store checks that bound (a wrong bound stops the process
/// rather than write past the region).
struct HTTP2FrameWriter {
    private let out: UnsafeMutableRawBufferPointer
    /// Bytes written so far.
    private(set) var count = 0

    init(_ out: UnsafeMutableRawBufferPointer) { self.out = out }

    /// An upper bound of an HPACK integer's size (RFC 7541 §5.1): a prefix byte and 7 bits per byte
    /// after it; every length and index here is far below 2^28.
    static let integerBound = 5

    /// An upper bound of a string literal's size: its length and its octets.
    static func stringBound(_ count: Int) -> Int { integerBound + count }

    @inline(__always)
    mutating func byte(_ b: UInt8) {
        precondition(count < out.count, "HTTP/2 frame writer: past the reserved bound")
        out[count] = b
        count += 1
    }

    /// `n` bytes to be written by the caller, at once.
    @inline(__always)
    mutating func reserve(_ n: Int) -> UnsafeMutableRawBufferPointer {
        precondition(n <= out.count - count, "HTTP/2 frame writer: past the reserved bound")
        defer { count += n }
        return UnsafeMutableRawBufferPointer(rebasing: out[count..<(count + n)])
    }

    mutating func bytes(_ source: UnsafeRawBufferPointer) {
        guard source.count > 0 else { return }
        reserve(source.count).copyMemory(from: source)
    }

    mutating func bytes(_ string: String) {
        let n = string.utf8.count
        guard n > 0 else { return }
        let target = reserve(n)
        if string.utf8.withContiguousStorageIfAvailable({ target.copyMemory(from: UnsafeRawBufferPointer($0)) }) == nil {
            for (i, b) in string.utf8.enumerated() { target[i] = b }
        }
    }

    /// RFC 7541 §5.1.
    mutating func integer(_ value: Int, prefix: Int, flags: UInt8) {
        let max = (1 << prefix) - 1
        if value < max {
            byte(flags | UInt8(value))
            return
        }
        byte(flags | UInt8(max))
        var rest = value - max
        while rest >= 128 {
            byte(UInt8(truncatingIfNeeded: rest & 0x7F | 0x80))
            rest >>= 7
        }
        byte(UInt8(rest))
    }

    /// A string literal, not Huffman-coded (RFC 7541 §5.2).
    mutating func string(_ string: String) {
        integer(string.utf8.count, prefix: 7, flags: 0x00)
        bytes(string)
    }

    /// A frame's 9-byte header (RFC 9113 §4.1) at `offset`, written earlier or now.
    mutating func frameHeader(_ header: HTTP2FrameHeader, at offset: Int) {
        precondition(offset + HTTP2FrameHeader.size <= out.count, "HTTP/2 frame writer: past the reserved bound")
        out[offset] = UInt8(truncatingIfNeeded: header.length >> 16)
        out[offset + 1] = UInt8(truncatingIfNeeded: header.length >> 8)
        out[offset + 2] = UInt8(truncatingIfNeeded: header.length)
        out[offset + 3] = header.type
        out[offset + 4] = header.flags
        withUnsafeBytes(of: header.streamID.bigEndian) { id in
            UnsafeMutableRawBufferPointer(rebasing: out[(offset + 5)..<(offset + 9)]).copyMemory(from: id)
        }
    }

    /// Room for a frame header to be written once its length is known.
    mutating func skipFrameHeader() -> Int {
        let at = count
        _ = reserve(HTTP2FrameHeader.size)
        return at
    }
}
