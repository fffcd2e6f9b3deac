import Crypto
import NIOCore

/// One reply from Redis, as the RESP2 protocol types it.
///
/// Error replies are values here, not thrown errors: inside a pipeline one failing command must not hide
/// the replies of the others. The single-command and script entry points of ``RedisClient`` turn a
/// top-level error reply into ``RedisError/server(_:)``.
public enum RedisReply: Sendable, Hashable {
    case status(String)
    case error(String)
    case integer(Int64)
    /// A bulk string: raw bytes, binary-safe.
    case bulk([UInt8])
    /// The nil bulk string or nil array (a missing key or field, Lua `false`).
    case null
    case array([RedisReply])

    public var integer: Int64? {
        if case .integer(let value) = self { return value }
        if case .bulk(let bytes) = self { return Int64(String(decoding: bytes, as: UTF8.self)) }
        return nil
    }

    /// The text of a bulk or status reply (UTF-8 decoded).
    public var string: String? {
        switch self {
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .status(let text): return text
        default: return nil
        }
    }

    public var array: [RedisReply]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    public var isNull: Bool { self == .null }
}

/// Why a Redis call failed.
public enum RedisError: Error, Sendable, Hashable {
    /// The configuration URL could not be understood.
    case invalidURL(String)
    /// Connecting, writing or reading failed (server gone, refused, timed out). Calls retry these
    /// internally with back-off; callers see it only from ``RedisClient/connect()``.
    case connection(String)
    /// The server answered with an error reply (`ERR …`, `WRONGTYPE …`, a Lua error).
    case server(String)
    /// AUTH or SELECT was refused: a configuration problem, never retried.
    case authentication(String)
    /// The reply had a shape the caller did not expect (a bug or a version mismatch).
    case unexpectedReply(String)
    /// The server stayed unreachable for longer than ``RedisReconnectPolicy/maximumWait``.
    case unavailable(waited: Duration, lastError: String)
    /// TLS could not be set up: a certificate file that does not load, or a server certificate that does
    /// not verify (wrong CA, wrong name). A configuration problem, never retried; the message says what
    /// to check.
    case tls(String)

    /// Whether waiting and trying again can help: the connection broke, or the server is still loading
    /// its dataset after a restart.
    var isTransient: Bool {
        switch self {
        case .connection: return true
        case .server(let message): return message.hasPrefix("LOADING") || message.hasPrefix("MASTERDOWN")
        default: return false
        }
    }
}

/// A flat, binary-safe argument list. Stored as one byte buffer plus lengths, so a script call with
/// thousands of arguments (one batch) is two allocations, not thousands.
public struct RedisArguments: Sendable, Hashable {
    @usableFromInline var bytes: [UInt8] = []
    @usableFromInline var lengths: [Int] = []

    public init() {}

    public init(_ strings: [String]) {
        for string in strings { append(string) }
    }

    public var count: Int { lengths.count }

    /// Room for `count` more arguments of `bytes` bytes in all.
    public mutating func reserveCapacity(adding count: Int, bytes byteCount: Int) {
        bytes.reserveCapacity(bytes.count + byteCount)
        lengths.reserveCapacity(lengths.count + count)
    }

    /// Bytes of all the arguments together.
    public var byteCount: Int { bytes.count }

    @inlinable
    public mutating func append(_ string: String) {
        var string = string
        string.withUTF8 { bytes.append(contentsOf: $0) }
        lengths.append(string.utf8.count)
    }

    /// The decimal text of `value`, written straight into the buffer (no String per argument: the
    /// gate and settle send several integers per job). The digits are made in a stack buffer and
    /// appended at once: an append per digit checked the array's capacity and uniqueness each time.
    /// Inlinable, as the appends below: the stores call them per job from another module, where an
    /// opaque generic call converted each integer through witness tables (`perf`).
    @inlinable
    public mutating func append(_ value: some BinaryInteger) {
        guard let value = Int64(exactly: value) else { return append(String(value)) }
        Self.withDecimal(value) { digits in
            bytes.append(contentsOf: digits)
            lengths.append(digits.count)
        }
    }

    /// Calls `body` with the decimal text of `value`, made in a stack buffer: one writer of numbers for
    /// the arguments and the RESP headers (``withRESP(_:)``).
    @inlinable
    static func withDecimal<R>(_ value: Int64, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var text: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: a sign and up to 19 digits
        return try withUnsafeMutableBytes(of: &text) { buffer in
            var at = buffer.count
            var magnitude = value.magnitude
            repeat {
                at -= 1
                buffer[at] = UInt8(truncatingIfNeeded: magnitude % 10) &+ UInt8(ascii: "0")
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                at -= 1
                buffer[at] = UInt8(ascii: "-")
            }
            return try body(UnsafeRawBufferPointer(rebasing: buffer[at...]))
        }
    }

    /// `string` with ASCII upper-case letters lowered (token hex), without an intermediate String:
    /// copied at once, then lowered in place.
    @inlinable
    public mutating func append(lowercasingASCII string: String) {
        let start = bytes.count
        var string = string
        string.withUTF8 { bytes.append(contentsOf: $0) }
        bytes.withUnsafeMutableBufferPointer { buffer in
            for i in start..<buffer.count where buffer[i] &- UInt8(ascii: "A") < 26 { buffer[i] |= 0x20 }
        }
        lengths.append(bytes.count - start)
    }

