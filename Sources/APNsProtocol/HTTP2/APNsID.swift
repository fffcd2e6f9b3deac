/// `apns-id` values: "a canonical UUID that's 32 lowercase hexadecimal digits, displayed in five groups
/// separated by hyphens" (APNs itself answers upper case, as both the simulator and the sender write
/// them). One formatter for the sender's ids (from the job id) and the simulator's (random).
public enum APNsID {
    /// The 16 bytes as 8-4-4-4-12 upper-case hex digits. The caller sets the version and variant bits.
    public static func string(uuidBytes bytes: [UInt8]) -> String {
        precondition(bytes.count == 16, "a UUID is 16 bytes")
        return bytes.withUnsafeBytes { string(uuidBytes: $0) }
    }

    /// The same from the first 16 bytes of `bytes` (a digest's, without copying them into an array first).
    public static func string(uuidBytes bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: textCount) { out in
            write(uuidBytes: bytes, into: UnsafeMutableRawBufferPointer(out))
            return textCount
        }
    }

    /// Length of the text: 32 hex digits and 4 hyphens.
    public static let textCount = 36

    /// Writes the text of the first 16 bytes of `bytes` into the first ``textCount`` bytes of `out`: the
    /// sender formats each request's id straight into its header block, with no String per request.
    public static func write(uuidBytes bytes: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) {
        precondition(bytes.count >= 16, "a UUID is 16 bytes")
        precondition(out.count >= textCount, "a UUID's text is 36 bytes")
        var o = 0
        for i in 0..<16 {
            if i == 4 || i == 6 || i == 8 || i == 10 {
                out[o] = UInt8(ascii: "-")
                o += 1
            }
            out[o] = upperHexDigit(bytes[i] >> 4)
            out[o + 1] = upperHexDigit(bytes[i] & 0x0F)
            o += 2
        }
    }

    @inline(__always)
    private static func upperHexDigit(_ n: UInt8) -> UInt8 { n < 10 ? n &+ UInt8(ascii: "0") : n &+ (UInt8(ascii: "A") &- 10) }
}
