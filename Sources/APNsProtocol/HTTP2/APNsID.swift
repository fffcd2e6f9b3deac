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
        precondition(bytes.count >= 16, "a UUID is 16 bytes")
        let digits: StaticString = "0123456789ABCDEF"
        return String(unsafeUninitializedCapacity: 36) { out in
            digits.withUTF8Buffer { hex in
                var o = 0
                for i in 0..<16 {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[o] = UInt8(ascii: "-")
                        o += 1
                    }
                    out[o] = hex[Int(bytes[i] >> 4)]
                    out[o + 1] = hex[Int(bytes[i] & 0x0F)]
                    o += 2
                }
            }
            return 36
        }
    }
}
