/// Encoders for the three notification formats of the binary interface (Apple's "The Binary Interface
/// and Notification Format" and "Legacy Information"). All integers are big endian ("network order").
///
/// They only append to a caller-provided `ByteSink`: no intermediate arrays, no allocation of their own.
/// Validation of sizes is the caller's (the `Payload` builder and the job validator); the encoders
/// trap only on values the wire cannot represent at all (a payload longer than 65 535 bytes).
public enum FrameEncoder {
    /// Item identifiers of command 2 (the table "The items and their identifiers").
    public enum Item: UInt8, Sendable {
        case deviceToken = 1
        case payload = 2
        case notificationIdentifier = 3
        case expirationDate = 4
        case priority = 5
    }

    /// Size of a command-2 frame with every item and a payload of `payloadCount` bytes:
    /// command (1) + frame length (4) + items, each item 3 bytes of header + data:
    /// token 3+32 ("Device token, 32 bytes"; `tokenCount` for another size), payload 3+n, identifier
    /// 3+4, expiry 3+4, priority 3+1.
    @inlinable
    public static func command2Size(payloadCount: Int, tokenCount: Int = DeviceToken.binaryByteCount) -> Int {
        5 + 3 + tokenCount + 3 + payloadCount + 7 + 7 + 4
    }

    /// Command 2: `02 | frame length u32 | items 1–5`.
    @inlinable
    public static func writeCommand2(
        token: DeviceToken,
        payload: UnsafeRawBufferPointer,
        identifier: UInt32,
        expiry: UInt32,
        priority: Priority,
        into sink: inout some ByteSink
    ) {
        precondition(payload.count <= Int(UInt16.max), "payload longer than an item length can say")
        // The token's own size, so a token the binary interface cannot take (not 32 bytes: the pipeline
        // refuses those before sending, `token-size-needs-http2`) still makes a well-formed frame, which
        // a gateway answers with status 5, "Invalid token size", rather than overrunning the frame.
        let size = command2Size(payloadCount: payload.count, tokenCount: token.byteCount)
        sink.putFixed(count: size) { w in
            w.byte(2)
            w.uint32BE(UInt32(size - 5))
            w.byte(Item.deviceToken.rawValue)
            w.uint16BE(UInt16(token.byteCount))
            token.withBytes { w.bytes($0) }
            w.byte(Item.payload.rawValue)
            w.uint16BE(UInt16(payload.count))
            w.bytes(payload)
            w.byte(Item.notificationIdentifier.rawValue)
            w.uint16BE(4)
            w.uint32BE(identifier)
            w.byte(Item.expirationDate.rawValue)
            w.uint16BE(4)
            w.uint32BE(expiry)
            w.byte(Item.priority.rawValue)
            w.uint16BE(1)
            w.byte(priority.binaryValue)
        }
    }

    /// Legacy enhanced format, command 1:
    /// `01 | identifier u32 | expiry u32 | token length u16 | token | payload length u16 | payload`.
    /// It has no priority: 10 is assumed ("These formats do not include a priority").
    @inlinable
    public static func writeCommand1(
        token: DeviceToken,
        payload: UnsafeRawBufferPointer,
        identifier: UInt32,
        expiry: UInt32,
        into sink: inout some ByteSink
    ) {
        precondition(payload.count <= Int(UInt16.max), "payload longer than its length field can say")
        sink.putByte(1)
        sink.putUInt32BE(identifier)
        sink.putUInt32BE(expiry)
        sink.putUInt16BE(UInt16(token.byteCount))
        token.withBytes { sink.putBytes($0) }
        sink.putUInt16BE(UInt16(payload.count))
        sink.putBytes(payload)
    }

    /// Legacy simple format, command 0: `00 | token length u16 | token | payload length u16 | payload`.
    /// No identifier, so a gateway can only sever the connection on error, without saying which.
    @inlinable
    public static func writeCommand0(
        token: DeviceToken,
        payload: UnsafeRawBufferPointer,
        into sink: inout some ByteSink
    ) {
        precondition(payload.count <= Int(UInt16.max), "payload longer than its length field can say")
        sink.putByte(0)
        sink.putUInt16BE(UInt16(token.byteCount))
        token.withBytes { sink.putBytes($0) }
        sink.putUInt16BE(UInt16(payload.count))
        sink.putBytes(payload)
    }

    /// Error-response packet: `08 | status u8 | identifier u32` (6 bytes). Written by the gateway side.
    @inlinable
    public static func writeErrorResponse(_ response: ErrorResponse, into sink: inout some ByteSink) {
        sink.putByte(ErrorResponse.command)
        sink.putByte(response.status.rawValue)
        sink.putUInt32BE(response.identifier)
    }

    /// Feedback tuple: `time u32 | token length u16 | token`. Written by the feedback service side.
    @inlinable
    public static func writeFeedbackTuple(_ tuple: FeedbackTuple, into sink: inout some ByteSink) {
        precondition(tuple.token.count <= Int(UInt16.max))
        sink.putUInt32BE(tuple.timestamp)
        sink.putUInt16BE(UInt16(tuple.token.count))
        sink.putBytes(tuple.token)
    }
}

/// Notification priority. The binary interface (item 5) defines only 10 and 5; the HTTP/2 provider API
/// adds 1 (Apple, "Sending notification requests to APNs": "Specify 1 to prioritize the device's power
/// considerations over all other factors for delivery, and prevent awakening the device";
/// "Notifications with apns-priority 5 and apns-priority 1 might get grouped and delivered in bursts to
/// a person's device").
public enum Priority: UInt8, Sendable, Hashable, CaseIterable {
    /// "The push message is sent immediately." Must trigger an alert, sound or badge.
    case immediate = 10
    /// "Sent at a time that conserves power on the device receiving it."
    case conservePower = 5
    /// HTTP/2 only: the device's power first; may be delivered in groups.
    case powerFirst = 1

    /// The byte written in a binary frame: 1 does not exist there, so it goes as 5, the nearest
    /// power-considerate value (a binary gateway refuses any other byte as a processing error).
    public var binaryValue: UInt8 { self == .powerFirst ? Priority.conservePower.rawValue : rawValue }
}
