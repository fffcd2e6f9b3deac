import APNsProtocol

/// Hex helpers for test vectors: spaces and newlines in vectors are for the reader and ignored.
func bytes(hex: String) -> [UInt8] {
    let digits = hex.filter { !$0.isWhitespace && $0 != "|" }
    precondition(digits.count % 2 == 0, "odd hex vector")
    var out: [UInt8] = []
    var i = digits.startIndex
    while i < digits.endIndex {
        let j = digits.index(i, offsetBy: 2)
        out.append(UInt8(digits[i..<j], radix: 16)!)
        i = j
    }
    return out
}

func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}

/// Token 00 01 02 … 1f: easy to recognise in a hex dump.
let countingToken = try! DeviceToken(bytes: (0..<32).map { UInt8($0) })
let countingTokenHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func encodeCommand2(
    _ token: DeviceToken, _ payload: [UInt8], id: UInt32, expiry: UInt32, priority: Priority
) -> [UInt8] {
    var out: [UInt8] = []
    payload.withUnsafeBytes {
        FrameEncoder.writeCommand2(
            token: token, payload: $0, identifier: id, expiry: expiry, priority: priority, into: &out)
    }
    return out
}

func encodeCommand1(_ token: DeviceToken, _ payload: [UInt8], id: UInt32, expiry: UInt32) -> [UInt8] {
    var out: [UInt8] = []
    payload.withUnsafeBytes {
        FrameEncoder.writeCommand1(token: token, payload: $0, identifier: id, expiry: expiry, into: &out)
    }
    return out
}

func encodeCommand0(_ token: DeviceToken, _ payload: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    payload.withUnsafeBytes { FrameEncoder.writeCommand0(token: token, payload: $0, into: &out) }
    return out
}

/// Feeds `stream` to a gateway decoder in two pieces split at `split`, collecting every event.
func gatewayEvents(_ stream: [UInt8], splitAt split: Int, limits: PayloadLimits = .default) -> [GatewayFrameEvent] {
    var decoder = GatewayFrameDecoder(limits: limits)
    var events: [GatewayFrameEvent] = []
    decoder.append(stream[..<split])
    while let e = decoder.next() { events.append(e) }
    decoder.append(stream[split...])
    while let e = decoder.next() { events.append(e) }
    return events
}

/// Feeds `stream` one byte at a time.
func gatewayEventsBytewise(_ stream: [UInt8], limits: PayloadLimits = .default) -> [GatewayFrameEvent] {
    var decoder = GatewayFrameDecoder(limits: limits)
    var events: [GatewayFrameEvent] = []
    for b in stream {
        decoder.append(CollectionOfOne(b))
        while let e = decoder.next() { events.append(e) }
    }
    return events
}

extension GatewayFrameEvent {
    var rejection: FrameRejection? {
        if case .rejected(let r) = self { return r }
        return nil
    }
    var notification: ReceivedNotification? {
        if case .notification(let n) = self { return n }
        return nil
    }
}
