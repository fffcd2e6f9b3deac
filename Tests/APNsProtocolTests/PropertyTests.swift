import APNsProtocol
import PropertyBased
import Testing

/// Round trips over generated inputs: whatever the encoder writes, the gateway decoder reads back the
/// same, split anywhere; whatever string the JSON writer writes, the parser reads back.
@Suite struct PropertyTests {
    static let tokenGen = Gen.uint8().array(of: 32).map { try! DeviceToken(bytes: $0) }
    static let payloadGen = Gen.uint8().array(of: 1...2048)
    /// Characters from the BMP (control characters, ASCII, 2- and 3-byte UTF-8) and from the emoji block
    /// (4 bytes), so escapes and every UTF-8 length turn up; surrogate code points map to U+FFFD.
    static let characterGen = Gen.uint32(in: 0...0x1_2000).map { v in
        Character(UnicodeScalar(v < 0x1_0000 ? v : 0x1_F000 + v % 0x1000) ?? "\u{FFFD}")
    }

    @Test func command2RoundTrip() async {
        await propertyCheck(
            count: 300, input: Self.tokenGen, Self.payloadGen, Gen.uint32(), Gen.uint32(), Gen.bool, Gen.int(in: 0...4200)
        ) { token, payload, id, expiry, low, splitSeed in
            let priority: Priority = low ? .conservePower : .immediate
            let frame = encodeCommand2(token, payload, id: id, expiry: expiry, priority: priority)
            let events = gatewayEvents(frame, splitAt: splitSeed % (frame.count + 1))
            #expect(
                events == [
                    .notification(
                        ReceivedNotification(
                            command: 2, token: token, payload: payload, identifier: id, expiry: expiry, priority: priority))
                ])
        }
    }

    @Test func legacyRoundTrip() async {
        await propertyCheck(count: 300, input: Self.tokenGen, Self.payloadGen, Gen.uint32(), Gen.uint32(), Gen.int(in: 0...4200)) {
            token, payload, id, expiry, splitSeed in
            let stream = encodeCommand1(token, payload, id: id, expiry: expiry) + encodeCommand0(token, payload)
            let events = gatewayEvents(stream, splitAt: splitSeed % (stream.count + 1))
            #expect(
                events == [
                    .notification(
                        ReceivedNotification(command: 1, token: token, payload: payload, identifier: id, expiry: expiry, priority: nil)),
                    .notification(
                        ReceivedNotification(command: 0, token: token, payload: payload, identifier: nil, expiry: nil, priority: nil)),
                ])
        }
    }

    @Test func tokenHexRoundTrip() async {
        await propertyCheck(count: 500, input: Self.tokenGen, Gen.bool) { token, upper in
            let text = upper ? token.hex.uppercased() : token.hex
            #expect((try? DeviceToken(hex: text)) == token)
        }
    }

    @Test func jsonStringRoundTrip() async {
        await propertyCheck(count: 500, input: Self.characterGen.string(of: 0...40)) { s in
            let written = JSONValue.string(s).serialized()
            #expect((try? JSONParser.parse(written)) == .string(s))
            #expect(written.count == JSONWriter.encodedLength(of: s))
        }
    }

    @Test func truncationAlwaysFitsAndKeepsAPrefix() async {
        await propertyCheck(count: 300, input: Self.characterGen.string(of: 0...300), Gen.int(in: 24...200)) { body, limit in
            let enc = PayloadEncoder(limit: limit, truncatesAlertBody: true)
            let p = Payload(aps: APS(alert: .text(body)))
            guard let out = try? enc.encode(p) else {
                Issue.record("limit \(limit) leaves room for an ellipsis, so truncation must succeed")
                return
            }
            #expect(out.count <= limit)
            guard let alert = try? JSONParser.parse(out)["aps"]?["alert"]?.stringValue else {
                Issue.record("truncated payload is not valid JSON: \(String(decoding: out, as: UTF8.self))")
                return
            }
            if alert != body {
                #expect(alert.hasSuffix("…"))
                #expect(body.hasPrefix(String(alert.dropLast())))
            }
        }
    }
}
