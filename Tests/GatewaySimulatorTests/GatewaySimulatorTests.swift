import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import NIOSSL
import TestSupport
import Testing

@Suite(.serialized) struct GatewaySimulatorTests {
    @Test func acceptsAndRecordsFramesOfEveryCommand() async throws {
        try await withSimulator { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            var stream = frame(1) + frame(2)
            let payload = Array(#"{"aps":{"badge":1}}"#.utf8)
            payload.withUnsafeBytes {
                FrameEncoder.writeCommand1(token: token(3), payload: $0, identifier: 3, expiry: 0, into: &stream)
                FrameEncoder.writeCommand0(token: token(4), payload: $0, into: &stream)
            }
            try await client.send(stream, inPiecesOf: 7)  // split everywhere, TLS records of 7 bytes
            try await eventually("4 accepted") { sim.totals.accepted == 4 }
            await client.close()
            let records = sim.records
            #expect(records.map(\.identifier) == [1, 2, 3, nil])
            #expect(records.map(\.command) == [2, 2, 1, 0])
            #expect(records.map(\.token) == [token(1).hex, token(2).hex, token(3).hex, token(4).hex])
            #expect(records.allSatisfy { $0.app == shop })
            #expect(records.map(\.jobID) == ["job-1", "job-2", nil, nil])
            #expect(Set(records.map(\.connection)).count == 1)
            #expect(sim.totals.rejectedByStatus.isEmpty)
        }
    }

    /// Each malformation: the right status, the right identifier, the connection closed, and nothing
    /// sent after it recorded.
    @Test(arguments: [
        // Frame lengths: identifier item 3+4 = 7, token 3+32 = 35, payload `{}` 3+2 = 5.
        // token of 31 bytes → 5: 7 + 3+31 + 5 = 46 = 0x2e
        (
            bytes(fromHex: "02 0000002e 030004 00000007 01001f") + [UInt8](repeating: 1, count: 31) + bytes(fromHex: "020002 7b7d"),
            UInt8(5), UInt32(7)
        ),
        // no token → 2: 7 + 5 = 12 = 0x0c
        (bytes(fromHex: "02 0000000c 030004 00000008 020002 7b7d"), 2, 8),
        // empty payload → 4: 7 + 35 + 3 = 45 = 0x2d
        (bytes(fromHex: "02 0000002d 030004 00000009 0100200001020304050607080910111213141516171819202122232425262728293031 020000"), 4, 9),
        // payload over 2048 → 7: 7 + 3+2049 + 35 = 2094 = 0x82e
        (
            bytes(fromHex: "02 0000082e 030004 0000000a 020801") + [UInt8](repeating: 0x20, count: 2049)
                + bytes(fromHex: "0100200001020304050607080910111213141516171819202122232425262728293031"), 7, 10
        ),
        // unknown item → 1: 7 + 3+1 = 11 = 0x0b
        (bytes(fromHex: "02 0000000b 030004 0000000b 090001 00"), 1, 11),
        // unknown command → 1, no identifier readable → 0
        (bytes(fromHex: "07 00"), 1, 0),
    ])
    func malformedFrameGetsItsStatus(bad: [UInt8], status: UInt8, identifier: UInt32) async throws {
        try await withSimulator { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            // The gateway may close while the rest is still being written: that is the point.
            try? await client.send(frame(1) + frame(2) + bad + frame(100) + frame(101), inPiecesOf: 100)
            let response = try await client.receiveUntilClosed()
            var expected: [UInt8] = []
            FrameEncoder.writeErrorResponse(ErrorResponse(status: ErrorStatus(rawValue: status), identifier: identifier), into: &expected)
            #expect(response == expected)
            #expect(sim.records.map(\.identifier) == [1, 2])
            #expect(sim.totals.rejectedByStatus == [status: 1])
        }
    }

    @Test func command0MalformationClosesWithoutResponse() async throws {
        try await withSimulator { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await client.send(frame(1) + bytes(fromHex: "00 0010 00112233445566778899aabbccddeeff 0002 7b7d") + frame(2))
            #expect(try await client.receiveUntilClosed() == [])
            #expect(sim.records.map(\.identifier) == [1])
            #expect(sim.totals.silentlyClosed == 1)
        }
    }

    @Test func invalidTokenAndProcessingErrorFaults() async throws {
        var faults = FaultScript()
        faults.invalidTokens = [token(3).hex]
        faults.processingErrorAt = [5]  // the 5th notification to arrive overall
        try await withSimulator(faults: faults) { sim in
            let a = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await a.send(frame(1) + frame(2) + frame(3) + frame(4))
            #expect(try await a.receiveUntilClosed() == bytes(fromHex: "08 08 00000003"))
            let b = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await b.send(frame(10) + frame(11) + frame(12))  // arrivals 4, 5, 6
            #expect(try await b.receiveUntilClosed() == bytes(fromHex: "08 01 0000000b"))
            #expect(sim.records.map(\.identifier) == [1, 2, 10])
        }
    }

    @Test func shutdownNamesTheLastProcessedNotification() async throws {
        try await withSimulator { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await client.send((1...5).flatMap { frame($0) })
            try await eventually("5 accepted") { sim.totals.accepted == 5 }
            sim.shutdownConnections()
            #expect(try await client.receiveUntilClosed() == bytes(fromHex: "08 0a 00000005"))
        }
        var faults = FaultScript()
        faults.shutdownEvery = 4
        try await withSimulator(faults: faults) { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await client.send((1...10).flatMap { frame($0) })
            #expect(try await client.receiveUntilClosed() == bytes(fromHex: "08 0a 00000004"))
            #expect(sim.records.map(\.identifier) == [1, 2, 3, 4])
        }
    }

    @Test func abruptDropSaysNothing() async throws {
        var faults = FaultScript()
        faults.dropEvery = 3
        try await withSimulator(faults: faults) { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await client.send((1...6).flatMap { frame($0) })
            #expect(try await client.receiveUntilClosed() == [])
            #expect(sim.records.map(\.identifier) == [1, 2, 3])
            #expect(sim.totals.abruptDrops == 1)
        }
    }

    @Test func feedbackListIsServedInSpecFormatThenCleared() async throws {
        var faults = FaultScript()
        faults.uninstalledTokens = [token(7).hex]
        try await withSimulator(faults: faults) { sim in
            sim.queueFeedback(app: shop, token: token(1), time: 1_767_225_600)
            sim.queueFeedback(app: news, token: token(2), time: 5)
            // An uninstalled token is accepted and queued for feedback with the current time.
            let g = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await g.send(frame(7))
            try await eventually("accepted") { sim.totals.accepted == 1 }
            await g.close()
            let queued = sim.pendingFeedback(app: shop)
            #expect(queued.map(\.deviceToken) == [token(1), token(7)])
            let now = UInt32(Date().timeIntervalSince1970)
            #expect(queued[1].timestamp <= now && queued[1].timestamp + 60 > now)

            let f = try await RawTLSClient.connect(port: sim.ports.feedback, certificate: shop)
            let streamed = try await f.receiveUntilClosed()
            var expected: [UInt8] = []
            for t in queued { FrameEncoder.writeFeedbackTuple(t, into: &expected) }
            #expect(streamed == expected)
            #expect(Array(streamed.prefix(6)) == bytes(fromHex: "6955b900 0020"))
            #expect(sim.pendingFeedback(app: shop).isEmpty)
            // Read again: nothing left. The other app's list is its own.
            let again = try await RawTLSClient.connect(port: sim.ports.feedback, certificate: shop)
            #expect(try await again.receiveUntilClosed() == [])
            #expect(sim.pendingFeedback(app: news).count == 1)
        }
    }

    @Test func connectionsWithoutTrustedCertificateAreRefused() async throws {
        try await withSimulator { sim in
            for certificate in [nil, "rogue"] as [String?] {
                let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: certificate)
                try? await client.send(frame(1))
                let got = try await client.receiveUntilClosed()
                #expect(got == [], "certificate \(certificate ?? "none")")
                #expect(await client.handshakeError != nil, "certificate \(certificate ?? "none")")
            }
            #expect(sim.totals.accepted == 0)
            #expect(sim.records.isEmpty)
        }
    }

