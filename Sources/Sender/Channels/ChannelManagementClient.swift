import APNsProtocol
import APNsTransport
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS
import Synchronization
import TimeUnits

/// Where and as whom channel management requests go: an app (bundle id), an environment, Apple's
/// channel-management host for it (or the host a pipeline file names instead: a simulator), the
/// app's provider token and TLS trust. Token authentication only: the `.p8` key an app's pipeline
/// entry names, signed by the same `ProviderTokenCache` the sender uses.
public struct ChannelManagementConfiguration: Sendable {
    public enum Environment: String, Sendable, CaseIterable {
        case sandbox, production
    }

    public var app: String
    public var environment: Environment
    public var host: GatewayAddress
    /// Name checked against the server's certificate (and sent as `:authority`); nil: the host's.
    public var serverHostname: String?
    public var tokens: ProviderTokenCache
    /// PEM roots the server's certificate must chain to; nil: the system's (Apple's hosts).
    public var trustRootsPath: String?
    public var connectTimeout = Duration.seconds(10)
    /// From the start of the connect to the answer.
    public var requestTimeout = Duration.seconds(20)
    public var resolver: any HostResolver = SystemHostResolver()
    /// The HTTPS proxy (HTTP CONNECT) the host is reached through; nil: directly.
    public var proxy: HTTPSProxy?

    public init(app: String, environment: Environment, host: GatewayAddress, tokens: ProviderTokenCache) {
        self.app = app
        self.environment = environment
        self.host = host
        self.tokens = tokens
    }

    /// Apple's channel-management host of an environment (`APNsChannelManagement`: sandbox on 2195,
    /// production on 2196).
    public static func appleHost(_ environment: Environment) -> GatewayAddress {
        switch environment {
        case .sandbox: GatewayAddress(host: APNsChannelManagement.sandboxHost, port: APNsChannelManagement.sandboxPort)
        case .production: GatewayAddress(host: APNsChannelManagement.productionHost, port: APNsChannelManagement.productionPort)
        }
    }
}

/// One channel management request (Apple, "Sending channel management requests to APNs").
public enum ChannelOperation: Sendable, Equatable {
    case create(APNsChannelStoragePolicy)
    case get(channelID: String)
    case list
    case delete(channelID: String)

    public var name: String {
        switch self {
        case .create: "create"
        case .get: "get"
        case .list: "list"
        case .delete: "delete"
        }
    }

    public var method: String {
        switch self {
        case .create: "POST"
        case .get, .list: "GET"
        case .delete: "DELETE"
        }
    }

    public func path(app: String) -> String {
        switch self {
        case .list: APNsChannelManagement.allChannelsPath(bundleID: app)
        case .create, .get, .delete: APNsChannelManagement.channelsPath(bundleID: app)
        }
    }

    public var channelID: String? {
        switch self {
        case .get(let id), .delete(let id): id
        case .create, .list: nil
        }
    }

    /// The create body: `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`.
    public var body: [UInt8] {
        guard case .create(let policy) = self else { return [] }
        let value: JSONValue = [
            "message-storage-policy": .integer(policy.rawValue), "push-type": .string(APNsChannelManagement.pushType),
        ]
        return value.serialized()
    }
}

/// An answer as it came back: status, the headers that matter, the body.
public struct ChannelAnswer: Sendable, Equatable {
    public var status: Int
    public var channelID: String?
    public var requestID: String?
    public var body: [UInt8]

    public init(status: Int, channelID: String? = nil, requestID: String? = nil, body: [UInt8] = []) {
        self.status = status
        self.channelID = channelID
        self.requestID = requestID
        self.body = body
    }
}

/// What a successful request established.
public enum ChannelResult: Sendable, Equatable {
    case created(channelID: String, policy: APNsChannelStoragePolicy)
    /// `policy` nil: the answer named a value this code does not know (kept in `policyValue`).
    case channel(channelID: String, policy: APNsChannelStoragePolicy?, policyValue: Int?, pushType: String?)
    case list(channelIDs: [String])
    case deleted(channelID: String)
}

