import APNsProtocol
import Testing

@Suite struct ErrorResponseDecoderTests {
    /// Every code of Table 5-1 (and an unlisted one) decodes to its typed status with its identifier,
    /// whatever the split of the stream.
    @Test func everyStatusOfTable51SplitAtEveryPoint() throws {
        let statuses = ErrorStatus.table51 + [ErrorStatus(rawValue: 9), ErrorStatus(rawValue: 42)]
        var stream: [UInt8] = []
        var expected: [ErrorResponse] = []
        for (i, status) in statuses.enumerated() {
            let r = ErrorResponse(status: status, identifier: i == 0 ? 0xFFFF_FFFF : UInt32(i) * 0x0101_0101)
            FrameEncoder.writeErrorResponse(r, into: &stream)
            expected.append(r)
        }
        for split in 0...stream.count {
            var d = ErrorResponseDecoder()
            var got: [ErrorResponse] = []
            d.append(stream[..<split])
            while let r = try d.next() { got.append(r) }
            d.append(stream[split...])
            while let r = try d.next() { got.append(r) }
            #expect(got == expected, "split at \(split)")
            #expect(d.pendingByteCount == 0)
        }
    }

    @Test func table51Codes() {
        // The table's codes and meanings, one by one.
        let table: [(UInt8, ErrorStatus, String)] = [
            (0, .noErrors, "No errors encountered"), (1, .processingError, "Processing error"),
            (2, .missingDeviceToken, "Missing device token"), (3, .missingTopic, "Missing topic"),
            (4, .missingPayload, "Missing payload"), (5, .invalidTokenSize, "Invalid token size"),
            (6, .invalidTopicSize, "Invalid topic size"), (7, .invalidPayloadSize, "Invalid payload size"),
            (8, .invalidToken, "Invalid token"), (10, .shutdown, "Shutdown"), (255, .unknown, "None (unknown)"),
        ]
        for (raw, status, summary) in table {
            var d = ErrorResponseDecoder()
            d.append([8, raw, 0, 0, 0, 7])
            let r = try? d.next()
            #expect(r?.status == status)
            #expect(r?.status.rawValue == raw)
            #expect(r?.identifier == 7)
            #expect(status.summary == summary)
            #expect(status.isListed)
        }
        #expect(ErrorStatus.table51.count == 11)
        #expect(!ErrorStatus(rawValue: 9).isListed)  // "no 9"
        #expect(ErrorStatus(rawValue: 9).summary == "Unlisted status 9")
    }

    @Test func anythingButCommand8Throws() {
        var d = ErrorResponseDecoder()
        d.append([2, 0, 0])
        #expect(throws: ErrorResponseDecoder.UnexpectedCommand(byte: 2)) { try d.next() }
    }

    @Test func partialPacketWaits() throws {
        var d = ErrorResponseDecoder()
        d.append([8, 8, 0, 0, 0])
        #expect(try d.next() == nil)
        d.append([9])
        #expect(try d.next() == ErrorResponse(status: .invalidToken, identifier: 9))
    }
}

@Suite struct FeedbackDecoderTests {
    @Test func tuplesSplitAtEveryPoint() {
        let tuples = [
            FeedbackTuple(timestamp: 1_767_225_600, token: countingToken),
            FeedbackTuple(timestamp: 0xFFFF_FFFF, token: try! DeviceToken(hex: String(repeating: "ab", count: 32))),
            FeedbackTuple(timestamp: 1, token: [1, 2, 3]),  // an odd length is kept, not crashed on
            FeedbackTuple(timestamp: 2, token: []),
        ]
        var stream: [UInt8] = []
        for t in tuples { FrameEncoder.writeFeedbackTuple(t, into: &stream) }
        for split in 0...stream.count {
            var d = FeedbackDecoder()
            var got: [FeedbackTuple] = []
            d.append(stream[..<split])
            while let t = d.next() { got.append(t) }
            d.append(stream[split...])
            while let t = d.next() { got.append(t) }
            #expect(got == tuples, "split at \(split)")
            #expect(d.isAtTupleBoundary)
        }
        #expect(tuples[0].deviceToken == countingToken)
        #expect(tuples[2].deviceToken == nil)
    }

