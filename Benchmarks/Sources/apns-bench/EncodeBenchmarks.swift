import APNsProtocol
import APNsTransport
import Foundation
import NIOCore

/// Command-2 encoding and payload building, against copying pre-encoded bytes (the memory-bandwidth
/// limit: no encoder can beat it) and Foundation's JSONSerialization (what a quick implementation uses).
enum EncodeBenchmarks {
    static func run() {
        let token = try! DeviceToken(hex: String(repeating: "5a", count: 32))
        let payloadBytes = Array(
            #"{"aps":{"alert":"Spring sale: 20% off everything until Sunday","badge":1,"sound":"default"},"cid":"spring-sale"}"#.utf8)
        let frames = 2_000_000
        let frameSize = FrameEncoder.command2Size(payloadCount: payloadBytes.count)
        let batchBytes = 64 * 1024  // a shard's flush threshold

        var pre: [UInt8] = []
        payloadBytes.withUnsafeBytes {
            FrameEncoder.writeCommand2(token: token, payload: $0, identifier: 1, expiry: 0, priority: .immediate, into: &pre)
        }
        var sink: [UInt8] = []
        sink.reserveCapacity(batchBytes + 4096)

        let copy = Measure.run("copy pre-encoded frame (baseline)", operations: frames, bytes: frames * frameSize) {
            pre.withUnsafeBytes { raw in
                for _ in 0..<frames {
                    if sink.count >= batchBytes { sink.removeAll(keepingCapacity: true) }
                    sink.append(contentsOf: raw)
                }
            }
        }
        let toArray = Measure.run("encode command 2 → [UInt8]", operations: frames, bytes: frames * frameSize) {
            payloadBytes.withUnsafeBytes { payload in
                for i in 0..<frames {
                    if sink.count >= batchBytes { sink.removeAll(keepingCapacity: true) }
                    FrameEncoder.writeCommand2(
                        token: token, payload: payload, identifier: UInt32(truncatingIfNeeded: i), expiry: 0,
                        priority: .immediate, into: &sink)
                }
            }
        }
        var buffer = ByteBufferAllocator().buffer(capacity: batchBytes + 4096)
        let toByteBuffer = Measure.run("encode command 2 → NIO ByteBuffer", operations: frames, bytes: frames * frameSize) {
            payloadBytes.withUnsafeBytes { payload in
                for i in 0..<frames {
                    if buffer.readableBytes >= batchBytes { buffer.clear() }
                    FrameEncoder.writeCommand2(
                        token: token, payload: payload, identifier: UInt32(truncatingIfNeeded: i), expiry: 0,
                        priority: .immediate, into: &buffer)
                }
            }
        }
        Measure.table("Command-2 encoding (\(frameSize)-byte frames)", [toArray, toByteBuffer], baseline: copy, unit: "frame")

        // Payload building.
        let payload = Payload(
            aps: APS(alert: .text("Spring sale: 20% off everything until Sunday"), badge: 1, sound: "default"),
            custom: [.init("cid", "spring-sale")])
        let payloads = 300_000
        let encoder = PayloadEncoder()
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        let size = (try? encoder.encode(payload).count) ?? 0
        let foundation = Measure.run("Foundation JSONSerialization (baseline)", operations: payloads, bytes: payloads * size) {
            for _ in 0..<payloads {
                let dict: [String: Any] = [
                    "aps": ["alert": "Spring sale: 20% off everything until Sunday", "badge": 1, "sound": "default"],
                    "cid": "spring-sale",
                ]
                _ = try? JSONSerialization.data(withJSONObject: dict)
            }
        }
        let built = Measure.run("PayloadEncoder.encode(into:)", operations: payloads, bytes: payloads * size) {
            for _ in 0..<payloads {
                out.removeAll(keepingCapacity: true)
                try? encoder.encode(payload, into: &out)
            }
        }
        Measure.table("Payload building (\(size)-byte payload)", [built], baseline: foundation, unit: "payload")
    }
}