/// Why a request did not succeed, with what to do next (the command prints `description`).
public struct ChannelManagementError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Error, Sendable, Equatable {
        /// APNs answered with an error status (and, usually, a reason).
        case refused(status: Int, reason: String?)
        /// No answer: resolve, connect, TLS, HTTP/2, or the deadline.
        case unreachable(String)
        /// A success status whose content this code cannot use.
        case badAnswer(String)
    }

    public var kind: Kind
    public var operation: ChannelOperation
    public var app: String
    public var environment: ChannelManagementConfiguration.Environment
    public var host: GatewayAddress
    public var keyID: String
    public var requestID: String?

    public init(
        kind: Kind, operation: ChannelOperation, app: String, environment: ChannelManagementConfiguration.Environment,
        host: GatewayAddress, keyID: String, requestID: String?
    ) {
        self.kind = kind
        self.operation = operation
        self.app = app
        self.environment = environment
        self.host = host
        self.keyID = keyID
        self.requestID = requestID
    }

    public var reason: String? {
        if case .refused(_, let reason) = kind { return reason }
        return nil
    }

    public var status: Int? {
        if case .refused(let status, _) = kind { return status }
        return nil
    }

    /// What happened and what to do about it, in one paragraph.
    public var description: String {
        let other: ChannelManagementConfiguration.Environment = environment == .sandbox ? .production : .sandbox
        let channel = operation.channelID ?? "?"
        switch kind {
        case .unreachable(let what):
            return "channel \(operation.name): no answer from \(host) (\(what)). Check the network path to that host "
                + "(Apple's channel management listens on port \(APNsChannelManagement.sandboxPort) for sandbox and "
                + "\(APNsChannelManagement.productionPort) for production, not 443: a firewall that only opens 443 blocks it), "
                + "and the pipeline file's http2.ca / server_hostname when it points at a simulator."
        case .badAnswer(let what):
            return "channel \(operation.name): \(host) answered, but \(what); nothing was changed on our side. "
                + "Run `apns-pipeline channel list` to see the app's channels."
        case .refused(let status, let reason):
            let head =
                "channel \(operation.name) for \(app) in \(environment.rawValue): APNs refused it (\(status) \(reason ?? "no reason"))"
            switch reason.flatMap(APNsChannelReason.init(rawValue:)) {
            case .cannotCreateChannelConfig:
                return head + ": the app has reached Apple's channel limit (up to 10,000 channels per app in each "
                    + "environment). "
                    + "Delete the channels of events that are over: `apns-pipeline channel list`, then "
                    + "`apns-pipeline channel delete --channel ID`."
            case .channelNotRegistered:
                return head + ": there is no channel \(channel) for this app in \(environment.rawValue). Channels belong "
                    + "to one environment; if it was made in \(other.rawValue), run with --environment \(other.rawValue). "
                    + "`apns-pipeline channel list` shows the channels that exist."
            case .badChannelId, .missingChannelId:
                return head + ": \(channel) is not a channel id as APNs issues them (base64 text, as `channel create` "
                    + "prints it). Copy it again from `apns-pipeline channel list`."
            case .featureNotEnabled:
                return head + ": the Broadcast Capability is not enabled for \(app). Enable it for the app id in the "
                    + "Apple Developer account (Certificates, Identifiers & Profiles), then try again."
            case .missingPushType, .badRequestParams, .badRequestPayload:
                return head
                    + ": APNs did not take the create request's body; this is a bug in apns-pipeline, please report it with the request id."
            case nil:
                break
            }
            switch reason.flatMap(APNsReason.init(rawValue:)) {
            case .badEnvironmentKeyIdInToken?, .badEnvironmentKeyInToken?:
                return head + ": the signing key \(keyID) is not enabled for the \(environment.rawValue) environment. "
                    + "Run with --environment \(other.rawValue), or use a key enabled for \(environment.rawValue) "
                    + "(or for both) in the app's token section."
            case .invalidProviderToken?, .missingProviderToken?:
                return head + ": the provider token was not accepted. Check the app's token.key_id (\(keyID)) and "
                    + "token.team_id against the key in the Apple Developer account, and that the .p8 file is that key."
            case .expiredProviderToken?:
                return head + ": the provider token is too old or from the future for APNs: check this machine's clock (NTP)."
            case .invalidPushType?:
                return head
                    + ": APNs did not take the create request's body; this is a bug in apns-pipeline, please report it with the request id."
            case .topicDisallowed?, .badTopic?, .forbidden?, .topicMismatch?:
                return head + ": the key \(keyID) may not manage channels of \(app). Check the bundle id and that the key "
                    + "belongs to the app's team."
            case .badPath?, .methodNotAllowed?:
                return head + ": the host \(host) does not serve channel management at \(operation.path(app: app)). "
                    + "Use Apple's channel-management host (\(ChannelManagementConfiguration.appleHost(environment))) "
                    + "or a simulator that serves it."
            case .tooManyRequests?, .internalServerError?, .serviceUnavailable?, .shutdown?:
                return head + ": APNs is busy or unavailable; try again in a minute."
            default:
                return head + "."
            }
        }
    }

    /// The exit status the command ends with: 1 for a refusal, 2 when APNs could not be reached or
    /// answered something unusable.
    public var exitStatus: Int32 {
        if case .refused = kind { return 1 }
        return 2
    }
}

