import Testing

@testable import APNsProtocol

/// A token of another size than 32 bytes on the binary interface, which has only that size (command 2,
/// item 1: "Device token, 32 bytes"): the pipeline never sends one there, and if it did, nothing breaks.
@Suite struct TokenSizeWireTests {
    /// The encoder writes a token's own length: a 40-byte token makes a well-formed frame (never an
    /// overrun) that a gateway answers with status 5, naming its identifier.
    @Test func theEncoderWritesTheTokensOwnLength() throws {
        let long = try DeviceToken(bytes: [UInt8](repeating: 0x5A, count: 40))
        let payload = Array(#"{"aps":{"alert":"x"}}"#.utf8)
        var frame: [UInt8] = []
        payload.withUnsafeBytes {
            FrameEncoder.writeCommand2(token: long, payload: $0, identifier: 7, expiry: 0, priority: .immediate, into: &frame)
        }
        #expect(frame.count == FrameEncoder.command2Size(payloadCount: payload.count, tokenCount: 40))
        #expect(Array(frame[5..<8]) == [1, 0, 40] && Array(frame[8..<48]) == long.bytes)
        var decoder = GatewayFrameDecoder(limits: .default)
        decoder.append(frame)
        let event = decoder.next()
        #expect(event?.rejection?.status == .invalidTokenSize && event?.rejection?.identifier == 7)
    }

    /// The feedback service is the binary interface's: a tuple's token that is not 32 bytes is kept as
    /// bytes but is no `DeviceToken` (it names nothing the pipeline sends over that interface).
    @Test func feedbackTuplesKeepTheir32ByteRule() throws {
        #expect(FeedbackTuple(timestamp: 1, token: [UInt8](repeating: 1, count: 40)).deviceToken == nil)
        #expect(FeedbackTuple(timestamp: 1, token: countingToken).deviceToken == countingToken)
    }
}
