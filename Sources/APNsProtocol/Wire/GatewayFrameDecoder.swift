/// Payload size limits a gateway enforces, per format.
///
/// Apple's guide ("Pushing a Remote Notification or Scheduling a Local Notification with Custom
/// Actions"): "In iOS 8, the previous size limit of 256 bytes for a push payload has been increased to
/// 2 kilobytes"; the legacy appendix still says 256 for the enhanced format. Both are configurable;
/// 2048 is the default for all formats.
public struct PayloadLimits: Sendable, Hashable {
    public var command2: Int
    public var legacy: Int

    public init(command2: Int = 2048, legacy: Int = 2048) {
        precondition(command2 > 0 && command2 <= Int(UInt16.max) && legacy > 0 && legacy <= Int(UInt16.max))
        self.command2 = command2
        self.legacy = legacy
    }

    public static let `default` = PayloadLimits()
}

/// A notification as a gateway read it off the wire.
public struct ReceivedNotification: Sendable, Hashable {
    /// 0 (simple), 1 (enhanced) or 2 (items).
    public var command: UInt8
    public var token: DeviceToken
    public var payload: [UInt8]
    /// Item 3 or the enhanced format's identifier; nil for command 0 or a command-2 frame without item 3.
    public var identifier: UInt32?
    /// Item 4 or the enhanced format's expiry; nil when the format has none.
    public var expiry: UInt32?
    /// Item 5; nil when absent ("a priority of 10 is assumed" for the legacy formats).
    public var priority: Priority?

    public init(
        command: UInt8, token: DeviceToken, payload: [UInt8], identifier: UInt32?, expiry: UInt32?,
        priority: Priority?
    ) {
        self.command = command
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiry = expiry
        self.priority = priority
    }
}

/// Why a gateway refused a frame: the status to answer with and, when it could be read, the identifier.
public struct FrameRejection: Error, Sendable, Hashable, CustomStringConvertible {
    public var status: ErrorStatus
    /// The identifier of the malformed notification when the frame carried one and it was readable.
    /// Command 0 has none: the spec says the gateway then severs the connection without a response.
    public var identifier: UInt32?
    /// The command byte of the offending frame.
    public var command: UInt8
    /// A human-readable reason, for logs and test failures.
    public var reason: String

    public init(status: ErrorStatus, identifier: UInt32?, command: UInt8, reason: String) {
        self.status = status
        self.identifier = identifier
        self.command = command
        self.reason = reason
    }

    /// The error-response packet a gateway writes for this rejection, or nil for command 0, whose
    /// malformations are answered by closing the connection only (Apple's "Legacy Information",
    /// "Enhanced Notification Format": "With the simple format … APNs responds by severing the connection").
    public var errorResponse: ErrorResponse? {
        command == 0 ? nil : ErrorResponse(status: status, identifier: identifier ?? 0)
    }

    public var description: String {
        "rejected command \(command) frame: status \(status), identifier \(identifier.map(String.init) ?? "none"): \(reason)"
    }
}

/// What the gateway decoder yields.
public enum GatewayFrameEvent: Sendable, Hashable {
    case notification(ReceivedNotification)
    /// The first malformed frame. The decoder yields nothing after it: the gateway answers and closes,
    /// and whatever followed on the connection is discarded.
    case rejected(FrameRejection)
}

/// The gateway side of the binary interface: reads commands 0, 1 and 2 from bytes split at any boundary.
///
/// Memory is bounded whatever the peer claims: a command-2 frame is parsed item by item as its bytes
/// arrive (a frame length of 4 GiB allocates nothing), only items that will be kept are buffered, each
/// at most 3 + 65 535 bytes, and an item over its limit is skipped rather than stored. Status codes
/// follow Table 5-1: 2 missing device token, 4 missing payload, 5 invalid token size, 7 invalid payload
/// size, 1 (processing error) for anything else malformed: unknown command, unknown or repeated item,
/// an item of the wrong length, an item running past its frame, a priority other than 5 or 10.
public struct GatewayFrameDecoder: Sendable {
    public let limits: PayloadLimits

    private var buffer = ByteAccumulator()
    private var state: State = .betweenFrames

    private enum State: Sendable {
        case betweenFrames
        case inCommand2(Command2Frame)
        case failed
    }

    /// Progress through one command-2 frame.
    private struct Command2Frame: Sendable {
        var remaining: Int  // bytes of the frame not consumed yet
        var consumed = 0
        var skipping = 0  // bytes of the current item still to be skipped
        var seenItems: UInt8 = 0  // bit n set when item n was read
        var token: DeviceToken?
        var payload: [UInt8]?
        var identifier: UInt32?
        var expiry: UInt32?
        var priority: Priority?
        /// The first malformation found. The frame is still scanned (without buffering) for its
        /// identifier, so the error response can name it.
        var fault: (status: ErrorStatus, reason: String)?
    }