extension ChannelOperation {
    /// What an answer means for this request (pure: tested without a server). Liberal in what it
    /// accepts: a create's id from the `apns-channel-id` header (Apple) or, failing that, from a JSON
    /// body; 200 or 201 for a create, 200 or 204 for a delete.
    public func result(of answer: ChannelAnswer) -> Result<ChannelResult, ChannelManagementError.Kind> {
        let json = answer.body.isEmpty ? nil : try? JSONParser.parse(answer.body)
        guard (200..<300).contains(answer.status) else {
            let reason = try? APNsErrorBody(decoding: answer.body).reasonText
            return .failure(.refused(status: answer.status, reason: reason))
        }
        switch self {
        case .create(let policy):
            let id = answer.channelID ?? json?["apns-channel-id"]?.stringValue ?? json?["channel-id"]?.stringValue
            guard let id, !id.isEmpty else {
                return .failure(.badAnswer("its answer (\(answer.status)) carries no \(APNsChannelManagement.Header.channelID)"))
            }
            return .success(.created(channelID: id, policy: policy))
        case .get(let id):
            guard let json, json.objectValue != nil else {
                return .failure(.badAnswer("its answer (\(answer.status)) has no JSON object with the channel's settings"))
            }
            let value = json["message-storage-policy"]?.intValue
            return .success(
                .channel(
                    channelID: id, policy: value.flatMap(APNsChannelStoragePolicy.init(rawValue:)), policyValue: value,
                    pushType: json["push-type"]?.stringValue))
        case .list:
            let list = json?["channels"]?.arrayValue ?? json?.arrayValue
            guard let list else {
                return .failure(.badAnswer("its answer (\(answer.status)) has no \"channels\" list"))
            }
            return .success(.list(channelIDs: list.compactMap(\.stringValue)))
        case .delete(let id):
            return .success(.deleted(channelID: id))
        }
    }
}

