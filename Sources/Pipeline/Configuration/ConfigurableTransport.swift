import Sender

/// A transport kind as the pipeline file configures it, asked of its configuration type as its
/// capabilities are (``PipelineConfiguration/Transport/configurationType``): the keys an app entry of the
/// kind uses, the trust roots of its gateways, and its configuration built from the app's entry and the
/// file's section of the kind (`http2`, `gateway`). The pipeline asks these instead of switching on the
/// kind: a new kind conforms here and is listed in ``PipelineConfiguration/Transport``.
protocol ConfigurableTransport: TransportConfiguration {
    /// The app entry's key for how many connections it opens (`shards`, `connections`).
    static var connectionsKey: String { get }
    /// The app entry's key for the addresses it connects to instead of the section's (`gateways`, `hosts`).
    static var addressesKey: String { get }
    /// PEM roots the gateways' certificates must chain to (the section's `ca`); nil: the system's.
    static func trustRoots(in configuration: PipelineConfiguration) -> String?
    /// `app`'s transport configuration, from its entry and the file's section of the kind. Throws when
    /// its credentials cannot be read (a provider token's key).
    static func make(for app: PipelineConfiguration.App, in configuration: PipelineConfiguration) throws -> Self
}

extension BinaryTransportConfiguration: ConfigurableTransport {
    static var connectionsKey: String { "shards" }
    static var addressesKey: String { "gateways" }
    static func trustRoots(in configuration: PipelineConfiguration) -> String? { configuration.gateway.ca }

    /// The app's certificate, gateways and shards (else the `gateway` section's), every shard built as the
    /// `gateway` section says.
    static func make(for app: PipelineConfiguration.App, in configuration: PipelineConfiguration) throws -> Self {
        let gateway = configuration.gateway
        return BinaryTransportConfiguration(
            credentials: configuration.credentials(for: app)!, gateways: app.gateways ?? gateway.addresses,
            shards: app.shards ?? gateway.shards, shard: gateway.shard, serverHostname: gateway.serverHostname)
    }
}

extension HTTP2TransportConfiguration: ConfigurableTransport {
    static var connectionsKey: String { "connections" }
    static var addressesKey: String { "hosts" }
    static func trustRoots(in configuration: PipelineConfiguration) -> String? { configuration.http2.ca }

    /// The app's certificate or provider token, hosts (else the `http2` section's, else Apple's of the
    /// app's environment) and connections, with the `http2` section's tunables and proxy.
    static func make(for app: PipelineConfiguration.App, in configuration: PipelineConfiguration) throws -> Self {
        let http2 = configuration.http2
        let authentication: HTTP2Authentication
        switch app.authentication {
        case .certificate:
            authentication = .certificate(configuration.credentials(for: app)!)
        case .token(let keyFile, let keyID, let teamID):
            authentication = try .token(keyFile: keyFile, keyID: keyID, teamID: teamID, trustRootsPath: http2.ca)
        }
        var t = HTTP2TransportConfiguration(
            app: app.bundleID, authentication: authentication,
            hosts: app.gateways ?? http2.hosts ?? PipelineConfiguration.HTTP2.appleHosts(app.environment))
        t.connections = app.shards ?? http2.connections
        t.streamCap = http2.streamCap
        t.batchBytes = http2.batchBytes
        t.linger = http2.linger
        t.queueCapacity = http2.queueCapacity
        t.requestTimeout = http2.requestTimeout
        t.pingInterval = http2.pingInterval
        t.giveUpAfter = http2.giveUpAfter
        t.retry = http2.retry
        t.reconnect = http2.reconnect
        t.serverHostname = http2.serverHostname
        t.proxy = http2.proxy
        return t
    }
}
