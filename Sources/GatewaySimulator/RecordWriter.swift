import APNsProtocol
import Foundation
import Synchronization

/// One accepted notification, as the simulator records it.
public struct AcceptedNotification: Sendable, Hashable, Codable {
    /// Milliseconds since 1970-01-01 UTC.
    public var time: Int64
    /// Connection number, counted from 1 per simulator.
    public var connection: Int
    /// App topic from the provider certificate.
    public var app: String
    public var token: String
    /// Notification identifier; nil for command 0 or a command-2 frame without item 3.
    public var identifier: UInt32?
    public var command: UInt8
    /// FNV-1a 64 of the payload bytes, in hex: enough to tell payloads apart, cheap to compute.
    public var payloadHash: String
    /// The `jid` key of the payload when the sender put the job id there (the pipeline does so when
    /// configured with `embed_job_id`), so tests can check "exactly once" per job.
    public var jobID: String?

    enum CodingKeys: String, CodingKey {
        case time = "t"
        case connection = "conn"
        case app, token
        case identifier = "id"
        case command = "cmd"
        case payloadHash = "payload_hash"
        case jobID = "job"
    }
}

/// Appends accepted notifications to an NDJSON file without slowing the gateway: connections hand
/// over whole reads' worth of lines under a lock, and a timer on a queue of its own writes them out.
/// Generic over the record so the HTTP/2 simulator writes its own records the same way.
package final class RecordWriter<Record: Sendable>: Sendable {
    private struct Pending {
        var bytes: [UInt8] = []
        var records: [Record] = []
    }

    private let pending = Mutex(Pending())
    private let memory = Mutex<[Record]>([])
    private let keepsInMemory: Bool
    private let fd: Int32?
    private let queue = DispatchQueue(label: "apns.simulator.records")
    // Dispatch sources are thread-safe (their API may be called from any thread).
    nonisolated(unsafe) private let timer: any DispatchSourceTimer

    /// Lines written as they are appended rather than every 50 ms: a `kill -9` of the simulator then
    /// loses no record of a notification it answered (the soak's fault scenarios count on that).
    private let synchronous: Bool

    package init(path: String?, keepInMemory: Bool, synchronous: Bool = false) throws {
        self.synchronous = synchronous
        if let path {
            let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            guard fd >= 0 else {
                throw SimulatorError.records(path: path, reason: String(cString: strerror(errno)))
            }
            self.fd = fd
        } else {
            self.fd = nil
        }
        keepsInMemory = keepInMemory
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .milliseconds(50), repeating: .milliseconds(50))
        let flush: @Sendable () -> Void = { [weak self] in self?.flushNow() }
        timer.setEventHandler(handler: flush)
        timer.resume()
    }

    package var isEnabled: Bool { fd != nil || keepsInMemory }

    /// Adds a batch of records (and their NDJSON lines) from one read of one connection.
    package func append(lines: [UInt8], records: [Record]) {
        pending.withLock {
            if let fd, synchronous {
                // Under the lock, so lines keep their order; into the page cache before the caller answers.
                Self.writeAll(fd, lines)
            } else if fd != nil {
                $0.bytes.append(contentsOf: lines)
            }
            if keepsInMemory { $0.records.append(contentsOf: records) }
        }
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    break
                }
                offset += n
            }
        }
    }

    /// Writes out everything appended so far; returns when it is on disk (in the page cache).
    package func flush() { queue.sync { flushNow() } }

    private func flushNow() {
        let batch = pending.withLock { p -> Pending in
            let out = p
            p = Pending()
            return out
        }
        if keepsInMemory, !batch.records.isEmpty { memory.withLock { $0.append(contentsOf: batch.records) } }
        if let fd, !batch.bytes.isEmpty { Self.writeAll(fd, batch.bytes) }
    }

    package var records: [Record] {
        flush()
        return memory.withLock { $0 }
    }

    package func close() {
        timer.cancel()
        flush()
        if let fd { _ = Foundation.close(fd) }
    }

}

extension RecordWriter where Record == AcceptedNotification {
    /// Appends one record's NDJSON line to `out`, by hand: this runs for every accepted notification.
    static func appendLine(_ r: AcceptedNotification, to out: inout [UInt8]) {
        out.append(contentsOf: #"{"t":"#.utf8)
        out.append(contentsOf: String(r.time).utf8)
        out.append(contentsOf: #","conn":"#.utf8)
        out.append(contentsOf: String(r.connection).utf8)
        out.append(contentsOf: #","app":"#.utf8)
        JSONWriter.writeString(r.app, into: &out)
        out.append(contentsOf: #","token":""#.utf8)
        out.append(contentsOf: r.token.utf8)
        out.append(contentsOf: #"","id":"#.utf8)
        out.append(contentsOf: (r.identifier.map { String($0) } ?? "null").utf8)
        out.append(contentsOf: #","cmd":"#.utf8)
        out.append(contentsOf: String(r.command).utf8)
        out.append(contentsOf: #","payload_hash":""#.utf8)
        out.append(contentsOf: r.payloadHash.utf8)
        out.append(contentsOf: #"","job":"#.utf8)
        if let job = r.jobID { JSONWriter.writeString(job, into: &out) } else { out.append(contentsOf: "null".utf8) }
        out.append(contentsOf: "}\n".utf8)
    }
}

public enum SimulatorError: Error, CustomStringConvertible {
    case records(path: String, reason: String)
    case faultScript(String)

    public var description: String {
        switch self {
        case .records(let path, let reason): "cannot open records file \(path): \(reason)"
        case .faultScript(let reason): "fault script: \(reason)"
        }
    }
}

package enum PayloadFacts {
    /// FNV-1a 64 in 16 hex digits.
    package static func hash(_ payload: [UInt8]) -> String { FNV1a64.hex(FNV1a64.hash(payload)) }

    /// The string value of a top-level `"jid"` key, found by a byte scan (no JSON parse, and no
    /// allocation until it is found: this runs for every accepted notification).
    package static func jobID(in payload: [UInt8]) -> String? {
        let needle: StaticString = #""jid":""#
        let n = needle.utf8CodeUnitCount
        guard payload.count > n else { return nil }
        return needle.withUTF8Buffer { key -> String? in
            var i = 0
            while i <= payload.count - n {
                var match = true
                for k in 0..<n where payload[i + k] != key[k] {
                    match = false
                    break
                }
                if match {
                    let start = i + n
                    var end = start
                    while end < payload.count && payload[end] != UInt8(ascii: "\"") && payload[end] != UInt8(ascii: "\\") {
                        end += 1
                    }
                    guard end < payload.count, payload[end] == UInt8(ascii: "\"") else { return nil }
                    return String(decoding: payload[start..<end], as: UTF8.self)
                }
                i += 1
            }
            return nil
        }
    }
}