/// Sends one channel management request over one HTTP/2 connection (NIO's stream multiplexer: one
/// stream, then the connection closes). The connection is opened by `APNsConnector`, as the
/// sender's are, so TLS trust, server name, timeouts (and a proxy, where one is configured) are the same.
public enum ChannelManagementClient {
    /// Performs `operation`; on success the result and the request id (APNs's echo, or ours).
    public static func perform(
        _ operation: ChannelOperation, configuration: ChannelManagementConfiguration, group: any EventLoopGroup,
        logger: Logger = Logger(label: "apns.channels")
    ) async throws -> (result: ChannelResult, requestID: String) {  // throws ChannelManagementError (untyped: see ChannelCommand)
        // Apple: apns-request-id is "a canonical UUID"; lower case as UUIDs are usually written.
        let requestID = UUID().uuidString.lowercased()
        func failure(_ kind: ChannelManagementError.Kind, _ echoed: String?) -> ChannelManagementError {
            ChannelManagementError(
                kind: kind, operation: operation, app: configuration.app, environment: configuration.environment,
                host: configuration.host, keyID: configuration.tokens.keyID, requestID: echoed ?? requestID)
        }
        var logger = logger
        logger[metadataKey: "app"] = "\(configuration.app)"
        logger[metadataKey: "environment"] = "\(configuration.environment.rawValue)"
        logger[metadataKey: "host"] = "\(configuration.host)"
        logger[metadataKey: "operation"] = "\(operation.name)"
        logger[metadataKey: "apns_request_id"] = "\(requestID)"

        let answer: ChannelAnswer
        do {
            answer = try await send(operation, requestID: requestID, configuration: configuration, group: group)
        } catch let error as ChannelManagementError {
            throw error
        } catch {
            // Debug only: the thrown error carries the same words, and the command prints it.
            logger.debug("channel management request failed", metadata: ["error": "\(error)"])
            throw failure(.unreachable("\(error)"), nil)
        }
        logger.debug("channel management answer", metadata: ["status": "\(answer.status)"])
        switch operation.result(of: answer) {
        case .success(let result): return (result, answer.requestID ?? requestID)
        case .failure(let kind): throw failure(kind, answer.requestID)
        }
    }

    struct Timeout: Error, CustomStringConvertible {
        var after: Duration
        var description: String { "no answer within \(after.seconds) s" }
    }

    struct NotHTTP2: Error, CustomStringConvertible {
        var negotiated: String?
        var description: String { "the server did not negotiate HTTP/2 (ALPN: \(negotiated ?? "none"))" }
    }

    /// Connect, one stream, the answer, close.
    static func send(
        _ operation: ChannelOperation, requestID: String, configuration c: ChannelManagementConfiguration, group: any EventLoopGroup
    ) async throws -> ChannelAnswer {
        // The provider token and TLS context exactly as an HTTP/2 app's connections make them.
        let authentication = HTTP2Authentication.token(c.tokens, trustRootsPath: c.trustRootsPath)
        let sslContext = try authentication.makeClientContext()
        let bearer = "bearer " + (try c.tokens.current().value)
        let connector = APNsConnector(
            sslContext: sslContext, connectTimeout: TimeAmount(c.connectTimeout), resolver: c.resolver, proxy: c.proxy)
        let eventLoop = group.next()
        let authority = c.serverHostname ?? c.host.host
        let observer = ConnectionObserver()
        let channel = try await connector.connect(
            to: c.host, serverHostname: authority, on: eventLoop,
            choose: { HTTP2Connection.address(among: $0, slot: 0, failures: 0) },
            handlers: { channel in
                let sync = channel.pipeline.syncOperations
                try sync.addHandler(observer)
                let multiplexer = try sync.configureHTTP2Pipeline(
                    mode: .client, connectionConfiguration: .init(), streamConfiguration: .init()
                ) { $0.eventLoop.makeSucceededVoidFuture() }
                observer.multiplexer = multiplexer
            }
        ).get()
        defer { channel.close(promise: nil) }

        let promise = eventLoop.makePromise(of: ChannelAnswer.self)
        let deadline = eventLoop.scheduleTask(in: TimeAmount(c.requestTimeout)) {
            promise.fail(Timeout(after: c.requestTimeout))
        }
        defer { deadline.cancel() }
        // A connection that closes before the answer fails the request rather than leaving it waiting,
        // with the reason when one is known (TLS refused, no h2).
        channel.closeFuture.whenComplete { _ in promise.fail(observer.reason(orElse: ChannelError.ioOnClosedChannel)) }
        do {
            guard let multiplexer = observer.multiplexer else { throw ChannelError.inappropriateOperationForState }
            let stream = try await multiplexer.createStreamChannel { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandler(AnswerCollector(promise: promise, observer: observer))
                }
            }.get()
            var head = HPACKHeaders([
                (":method", operation.method), (":scheme", "https"), (":path", operation.path(app: c.app)), (":authority", authority),
            ])
            // The bearer token changes hourly: not worth HPACK's table.
            head.add(name: APNsHeader.authorization, value: bearer, indexing: .nonIndexable)
            head.add(name: APNsChannelManagement.Header.requestID, value: requestID)
            if let id = operation.channelID { head.add(name: APNsChannelManagement.Header.channelID, value: id) }
            let body = operation.body
            if !body.isEmpty { head.add(name: "content-type", value: "application/json") }
            let headers = HTTP2Frame.FramePayload.headers(.init(headers: head, endStream: body.isEmpty))
            if body.isEmpty {
                try await stream.writeAndFlush(headers)
            } else {
                stream.write(headers, promise: nil)
                var buffer = stream.allocator.buffer(capacity: body.count)
                buffer.writeBytes(body)
                try await stream.writeAndFlush(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(buffer), endStream: true)))
            }
        } catch {
            promise.fail(observer.reason(orElse: error))
        }
        return try await promise.futureResult.get()
    }
}

