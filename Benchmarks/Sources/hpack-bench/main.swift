// hpack-bench: CPU per answer header block, NIOHPACK's `HPACKDecoder` (what `HTTP2ClientFrameCodec` used)
// beside our `HPACKAnswerDecoder`, on the stream a sender reads from APNs: `:status: 200` and a new
// `apns-id` per answer, encoded by NIOHPACK's `HPACKEncoder` as a server would (Huffman coding, every
// field with incremental indexing, so each block adds an entry and, once the 4096-octet table is full,
// evicts one); the sandbox's answers add `apns-unique-id`. Each decoder reads the whole stream from a
// fresh table, as a new connection would, and does what the codec did with the block (`:status` as an
// Int, the unique id kept when 36 octets). Its own product, so that `ops/bench hpack` builds only
// APNsProtocol and NIOHPACK: `hpack-bench [BLOCKS] [ROUNDS]`.
import APNsProtocol
import Foundation
import NIOCore
import NIOHPACK

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let blockCount = arguments.first ?? 200_000
let rounds = arguments.dropFirst().first ?? 7

/// A random UUID's text: each answer's `apns-id` is new, so it is always a literal, Huffman-coded.
func uuid() -> String {
    UUID().uuidString
}

/// The answers as a server's encoder writes them, each block a slice of one buffer (as a read's are).
func stream(sandbox: Bool) -> [ByteBuffer] {
    var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
    return (0..<blockCount).map { _ in
        var headers: HPACKHeaders = [":status": "200", "apns-id": uuid()]
        if sandbox { headers.add(name: "apns-unique-id", value: uuid()) }
        var block = ByteBuffer()
        try! encoder.encode(headers: headers, to: &block)
        return block
    }
}

/// This process's CPU time (user + system), in nanoseconds.
func cpuNanoseconds() -> UInt64 {
    var t = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t)
    return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
}

func niohpack(_ blocks: [ByteBuffer]) -> Int {
    var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    var check = 0
    for var block in blocks {
        let headers = try! decoder.decodeHeaders(from: &block)
        check &+= headers.first(name: ":status").flatMap { Int($0) } ?? 0
        if headers.count > 2, let id = headers.first(name: "apns-unique-id"), id.utf8.count == 36 { check &+= 1 }
    }
    return check
}

func ours(_ blocks: [ByteBuffer]) -> Int {
    var decoder = HPACKAnswerDecoder()
    var check = 0
    for block in blocks {
        let answer = try! block.withUnsafeReadableBytes { try decoder.decode($0) }
        check &+= answer.status
        if answer.uniqueID != nil { check &+= 1 }
    }
    return check
}

func measure(_ name: String, sandbox: Bool) {
    let blocks = stream(sandbox: sandbox)
    let octets = blocks.reduce(0) { $0 + $1.readableBytes }
    var best: (nio: UInt64, ours: UInt64) = (.max, .max)
    for round in 0..<rounds {
        // Alternating which runs first, so neither always follows the other on a warmer cache.
        for which in round % 2 == 0 ? [0, 1] : [1, 0] {
            let start = cpuNanoseconds()
            let check = which == 0 ? niohpack(blocks) : ours(blocks)
            let spent = cpuNanoseconds() - start
            precondition(check == blocks.count * (sandbox ? 201 : 200), "the decoders disagree")
            if which == 0 { best.nio = min(best.nio, spent) } else { best.ours = min(best.ours, spent) }
        }
    }
    let nio = Double(best.nio) / Double(blocks.count)
    let our = Double(best.ours) / Double(blocks.count)
    print(
        "| \(name) | \(blocks.count) | \(octets / blocks.count) | \(String(format: "%.0f", nio)) | \(String(format: "%.0f", our)) | \(String(format: "%.2f×", our / nio)) |"
    )
}

print("## HPACK: CPU ns per answer header block, best of \(rounds) rounds")
print("| stream | blocks | octets per block | NIOHPACK HPACKDecoder | HPACKAnswerDecoder | ratio |")
print("|---|---:|---:|---:|---:|---:|")
measure("`:status 200` + `apns-id`", sandbox: false)
measure("… + `apns-unique-id` (sandbox)", sandbox: true)
