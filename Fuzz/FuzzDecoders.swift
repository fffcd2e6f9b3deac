// libFuzzer entry point over the protocol decoders. Built by ops/fuzz with
//   swiftc -sanitize=fuzzer,address -parse-as-library Sources/APNsProtocol/**/*.swift Fuzz/FuzzDecoders.swift
// The first byte picks the decoder and the chunk size, so one corpus explores all of them and every way
// a TLS read can split the stream: its low 2 bits the decoder; for 3, bit 2 picks the HPACK answer
// decoder (set) or the JSON reader (clear, as before it was added). Invariants are checked with preconditions: a violation is a crash,
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
    case 3 where selector & 4 != 0:
        fuzzHPACK(input, maxTableSize: [4096, 256, 0, 100][Int(selector >> 3) & 3])
    default:
        // The JSON parser and the payload reader face producers' input; they must only ever throw.
        fuzzParseObject(input)
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

/// HPACK answer decoding (RFC 7541): blocks of the input (each a 2-byte length, then that many octets)
/// through one decoder, as one connection's answers. A block may be refused; the decoder is used on, so
/// a refusal that leaves the table inconsistent shows too.
func fuzzHPACK(_ input: UnsafeRawBufferPointer, maxTableSize: Int) {
    var decoder = HPACKAnswerDecoder(maxTableSize: maxTableSize)
    var offset = 0
    while offset + 2 <= input.count {
        let length = min(Int(input[offset]) << 8 | Int(input[offset + 1]), input.count - offset - 2)
        let block = UnsafeRawBufferPointer(rebasing: input[offset + 2..<offset + 2 + length])
        offset += 2 + length
        if let answer = try? decoder.decode(block) {
            precondition((0...999).contains(answer.status))
            precondition(answer.uniqueID.map { $0.utf8.count == APNsID.textCount } ?? true)
        }
        // §4.1–§4.4: the table's size is its entries' (octets + 32 each), within the size the encoder
        // chose, within ours.
        precondition(decoder.tableSize <= decoder.tableCapacity && decoder.tableCapacity <= maxTableSize)
        let entries = decoder.dynamicTable
        precondition(entries.count == decoder.entryCount)
        precondition(entries.reduce(0) { $0 + $1.name.count + $1.value.count + 32 } == decoder.tableSize)
    }
}

/// `JSONParser.parseObject` (a job's reader) against `parse`: the same error at the same offset, or the
/// same members for the keys it names (here: keys of one byte, named by it; odd ones built, even ones
/// kept raw) — and the same again when every object or array value of the first read is offered as
/// known at every later position of its key.
func fuzzParseObject(_ input: UnsafeRawBufferPointer) {
    let name: (UnsafeRawBufferPointer) -> UInt8? = { $0.count == 1 ? $0[0] : nil }
    let plain = Result { () throws(JSONParser.Error) in try JSONParser.parse(input) }
    let first = Result { () throws(JSONParser.Error) in try JSONParser.parseObject(input, key: name, keepingRaw: { $0 % 2 == 0 }) }
    var known: [UInt8: [UInt8]] = [:]
    for offering in [false, true] {
        let read: Result<[(key: UInt8, value: JSONParser.Member)]?, JSONParser.Error>
        if offering {
            guard case .success(let members?) = first else { return }
            for m in members {
                if case .raw(let r) = m.value, known[m.key] == nil { known[m.key] = Array(UnsafeRawBufferPointer(rebasing: input[r])) }
            }
            read = Result { () throws(JSONParser.Error) in
                try JSONParser.parseObject(input, key: name, keepingRaw: { $0 % 2 == 0 }) { key, rest in
                    guard let k = known[key], rest.starts(with: k) else { return nil }
                    return k.count
                }
            }
        } else {
            read = first
        }
        switch (plain, read) {
        case (.success(.object(let object)), .success(let members?)):
            let expected = object.filter { $0.key.utf8.count == 1 }.map(\.value)
            precondition(members.count == expected.count, "parseObject: another number of members")
            for (m, e) in zip(members, expected) {
                switch m.value {
                case .value(let v): precondition(v == e, "parseObject: another value")
                case .raw(let r): precondition((try? JSONParser.parse(UnsafeRawBufferPointer(rebasing: input[r]))) == e, "parseObject: another raw value")
                }
            }
        case (.success(.object), .success(nil)):
            preconditionFailure("parseObject: an object not read as one")
        case (_, .success(nil)):
            break  // not an object: `parse` says what it is
        case (.failure(let a), .failure(let b)):
            precondition(a == b, "parseObject: another error: \(a) vs \(b)")
        default:
            preconditionFailure("parseObject: \(plain) vs \(read)")
        }
    }
}