/// The connection's stream multiplexer, and what the connection itself says: the protocol TLS
/// negotiated (ALPN; a server that does not speak h2 is closed at once and named as such) and the
/// first error (a TLS failure: untrusted certificate, wrong name).
private final class ConnectionObserver: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny
    private struct State {
        var handshakeDone = false
        var negotiated: String?
        var error: (any Error)?
        var multiplexer: NIOHTTP2Handler.StreamMultiplexer?
    }
    private let state = Mutex(State())

    /// The connection's stream multiplexer (set by the channel initializer).
    var multiplexer: NIOHTTP2Handler.StreamMultiplexer? {
        get { state.withLock { $0.multiplexer } }
        set { state.withLock { $0.multiplexer = newValue } }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted(let proto) = tls {
            state.withLock {
                $0.handshakeDone = true
                $0.negotiated = proto
            }
            if proto != "h2" {
                context.close(promise: nil)
                return
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        state.withLock { if $0.error == nil { $0.error = error } }
        context.fireErrorCaught(error)
    }

    /// Why the request failed, as well as the connection knows: its own error (TLS) or protocol
    /// before `fallback` (a closed stream, a failed write: what the connection's failure looks like
    /// from a stream).
    func reason(orElse fallback: any Error) -> any Error {
        state.withLock { s -> any Error in
            if let e = s.error { return e }
            if s.handshakeDone, s.negotiated != "h2" { return ChannelManagementClient.NotHTTP2(negotiated: s.negotiated) }
            return fallback
        }
    }
}

/// Collects one stream's answer: `:status`, `apns-channel-id`, `apns-request-id`, the body.
private final class AnswerCollector: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    private let promise: EventLoopPromise<ChannelAnswer>
    private let observer: ConnectionObserver
    private var answer = ChannelAnswer(status: 0)
    /// Bodies of these answers are small; more than this is not an answer of this API.
    private static let bodyLimit = 4 << 20

    init(promise: EventLoopPromise<ChannelAnswer>, observer: ConnectionObserver) {
        self.promise = promise
        self.observer = observer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let h):
            for (name, value, _) in h.headers {
                switch name {
                case ":status": answer.status = Int(value) ?? 0
                case APNsChannelManagement.Header.channelID: answer.channelID = value
                case APNsChannelManagement.Header.requestID: answer.requestID = value
                default: break
                }
            }
            if h.endStream { promise.succeed(answer) }
        case .data(let d):
            if case .byteBuffer(let bytes) = d.data, answer.body.count + bytes.readableBytes <= Self.bodyLimit {
                answer.body.append(contentsOf: bytes.readableBytesView)
            }
            if d.endStream { promise.succeed(answer) }
        case .rstStream(let code):
            promise.fail(StreamReset(code: code))
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(observer.reason(orElse: ChannelError.ioOnClosedChannel))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(observer.reason(orElse: error))
    }

    struct StreamReset: Error, CustomStringConvertible {
        var code: HTTP2ErrorCode
        var description: String { "the server reset the stream (\(code))" }
    }
}
