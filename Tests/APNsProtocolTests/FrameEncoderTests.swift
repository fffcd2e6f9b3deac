import APNsProtocol
import Testing

/// Byte-exact vectors, worked out by hand from Apple's guide ("The Binary Interface and Notification Format",
/// "Legacy Information", Figure 5-2, Figure 5-3). All integers big endian.
@Suite struct FrameEncoderTests {
    /// Payload with multi-byte UTF-8: `{"aps":{"alert":"café ☕"}}`
    ///   `{"aps":{"alert":"` 17 bytes · `caf` 3 · é = C3 A9 (2) · space 1 · ☕ U+2615 = E2 98 95 (3) · `"}}` 3
    ///   = 29 bytes = 0x001d.
    static let cafePayload = Array(#"{"aps":{"alert":"café ☕"}}"#.utf8)

    @Test func command2WithEveryItem() {
        // Frame length = items: token 1+2+32 = 35, payload 1+2+29 = 32, identifier 1+2+4 = 7,
        // expiry 1+2+4 = 7, priority 1+2+1 = 4 → 85 = 0x00000055.
        let expected = bytes(
            hex: """
                02 | 00000055
                01 | 0020 | 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
                02 | 001d | 7b22617073223a7b22616c657274223a22636166 c3a9 20 e29895 227d7d
                03 | 0004 | ffffffff
                04 | 0004 | 00000000
                05 | 0001 | 05
                """)
        #expect(Self.cafePayload.count == 29)
        let frame = encodeCommand2(countingToken, Self.cafePayload, id: 0xFFFF_FFFF, expiry: 0, priority: .conservePower)
        #expect(hex(frame) == hex(expected))
        #expect(frame.count == FrameEncoder.command2Size(payloadCount: 29))
    }

    @Test func command2PriorityTenAndExpiry() {
        // Payload `{}` (2 bytes) → frame length 35 + 5 + 7 + 7 + 4 = 58 = 0x3a; identifier 1;
        // expiry 1767225600 = 0x6955B900 (2026-01-01T00:00:00Z); priority 10 = 0x0a.
        let expected = bytes(
            hex: """
                02 | 0000003a
                01 | 0020 | 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
                02 | 0002 | 7b7d
                03 | 0004 | 00000001
                04 | 0004 | 6955b900
                05 | 0001 | 0a
                """)
        let frame = encodeCommand2(countingToken, Array("{}".utf8), id: 1, expiry: 1_767_225_600, priority: .immediate)
        #expect(hex(frame) == hex(expected))
    }

    @Test func command1Enhanced() {
        // 01 | identifier 0xFFFFFFFF | expiry 0 | token length 32 = 0x0020 | token | payload length 29 | payload
        let expected = bytes(
            hex: """
                01 | ffffffff | 00000000 | 0020
                000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
                001d | 7b22617073223a7b22616c657274223a22636166c3a920e29895227d7d
                """)
        #expect(hex(encodeCommand1(countingToken, Self.cafePayload, id: 0xFFFF_FFFF, expiry: 0)) == hex(expected))
    }

    @Test func command0Simple() {
        // 00 | token length 0x0020 | token | payload length 0x001d | payload (spec Listing A-1)
        let expected = bytes(
            hex: """
                00 | 0020 | 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
                001d | 7b22617073223a7b22616c657274223a22636166c3a920e29895227d7d
                """)
        #expect(hex(encodeCommand0(countingToken, Self.cafePayload)) == hex(expected))
    }

    @Test func errorResponsePacket() {
        // 08 | status 10 | identifier 0x01020304
        var out: [UInt8] = []
        FrameEncoder.writeErrorResponse(ErrorResponse(status: .shutdown, identifier: 0x0102_0304), into: &out)
        #expect(out == [0x08, 0x0A, 0x01, 0x02, 0x03, 0x04])
    }

    @Test func feedbackTuple() {
        // time 1767225600 = 0x6955B900 | token length 0x0020 | token
        var out: [UInt8] = []
        FrameEncoder.writeFeedbackTuple(FeedbackTuple(timestamp: 1_767_225_600, token: countingToken), into: &out)
        #expect(hex(out) == "6955b900" + "0020" + countingTokenHex)
    }

    @Test func encodingAppendsAndReusesCapacity() {
        // Frames append one after another to the same sink; after removeAll(keepingCapacity:) the
        // storage is reused (same base address), which is what makes steady-state encoding allocation-free.
        var sink: [UInt8] = []
        sink.reserveCapacity(4096)
        let payload = Array(#"{"aps":{"badge":1}}"#.utf8)
        for i in 0..<10 {
            payload.withUnsafeBytes {
                FrameEncoder.writeCommand2(
                    token: countingToken, payload: $0, identifier: UInt32(i), expiry: 0, priority: .immediate,
                    into: &sink)
            }
        }
        #expect(sink.count == 10 * FrameEncoder.command2Size(payloadCount: payload.count))
        let base = sink.withUnsafeBufferPointer { $0.baseAddress }
        sink.removeAll(keepingCapacity: true)
        payload.withUnsafeBytes {
            FrameEncoder.writeCommand2(
                token: countingToken, payload: $0, identifier: 0, expiry: 0, priority: .immediate, into: &sink)
        }
        #expect(sink.withUnsafeBufferPointer { $0.baseAddress } == base)
    }
}