    /// Issue 10 (5): a client that closes without close_notify after a good handshake (a killed sender)
    /// is not a handshake failure; it is counted as an unclean close.
    @Test func closingWithoutCloseNotifyIsNoHandshakeFailure() async throws {
        try await withSimulator { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            try await client.send(frame(1))
            try await eventually("accepted") { sim.totals.accepted == 1 }
            try await client.closeWithoutCloseNotify()
            try await eventually("unclean close seen") { sim.totals.uncleanCloses == 1 }
            #expect(sim.totals.handshakeFailures == 0)
        }
    }

    @Test func lyingFrameLengthIsAnsweredNotAllocated() async throws {
        try await withSimulator { sim in
            let client = try await RawTLSClient.connect(port: sim.ports.gateway, certificate: shop)
            // Claims 4 GiB, then real items, then a repeated token item: status 1 naming identifier 9.
            var lie = bytes(fromHex: "02 ffffffff 030004 00000009 010020") + token(9).bytes
            lie += bytes(fromHex: "020002 7b7d 010020") + token(9).bytes
            try await client.send(frame(1) + lie)
            #expect(try await client.receiveUntilClosed() == bytes(fromHex: "08 01 00000009"))
            #expect(sim.records.map(\.identifier) == [1])
        }
    }

    @Test func topicComesFromTheCertificateUID() throws {
        let der = try NIOSSLCertificate.fromPEMFile(TestCertificates.pem(news))[0].toDERBytes()
        #expect(CertificateTopic.topic(fromDER: der) == news)
        #expect(CertificateTopic.topic(fromDER: [0x30, 0x03, 0x02, 0x01]) == nil)
    }
}

func bytes(fromHex hex: String) -> [UInt8] {
    let digits = Array(hex.filter { !$0.isWhitespace })
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
}
