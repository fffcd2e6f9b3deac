import Logging
import Synchronization

/// Log lines as `message key=value…` (metadata sorted), for checking what reached a log (a secret must not).
public final class CapturedLog: Sendable {
    private let stored = Mutex<[String]>([])

    public init() {}

    public var lines: [String] { stored.withLock { $0 } }
    public func append(_ line: String) { stored.withLock { $0.append(line) } }
}

/// Renders every event into a ``CapturedLog``.
public struct CapturingLogHandler: LogHandler {
    public let log: CapturedLog
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level = .trace

    public init(_ log: CapturedLog) { self.log = log }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        log.append("\(event.message) " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
    }
}