    public init(limits: PayloadLimits = .default) {
        self.limits = limits
    }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if case .failed = state { return }
        buffer.append(bytes)
    }

    public mutating func append(_ bytes: some Sequence<UInt8>) {
        if case .failed = state { return }
        buffer.append(bytes)
    }

    /// True after a rejection: the stream is over.
    public var hasFailed: Bool {
        if case .failed = state { return true }
        return false
    }

    /// Bytes held: bounded by one item, whatever the peer sends.
    public var bufferedByteCount: Int { buffer.count }

    /// The largest command-2 frame body that can be valid: every item once, the payload at its limit.
    private var maxValidFrameBody: Int { FrameEncoder.command2Size(payloadCount: limits.command2) - 5 }

    /// Returns the next notification or rejection, or nil when more bytes are needed (or after a rejection).
    public mutating func next() -> GatewayFrameEvent? {
        while true {
            switch state {
            case .failed:
                return nil
            case .betweenFrames:
                guard buffer.count >= 1 else { return nil }
                switch buffer.byte(at: 0) {
                case 0: return decodeSimple()
                case 1: return decodeEnhanced()
                case 2:
                    guard buffer.count >= 5 else { return nil }
                    let frameLength = Int(buffer.uint32BE(at: 1))
                    buffer.consume(5)
                    state = .inCommand2(Command2Frame(remaining: frameLength))
                case let command:
                    return fail(.processingError, nil, command: command, "unknown command \(command)")
                }
            case .inCommand2(var frame):
                let event = step(&frame)
                if case .inCommand2 = state { state = .inCommand2(frame) }
                if let event { return event }
                if case .inCommand2 = state, !madeProgress { return nil }
            }
        }
    }

    /// Set by `step` when it consumed bytes or changed state, so `next` knows whether to loop.
    private var madeProgress = false

    private mutating func step(_ f: inout Command2Frame) -> GatewayFrameEvent? {
        madeProgress = false
        if f.skipping > 0 {
            let n = min(f.skipping, buffer.count)
            guard n > 0 else { return nil }
            buffer.consume(n)
            f.skipping -= n
            f.remaining -= n
            f.consumed += n
            madeProgress = true
            if f.skipping > 0 { return nil }
        }
        if let fault = f.fault, f.identifier != nil || f.remaining == 0 || f.consumed > maxValidFrameBody {
            return fail(fault.status, f.identifier, command: 2, fault.reason)
        }
        if f.remaining == 0 { return finishFrame(f) }
        guard f.remaining >= 3 else {
            return fail(.processingError, f.identifier, command: 2, "\(f.remaining) stray bytes at the end of the frame")
        }
        guard buffer.count >= 3 else { return nil }
        let itemID = buffer.byte(at: 0)
        let length = Int(buffer.uint16BE(at: 1))
        guard 3 + length <= f.remaining else {
            return fail(
                .processingError, f.identifier, command: 2,
                "item \(itemID) of \(length) bytes runs past the end of its frame")
        }
        let bit: UInt8 = itemID < 8 ? 1 << itemID : 0
        let repeated = bit != 0 && f.seenItems & bit != 0

        // Whether this item is read (buffered) or skipped, and what fault it raises.
        var (keep, fault) = itemVerdict(itemID, length: length, repeated: repeated)
        // Once the frame is known to be bad, only its identifier is still worth reading.
        if f.fault != nil && itemID != 3 { keep = false }
        if repeated { keep = false }

        if keep {
            guard buffer.count >= 3 + length else { return nil }
            read(itemID, length: length, into: &f)
            buffer.consume(3 + length)
            f.remaining -= 3 + length
            f.consumed += 3 + length
        } else {
            buffer.consume(3)
            f.remaining -= 3
            f.consumed += 3
            f.skipping = length
        }
        f.seenItems |= bit
        if f.fault == nil, let fault { f.fault = (fault.0, fault.1) }
        madeProgress = true
        return nil
    }

    /// Whether an item is to be read, and the fault it raises (if any), from its id and length.
    private func itemVerdict(_ itemID: UInt8, length: Int, repeated: Bool) -> (keep: Bool, fault: (ErrorStatus, String)?) {
        switch itemID {
        case _ where repeated:
            return (false, (.processingError, "item \(itemID) appears twice"))
        case 1:
            if length == 0 { return (false, (.missingDeviceToken, "device token item is empty")) }
            if length != DeviceToken.binaryByteCount { return (false, (.invalidTokenSize, "device token is \(length) bytes, not 32")) }
            return (true, nil)
        case 2:
            if length == 0 { return (false, (.missingPayload, "payload item is empty")) }
            if length > limits.command2 {
                return (false, (.invalidPayloadSize, "payload is \(length) bytes, over the limit of \(limits.command2)"))
            }
            return (true, nil)
        case 3, 4:
            return length == 4 ? (true, nil) : (false, (.processingError, "item \(itemID) is \(length) bytes, not 4"))
        case 5:
            return length == 1 ? (true, nil) : (false, (.processingError, "priority item is \(length) bytes, not 1"))
        default:
            return (false, (.processingError, "unknown item \(itemID)"))
        }
    }

    /// A whole item at the front of the buffer, read into the frame (not consumed).
    private func read(_ itemID: UInt8, length: Int, into f: inout Command2Frame) {
        switch itemID {
        case 1:
            f.token = buffer.withBytes(at: 3, count: length) { try? DeviceToken(bytes: $0) }
        case 2:
            f.payload = buffer.bytes(at: 3, count: length)
        case 3:
            f.identifier = buffer.uint32BE(at: 3)
        case 4:
            f.expiry = buffer.uint32BE(at: 3)
        default:
            let raw = buffer.byte(at: 3)
            if let priority = Priority(rawValue: raw), priority != .powerFirst {
                f.priority = priority
            } else if f.fault == nil {
                f.fault = (.processingError, "priority \(raw) is neither 10 nor 5")
            }
        }
    }

    private mutating func finishFrame(_ f: Command2Frame) -> GatewayFrameEvent {
        guard let token = f.token else {
            return fail(.missingDeviceToken, f.identifier, command: 2, "frame has no device token item")
        }
        guard let payload = f.payload else {
            return fail(.missingPayload, f.identifier, command: 2, "frame has no payload item")
        }
        state = .betweenFrames
        madeProgress = true
        return .notification(
            ReceivedNotification(
                command: 2, token: token, payload: payload, identifier: f.identifier, expiry: f.expiry,
                priority: f.priority))
    }

    /// Command 1: `01 | identifier u32 | expiry u32 | token length u16 | token | payload length u16 | payload`.
    private mutating func decodeEnhanced() -> GatewayFrameEvent? {
        guard buffer.count >= 5 else { return nil }
        let identifier = buffer.uint32BE(at: 1)
        guard buffer.count >= 11 else { return nil }
        let expiry = buffer.uint32BE(at: 5)
        return decodeLegacyBody(command: 1, headerSize: 9, identifier: identifier, expiry: expiry)
    }

    /// Command 0: `00 | token length u16 | token | payload length u16 | payload`.
    private mutating func decodeSimple() -> GatewayFrameEvent? {
        decodeLegacyBody(command: 0, headerSize: 1, identifier: nil, expiry: nil)
    }

    /// The part both legacy formats share, from the token length on. Lengths are checked before waiting
    /// for the data they announce, so at most 2 + 32 + 2 + limit bytes are ever buffered.
    private mutating func decodeLegacyBody(
        command: UInt8, headerSize: Int, identifier: UInt32?, expiry: UInt32?
    ) -> GatewayFrameEvent? {
        guard buffer.count >= headerSize + 2 else { return nil }
        let tokenLength = Int(buffer.uint16BE(at: headerSize))
        if tokenLength == 0 {
            return fail(.missingDeviceToken, identifier, command: command, "token length is 0")
        }
        if tokenLength != DeviceToken.binaryByteCount {
            return fail(.invalidTokenSize, identifier, command: command, "token length is \(tokenLength), not 32")
        }
        let payloadLengthAt = headerSize + 2 + tokenLength
        guard buffer.count >= payloadLengthAt + 2 else { return nil }
        let payloadLength = Int(buffer.uint16BE(at: payloadLengthAt))
        if payloadLength == 0 {
            return fail(.missingPayload, identifier, command: command, "payload length is 0")
        }
        if payloadLength > limits.legacy {
            return fail(
                .invalidPayloadSize, identifier, command: command,
                "payload is \(payloadLength) bytes, over the limit of \(limits.legacy)")
        }
        let total = payloadLengthAt + 2 + payloadLength
        guard buffer.count >= total else { return nil }
        let token = buffer.withBytes(at: headerSize + 2, count: tokenLength) { try? DeviceToken(bytes: $0) }
        let payload = buffer.bytes(at: payloadLengthAt + 2, count: payloadLength)
        buffer.consume(total)
        return .notification(
            ReceivedNotification(
                command: command, token: token!, payload: payload, identifier: identifier, expiry: expiry,
                priority: nil))
    }

    private mutating func fail(
        _ status: ErrorStatus, _ identifier: UInt32?, command: UInt8, _ reason: String
    ) -> GatewayFrameEvent {
        state = .failed
        buffer = ByteAccumulator()
        madeProgress = true
        return .rejected(FrameRejection(status: status, identifier: identifier, command: command, reason: reason))
    }
}
