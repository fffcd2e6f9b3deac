// libFuzzer entry point over the protocol decoders. Built by ops/fuzz with
//   swiftc -sanitize=fuzzer,address -parse-as-library Sources/APNsProtocol/**/*.swift Fuzz/FuzzDecoders.swift
// The first byte picks the decoder and the chunk size, so one corpus explores all of them and every way
// a TLS read can split the stream. Invariants are checked with preconditions: a violation is a crash,
// which libFuzzer reports and saves.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDecoders(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let selector = data[0]
    let input = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    let chunk = Int(selector >> 2) + 1  // 1…64 bytes per "read"

    switch selector & 3 {
    case 0:
        var decoder = ErrorResponseDecoder()
        var offset = 0
        outer: while offset < input.count {
            let end = min(offset + chunk, input.count)
            decoder.append(UnsafeRawBufferPointer(rebasing: input[offset..<end]))
            offset = end
            while true {
                do {
                    guard try decoder.next() != nil else { break }
                } catch {
                    break outer
                }
            }
            precondition(decoder.pendingByteCount < ErrorResponse.size)
        }
    case 1:
        var decoder = FeedbackDecoder()
        var offset = 0
        while offset < input.count {
            let end = min(offset + chunk, input.count)
            decoder.append(UnsafeRawBufferPointer(rebasing: input[offset..<end]))
            offset = end
            while let tuple = decoder.next() {
                precondition(tuple.token.count <= Int(UInt16.max))
            }
        }
    case 2:
        let limits = PayloadLimits(command2: 2048, legacy: selector & 0x80 == 0 ? 2048 : 256)
        var decoder = GatewayFrameDecoder(limits: limits)
        var offset = 0
        var rejected = false
        while offset < input.count {
            let end = min(offset + chunk, input.count)
            decoder.append(UnsafeRawBufferPointer(rebasing: input[offset..<end]))
            offset = end
            while let event = decoder.next() {
                precondition(!rejected, "an event after a rejection")
                switch event {
                case .notification(let n):
                    precondition(n.payload.count >= 1)
                    precondition(n.payload.count <= (n.command == 2 ? limits.command2 : limits.legacy))
                case .rejected(let r):
                    rejected = true
                    precondition(r.status != .noErrors && r.status != .shutdown && r.status != .invalidToken)
                }
            }
            // Whatever the peer claims, what is held stays within one item plus one read.
            precondition(decoder.bufferedByteCount <= 3 + Int(UInt16.max) + chunk + 16)
        }
    default:
        // The JSON parser and the payload reader face producers' input; they must only ever throw.
        if let value = try? JSONParser.parse(input) {
            let again = try? JSONParser.parse(value.serialized())
            precondition(again == value, "serialise → parse is not the identity")
            if let payload = try? Payload(json: value) {
                let encoder = PayloadEncoder(limit: 2048, truncatesAlertBody: true)
                if let bytes = try? encoder.encode(payload) {
                    precondition(bytes.count <= 2048)
                    precondition((try? JSONParser.parse(bytes)) != nil, "encoded payload is not JSON")
                }
            }
        }
    }
    return 0
}