    @Test func truncatedStreamIsNotAtBoundary() {
        var d = FeedbackDecoder()
        d.append(bytes(hex: "6955b900 0020 0001"))
        #expect(d.next() == nil)
        #expect(!d.isAtTupleBoundary)
    }
}

@Suite struct GatewayFrameDecoderTests {
    static let payload = Array(#"{"aps":{"alert":"Hello","badge":3}}"#.utf8)
    static let tokenB = try! DeviceToken(hex: String(repeating: "Fe", count: 32))

    /// Five frames of all three commands in one stream.
    static var mixedStream: [UInt8] {
        encodeCommand2(countingToken, payload, id: 1, expiry: 1_767_225_600, priority: .immediate)
            + encodeCommand1(tokenB, payload, id: 2, expiry: 0)
            + encodeCommand0(countingToken, Array(#"{"aps":{}}"#.utf8))
            + encodeCommand2(tokenB, Array("{}".utf8), id: 0xFFFF_FFFF, expiry: 0, priority: .conservePower)
            + encodeCommand2(countingToken, payload, id: 0, expiry: 5, priority: .immediate)
    }

    static let mixedExpected: [ReceivedNotification] = [
        ReceivedNotification(
            command: 2, token: countingToken, payload: payload, identifier: 1, expiry: 1_767_225_600, priority: .immediate),
        ReceivedNotification(command: 1, token: tokenB, payload: payload, identifier: 2, expiry: 0, priority: nil),
        ReceivedNotification(
            command: 0, token: countingToken, payload: Array(#"{"aps":{}}"#.utf8), identifier: nil, expiry: nil, priority: nil),
        ReceivedNotification(
            command: 2, token: tokenB, payload: Array("{}".utf8), identifier: 0xFFFF_FFFF, expiry: 0, priority: .conservePower),
        ReceivedNotification(command: 2, token: countingToken, payload: payload, identifier: 0, expiry: 5, priority: .immediate),
    ]

    @Test func streamOfAllCommandsSplitAtEveryPoint() {
        let stream = Self.mixedStream
        for split in 0...stream.count {
            let events = gatewayEvents(stream, splitAt: split)
            #expect(events.compactMap(\.notification) == Self.mixedExpected, "split at \(split)")
            #expect(events.allSatisfy { $0.rejection == nil })
        }
        #expect(gatewayEventsBytewise(stream).compactMap(\.notification) == Self.mixedExpected)
    }

    /// Builds a command-2 frame from raw items: (id, data).
    static func frame(_ items: [(UInt8, [UInt8])], frameLength: UInt32? = nil) -> [UInt8] {
        var body: [UInt8] = []
        for (id, data) in items {
            body.append(id)
            body.putUInt16BE(UInt16(data.count))
            body.append(contentsOf: data)
        }
        var out: [UInt8] = [2]
        out.putUInt32BE(frameLength ?? UInt32(body.count))
        return out + body
    }

    static let tokenItem: (UInt8, [UInt8]) = (1, countingToken.bytes)
    static let payloadItem: (UInt8, [UInt8]) = (2, payload)
    static func idItem(_ id: UInt32) -> (UInt8, [UInt8]) {
        var b: [UInt8] = []
        b.putUInt32BE(id)
        return (3, b)
    }
    static let expiryItem: (UInt8, [UInt8]) = (4, [0, 0, 0, 0])
    static let priorityItem: (UInt8, [UInt8]) = (5, [10])

    /// One malformed frame after a good one: the good one is delivered, then the rejection with the
    /// status Table 5-1 prescribes and the identifier, then nothing, even though a valid frame follows.
    static func checkRejection(
        _ bad: [UInt8], status: ErrorStatus, identifier: UInt32?, command: UInt8 = 2,
        limits: PayloadLimits = .default, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let good = encodeCommand2(countingToken, payload, id: 100, expiry: 0, priority: .immediate)
        let stream = good + bad + good
        for split in 0...stream.count {
            let events = gatewayEvents(stream, splitAt: split, limits: limits)
            #expect(events.count == 2, "split at \(split)", sourceLocation: sourceLocation)
            #expect(events.first?.notification?.identifier == 100, sourceLocation: sourceLocation)
            let r = events.last?.rejection
            #expect(r?.status == status, "split \(split): \(String(describing: r))", sourceLocation: sourceLocation)
            #expect(r?.identifier == identifier, "split \(split)", sourceLocation: sourceLocation)
            #expect(r?.command == command, sourceLocation: sourceLocation)
        }
    }

    @Test func missingTokenIsStatus2() {
        Self.checkRejection(Self.frame([Self.payloadItem, Self.idItem(7)]), status: .missingDeviceToken, identifier: 7)
        Self.checkRejection(Self.frame([(1, []), Self.payloadItem, Self.idItem(7)]), status: .missingDeviceToken, identifier: 7)
        Self.checkRejection(Self.frame([]), status: .missingDeviceToken, identifier: nil)
        // Legacy: token length 0.
        Self.checkRejection(bytes(hex: "01 00000009 00000000 0000 0002 7b7d"), status: .missingDeviceToken, identifier: 9, command: 1)
    }

    @Test func missingPayloadIsStatus4() {
        Self.checkRejection(Self.frame([Self.tokenItem, Self.idItem(8)]), status: .missingPayload, identifier: 8)
        Self.checkRejection(Self.frame([Self.tokenItem, (2, []), Self.idItem(8)]), status: .missingPayload, identifier: 8)
        Self.checkRejection(
            bytes(hex: "01 0000000a 00000000 0020 \(countingTokenHex) 0000"), status: .missingPayload, identifier: 10, command: 1)
    }

    @Test func invalidTokenSizeIsStatus5() {
        // The identifier comes after the bad item: the frame is still scanned to find it.
        Self.checkRejection(
            Self.frame([(1, Array(repeating: 1, count: 31)), Self.payloadItem, Self.idItem(0xFFFF_FFFF)]),
            status: .invalidTokenSize, identifier: 0xFFFF_FFFF)
        Self.checkRejection(
            Self.frame([Self.idItem(3), (1, Array(repeating: 1, count: 64)), Self.payloadItem]),
            status: .invalidTokenSize, identifier: 3)
        Self.checkRejection(
            bytes(hex: "01 0000000b 00000000 0021 \(countingTokenHex)00 0002 7b7d"), status: .invalidTokenSize, identifier: 11, command: 1)
        // Command 0 has no identifier: rejected with none, and no error response is to be written.
        let r = gatewayEvents(bytes(hex: "00 0010 00112233445566778899aabbccddeeff 0002 7b7d"), splitAt: 0)
        #expect(r.first?.rejection?.status == .invalidTokenSize)
        #expect(r.first?.rejection?.identifier == nil)
        #expect(r.first?.rejection?.errorResponse == nil)
    }

    @Test func invalidPayloadSizeIsStatus7() {
        let limits = PayloadLimits(command2: 64, legacy: 32)
        let big = Array(repeating: UInt8(ascii: "x"), count: 65)
        Self.checkRejection(
            Self.frame([Self.tokenItem, (2, big), Self.idItem(12), Self.expiryItem, Self.priorityItem]),
            status: .invalidPayloadSize, identifier: 12, limits: limits)
        // Legacy format with its own limit: 33 > 32.
        Self.checkRejection(
            bytes(hex: "01 0000000d 00000000 0020 \(countingTokenHex) 0021") + Array(repeating: 0x41, count: 33),
            status: .invalidPayloadSize, identifier: 13, command: 1, limits: limits)
        // The default limit is 2048: 2048 passes, 2049 is refused.
        let ok = encodeCommand2(countingToken, Array(repeating: 0x41, count: 2048), id: 1, expiry: 0, priority: .immediate)
        #expect(gatewayEvents(ok, splitAt: 0).first?.notification != nil)
        Self.checkRejection(
            Self.frame([Self.idItem(14), Self.tokenItem, (2, Array(repeating: 0x41, count: 2049))]),
            status: .invalidPayloadSize, identifier: 14)
    }

    @Test func malformedIsStatus1() {
        // Unknown command.
        Self.checkRejection([0x07, 1, 2, 3], status: .processingError, identifier: nil, command: 7)
        // Unknown item.
        Self.checkRejection(
            Self.frame([Self.tokenItem, Self.payloadItem, Self.idItem(15), (9, [1])]), status: .processingError, identifier: 15)
        // Repeated item.
        Self.checkRejection(
            Self.frame([Self.tokenItem, Self.payloadItem, Self.idItem(16), Self.tokenItem]), status: .processingError, identifier: 16)
        // Identifier of the wrong size.
        Self.checkRejection(Self.frame([Self.tokenItem, Self.payloadItem, (3, [1, 2])]), status: .processingError, identifier: nil)
        // Priority other than 5 or 10.
        Self.checkRejection(
            Self.frame([Self.idItem(17), Self.tokenItem, Self.payloadItem, (5, [7])]), status: .processingError, identifier: 17)
        // An item running past the end of its frame.
        var short = Self.frame([Self.idItem(18), Self.tokenItem, Self.payloadItem])
        short[4] -= 1  // frame length one byte short
        Self.checkRejection(short, status: .processingError, identifier: 18)
    }

    @Test func lyingFrameLengthAllocatesNothing() {
        // A frame that claims 4 GiB: the decoder parses the real items, finds the frame goes on past
        // anything valid (a repeated item), and answers with status 1 naming the identifier; memory stays
        // within one item.
        let frame = Self.frame([Self.idItem(19), Self.tokenItem, Self.payloadItem], frameLength: 0xFFFF_FFFF)
        var d = GatewayFrameDecoder()
        d.append(frame)
        #expect(d.next() == nil)  // waiting for more of the frame
        #expect(d.bufferedByteCount < 64)
        d.append(Self.frame([Self.tokenItem]).dropFirst(5))
        let r = d.next()?.rejection
        #expect(r?.status == .processingError)
        #expect(r?.identifier == 19)
        // Garbage that claims a huge frame and then a huge bad item is skipped, not stored.
        var g = GatewayFrameDecoder()
        g.append(bytes(hex: "02 ffffffff 01 ffff"))
        var rejection: FrameRejection?
        for _ in 0..<20 where rejection == nil {
            g.append(Array(repeating: 0xAB, count: 4096))
            rejection = g.next()?.rejection
            #expect(g.bufferedByteCount <= 4096)
        }
        #expect(rejection?.status == .invalidTokenSize)
    }

    @Test func nothingAfterARejection() {
        var d = GatewayFrameDecoder()
        d.append([0x09])
        #expect(d.next()?.rejection != nil)
        #expect(d.hasFailed)
        d.append(encodeCommand2(countingToken, Self.payload, id: 1, expiry: 0, priority: .immediate))
        #expect(d.next() == nil)
        #expect(d.bufferedByteCount == 0)
    }

    @Test func rejectionErrorResponse() {
        let r = FrameRejection(status: .invalidPayloadSize, identifier: 5, command: 2, reason: "x")
        #expect(r.errorResponse == ErrorResponse(status: .invalidPayloadSize, identifier: 5))
        let noID = FrameRejection(status: .processingError, identifier: nil, command: 7, reason: "x")
        #expect(noID.errorResponse == ErrorResponse(status: .processingError, identifier: 0))
    }
}