    @inlinable
    public mutating func append(bytes value: some Collection<UInt8>) {
        bytes.append(contentsOf: value)
        lengths.append(value.count)
    }

    public mutating func append(contentsOf other: RedisArguments) {
        bytes.append(contentsOf: other.bytes)
        lengths.append(contentsOf: other.lengths)
    }

    /// The arguments one by one (for tests and debugging).
    public var elements: [[UInt8]] {
        var result: [[UInt8]] = []
        var offset = 0
        for length in lengths {
            result.append(Array(bytes[offset..<offset + length]))
            offset += length
        }
        return result
    }

    /// Calls `body` with the arguments as one RESP command (`*<n>` then `$<length>` and the bytes of each).
    /// For tests; the client writes the same bytes straight into its channel's buffer (``writeRESP(into:)``).
    func withRESP<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withUnsafeTemporaryAllocation(byteCount: respCapacity, alignment: 1) { out in
            let written = formatRESP(into: out)
            return try body(UnsafeRawBufferPointer(rebasing: out[..<written]))
        }
    }

    /// Appends the arguments as one RESP command to `buffer`, in one pass and with no allocation of its
    /// own (the buffer grows at most once): hiredis's `redisFormatCommandArgv` printf-formats every
    /// argument's header into a fresh buffer (~1 % of `run` with a script call's thousands of arguments),
    /// and its output would then be copied into the channel's buffer again.
    func writeRESP(into buffer: inout ByteBuffer) {
        let capacity = respCapacity
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: capacity) { out in
            formatRESP(into: UnsafeMutableRawBufferPointer(rebasing: out[..<capacity]))
        }
    }

    /// An upper bound of the RESP size: `$`, up to 20 digits and CRLF before each argument, CRLF after;
    /// the same for the count.
    var respCapacity: Int { bytes.count + (lengths.count + 1) * 25 }

    /// Writes the RESP command into `out` (at least ``respCapacity`` bytes); returns the bytes written.
    private func formatRESP(into out: UnsafeMutableRawBufferPointer) -> Int {
        var at = 0
        func header(_ marker: UInt8, _ value: Int) {
            out[at] = marker
            at += 1
            Self.withDecimal(Int64(value)) { digits in
                UnsafeMutableRawBufferPointer(rebasing: out[at..<at + digits.count]).copyMemory(from: digits)
                at += digits.count
            }
            out[at] = UInt8(ascii: "\r")
            out[at + 1] = UInt8(ascii: "\n")
            at += 2
        }
        header(UInt8(ascii: "*"), lengths.count)
        bytes.withUnsafeBytes { source in
            var offset = 0
            for length in lengths {
                header(UInt8(ascii: "$"), length)
                if length > 0 {
                    UnsafeMutableRawBufferPointer(rebasing: out[at..<at + length])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: source[offset..<offset + length]))
                }
                at += length
                offset += length
                out[at] = UInt8(ascii: "\r")
                out[at + 1] = UInt8(ascii: "\n")
                at += 2
            }
        }
        return at
    }
}

/// One command: its name and arguments, e.g. `RedisCommand("HINCRBY", "apns:stats", "accepted", "1")`.
public struct RedisCommand: Sendable, Hashable {
    public var arguments: RedisArguments

    public init(_ name: String, _ arguments: String...) {
        self.arguments = RedisArguments([name] + arguments)
    }

    public init(_ name: String, arguments: RedisArguments) {
        var all = RedisArguments([name])
        all.append(contentsOf: arguments)
        self.arguments = all
    }

    /// `EVALSHA sha numkeys key… arg…`, written once into one buffer (a gate call is ~100 KB: building
    /// it from lists and copying it into the command again was a good part of its cost in Swift).
    public init(evalsha script: RedisScript, keys: RedisArguments, arguments: RedisArguments) {
        var all = RedisArguments()
        all.reserveCapacity(adding: 3 + keys.count + arguments.count, bytes: 64 + keys.byteCount + arguments.byteCount)
        all.append("EVALSHA")
        all.append(script.sha1)
        all.append(keys.count)
        all.append(contentsOf: keys)
        all.append(contentsOf: arguments)
        self.arguments = all
    }

    /// The command name, for logs. Arguments are never logged: they may hold a password (AUTH).
    public var name: String {
        arguments.elements.first.map { String(decoding: $0, as: UTF8.self) } ?? ""
    }
}

/// A Lua script, called by its SHA-1 (`EVALSHA`) so a batch sends the digest, not the source.
public struct RedisScript: Sendable, Hashable {
    public let source: String
    /// Lower-case hex SHA-1 of the source: what `SCRIPT LOAD` returns and `EVALSHA` expects.
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        // Known up front, so the first call after a server restart recovers in one round trip
        // (`SCRIPT LOAD` + `EVALSHA` pipelined) instead of asking the server for the digest first.
        self.sha1 = Insecure.SHA1.hash(data: Array(source.utf8)).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}
