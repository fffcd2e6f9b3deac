import APNsProtocol
import Testing

/// Priority 1 (issue 31) exists on HTTP/2 only: a binary frame carries 5 for it, and a binary gateway
/// (the simulator's decoder) refuses the byte 1 as the binary interface defines only 10 and 5.
@Suite struct PriorityOneTests {
    @Test func aBinaryFrameCarriesFiveForPriorityOne() {
        let frame = encodeCommand2(countingToken, Array("{}".utf8), id: 3, expiry: 0, priority: .powerFirst)
        #expect(frame.last == 5)
        var d = GatewayFrameDecoder()
        d.append(frame)
        #expect(d.next()?.notification?.priority == .conservePower)
    }

    @Test func theByteOneIsRefusedInABinaryFrame() {
        var frame = encodeCommand2(countingToken, Array("{}".utf8), id: 4, expiry: 0, priority: .conservePower)
        frame[frame.count - 1] = 1
        var d = GatewayFrameDecoder()
        d.append(frame)
        let r = d.next()?.rejection
        #expect(r?.status == .processingError)
        #expect(r?.identifier == 4)
    }
}
