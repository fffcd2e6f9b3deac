import Logging

/// A log handler that never writes a secret: every value substituted into the pipeline file
/// (`${NAME}`, `${file:/path}`: ``PipelineConfiguration/secrets``) is replaced by `***` in the message
/// and in every metadata value before the wrapped handler sees them. `run` installs it around its
/// stream handler, so it covers every log line of the process, librdkafka's (forwarded to swift-log) included.
///
/// Values shorter than ``minimumLength`` are not redacted: replacing every "1" or "on" in every line
/// would garble the logs and protect nothing (such a value is no secret).
public struct RedactingLogHandler: LogHandler {
    public static let minimumLength = 4
    public static let mask = "***"

    private var inner: any LogHandler
    /// Longest first, so a secret containing another is masked whole.
    private let secrets: [String]

    public init(_ inner: any LogHandler, secrets: [String]) {
        self.inner = inner
        self.secrets = Set(secrets.filter { $0.count >= Self.minimumLength }).sorted { $0.count > $1.count }
    }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue.mapValues(redact) }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue.map(redact) }
    }

    public func log(event: LogEvent) {
        guard !secrets.isEmpty else { return inner.log(event: event) }
        var event = event
        event.message = Logger.Message(stringLiteral: redact(event.message.description))
        event.metadata = event.metadata?.mapValues(redact)
        // Metadata from the provider (task-local context) is added by the inner handler: redact it here.
        if let provider = inner.metadataProvider {
            let provided = provider.get()
            if !provided.isEmpty {
                var merged = provided.mapValues(redact)
                for (k, v) in event.metadata ?? [:] { merged[k] = v }
                event.metadata = merged
            }
        }
        inner.log(event: event)
    }

    /// `text` with every secret replaced by `***`.
    public func redact(_ text: String) -> String {
        var out = text
        for secret in secrets where out.contains(secret) { out = out.replacingOccurrences(of: secret, with: Self.mask) }
        return out
    }

    func redact(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let s): return .string(redact(s))
        case .stringConvertible(let c):
            let s = c.description
            let r = redact(s)
            return r == s ? value : .string(r)
        case .array(let a): return .array(a.map(redact))
        case .dictionary(let d): return .dictionary(d.mapValues(redact))
        }
    }
}

extension PipelineConfiguration.Kafka {
    /// librdkafka properties whose value is a secret by their name (`sasl.password`, `ssl.key.password`,
    /// `ssl.key.pem`, `sasl.oauthbearer.client.secret`…): never logged or printed in clear.
    public static func isSensitive(property name: String) -> Bool {
        let n = name.lowercased()
        return ["password", "secret", "key", "token", "credential", "sasl.oauthbearer.config", "sasl.jaas"].contains { n.contains($0) }
    }

    /// `properties` fit for a log line: sensitive values replaced by `***`.
    public var redactedProperties: [String: String] {
        Dictionary(
            uniqueKeysWithValues: properties.map { ($0.key, Self.isSensitive(property: $0.key) ? RedactingLogHandler.mask : $0.value) })
    }
}
