import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// One HTTP/1.1 server (SwiftNIO) for the operations surface: `/metrics` (Prometheus text), `/healthz`,
/// `/readyz`, the dashboard page (`/`, with `/dashboard.js` and `/dashboard.css`) and its data
/// (`/api/dashboard`). Each route is optional, so `run` serves all of them and `dashboard` only the page.
/// One request per connection (`Connection: close`): scrapers and browsers cope, and the handler stays
/// free of keep-alive state.
///
/// The port may be reachable by more than the scraper, so nothing a client sends can hold the server:
/// with an ``authToken`` every path but `/healthz` and the page's static files answers 401 without
/// `Authorization: Bearer <token>`; the campaign controls answer only to a ``controlToken`` of their
/// own (the read token cannot stop a campaign), and each control action is logged at notice with its
/// peer; a connection must deliver its request within ``Limits/requestTimeout`` (one that sends
/// nothing, or trickles its head, is closed) and is closed at ``Limits/connectionTimeout`` whatever it
/// does; at most ``Limits/maxConnections`` are open, at most ``Limits/maxConnectionsPerPeer`` of them
/// from one address; beyond those a few more (``Limits/probeSlots``) are kept for the probes, answered
/// only for `/healthz` and `/readyz`, so a flood of other connections cannot fail a liveness probe;
/// a request head over ``Limits/maxHeadBytes`` is answered 400 and a body over ``Limits/maxBodyBytes``
/// 413. Each refusal is counted (``refusals``, and `onRefusal`).
///
/// A swift-service-lifecycle `Service`: bound when made (a taken port fails before anything runs),
/// `run()` serves until its task is cancelled or the graceful shutdown reaches it, then ``stop()``s. In
/// `run`'s service group it comes before the pipeline, which the group therefore stops first: the port
/// answers `/healthz`, `/readyz` and `/metrics` while the pipeline drains.
public final class OperationsServer: Service, Sendable {
    /// What the server answers with.
    public struct Routes: Sendable {
        /// The Prometheus exposition text.
        public var metrics: (@Sendable () -> [UInt8])?
        /// Problems that make the process not ready (empty: ready).
        public var readiness: (@Sendable () async -> [String])?
        /// The dashboard's data, as JSON.
        public var dashboard: (@Sendable () async -> [UInt8])?
        /// The dashboard's pause / resume / cancel buttons (`POST /api/campaigns/<id>/<action>`); served
        /// only behind the bearer token.
        public var campaignControl: CampaignControlRoute?

        public init(
            metrics: (@Sendable () -> [UInt8])? = nil, readiness: (@Sendable () async -> [String])? = nil,
            dashboard: (@Sendable () async -> [UInt8])? = nil, campaignControl: CampaignControlRoute? = nil
        ) {
            self.metrics = metrics
            self.readiness = readiness
            self.dashboard = dashboard
            self.campaignControl = campaignControl
        }
    }

    /// What one client may cost the server.
    public struct Limits: Sendable {
        /// Connections open at once (the probe slots apart); beyond it a new one gets a probe slot, or is
        /// closed as soon as it is accepted. A scraper and a few dashboards use one or two each (one
        /// request per connection).
        public var maxConnections = 64
        /// Of ``maxConnections``, how many one address may hold: one client (or a flood from one
        /// address) cannot take every slot.
        public var maxConnectionsPerPeer = 16
        /// Connections kept beyond ``maxConnections`` (and beyond a peer's share) for the probes: such a
        /// connection is answered only for `/healthz` and `/readyz` (503 otherwise), must deliver its
        /// request within ``probeRequestTimeout``, and one address holds at most ``probeSlotsPerPeer``.
        /// A kubelet's liveness and readiness probes then get through whatever else holds the port.
        public var probeSlots = 8
        public var probeSlotsPerPeer = 2
        /// A probe sends its request as soon as it connects; a connection on a probe slot that has not
        /// within this is closed, so idle connections cannot hold the probe slots either.
        public var probeRequestTimeout: Duration = .seconds(2)
        /// From accept to the end of the request: a connection that sends nothing, or trickles its head,
        /// is closed when it runs out.
        public var requestTimeout: Duration = .seconds(10)
        /// From accept to close, whatever the client does (one that never reads its answer included).
        /// Longer than the slowest answer: readiness and the dashboard give up on Redis within seconds.
        public var connectionTimeout: Duration = .seconds(30)
        /// Request line and headers, in bytes (a browser sends under 2 KiB).
        public var maxHeadBytes = 8 * 1024
        /// Request body, in bytes: no route takes one.
        public var maxBodyBytes = 1024

        public init() {}
    }

    /// Why a connection or a request was turned away.
    public enum Refusal: String, Sendable, CaseIterable {
        /// Over ``Limits/maxConnections`` with no probe slot free (closed once accepted), or a request
        /// other than a probe on a probe slot (answered 503).
        case connectionCap = "connection-cap"
        /// The same, for an address holding its ``Limits/maxConnectionsPerPeer``.
        case peerCap = "peer-cap"
        /// The request did not arrive within ``Limits/requestTimeout``, or the connection outlived
        /// ``Limits/connectionTimeout``.
        case timeout
        /// A head over ``Limits/maxHeadBytes`` or a body over ``Limits/maxBodyBytes``.
        case tooLarge = "too-large"
        /// No bearer token, or another one (a campaign control without the control token included).
        case unauthorized
    }

    /// The paths a probe slot answers.
    static let probePaths: Set<String> = ["/healthz", "/readyz"]

    struct Response: Sendable {
        var status: HTTPResponseStatus
        var contentType: String
        var body: [UInt8]
        var headers: [(String, String)] = []

        init(_ status: HTTPResponseStatus, _ contentType: String, _ body: [UInt8], headers: [(String, String)] = []) {
            self.status = status
            self.contentType = contentType
            self.body = body
            self.headers = headers
        }

        static func text(_ status: HTTPResponseStatus, _ text: String) -> Response {
            Response(status, "text/plain; charset=utf-8", Array(text.utf8))
        }
    }

    /// The address could not be bound (taken, not local, not permitted): says which address, so the
    /// caller can name the setting that chose it.
    public struct ListenError: Error, CustomStringConvertible {
        public var host: String
        public var port: Int
        public var reason: String
        public var description: String { "cannot listen on \(host):\(port): \(reason)" }
    }

    /// The page's policy: scripts, styles and fetches from this origin only, nothing inline (the page has
    /// no inline script or style: `DashboardPage`), no plugins, no framing, no form posting elsewhere.
    static let pageSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    /// Everything else is data, never a document to render.
    static let dataSecurityPolicy = "default-src 'none'; frame-ancestors 'none'"

    public let host: String
    private let routes: Routes
    /// The loops it serves on, and whether ``stop()`` shuts them down (a group of its own).
    private let group: any EventLoopGroup
    private let ownsGroup: Bool
    private let logger: Logger
    private let channel: any Channel
    private let counters: Counters
    /// The accepted connections still open, closed by ``stop()``.
    private let connections: OpenChannels

    /// Binds `host:port` (0: a free port, see ``port``) and starts serving. `authToken`: the bearer token
    /// every path but `/healthz` and the page's static files asks for (nil: open). `controlToken`: the
    /// one the campaign controls ask for (nil: they answer 403); it reads the other paths too. `onRefusal`
    /// is called for each refusal (e.g. to count it in Prometheus), on the server's event loop: it must
    /// not block. `eventLoopGroup`: the loops to serve on (`run` passes the pipeline's); nil: one loop of
    /// the server's own.
    public init(
        host: String, port: Int, routes: Routes, authToken: String? = nil, controlToken: String? = nil, limits: Limits = Limits(),
        logger: Logger, eventLoopGroup: (any EventLoopGroup)? = nil, onRefusal: (@Sendable (Refusal) -> Void)? = nil
    ) async throws {
        self.host = host
        self.routes = routes
        self.logger = logger
        let counters = Counters(onRefusal: onRefusal)
        self.counters = counters
        let connections = OpenChannels()
        self.connections = connections
        let group = eventLoopGroup ?? MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.group = group
        ownsGroup = eventLoopGroup == nil
        let handlerConfiguration = RequestHandler.Configuration(
            routes: routes, tokens: Tokens(read: authToken, control: controlToken), limits: limits, counters: counters, logger: logger)
        let decoderLimits = {
            var l = NIOHTTPDecoderLimitConfiguration()
            l.maxHeaderFieldSize = limits.maxHeadBytes
            l.maxHeaderListSize = limits.maxHeadBytes
            l.maxHeaderFieldCount = 100
            return l
        }()
        do {
            channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 64)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    let peer = channel.remoteAddress?.ipAddress ?? "?"
                    let slot: Counters.Slot
                    switch counters.admit(peer: peer, limits: limits) {
                    case .slot(let s): slot = s
                    case .refused(let refusal):
                        // Over the caps: fail the initializer, which makes NIO close the accepted socket at once.
                        counters.refused(refusal)
                        return channel.eventLoop.makeFailedFuture(ConnectionCapReached())
                    }
                    connections.opened(channel)
                    channel.closeFuture.whenComplete { _ in
                        counters.closed(peer: peer, slot: slot)
                        connections.closed(channel)
                    }
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                            withErrorHandling: true, withEncoderConfiguration: .init(), withDecoderLimitConfiguration: decoderLimits)
                        try channel.pipeline.syncOperations.addHandler(RequestHandler(handlerConfiguration, slot: slot))
                    }
                }
                .bind(host: host, port: port).get()
        } catch {
            if ownsGroup { try? await group.shutdownGracefully() }
            if let io = error as? IOError {
                throw ListenError(host: host, port: port, reason: "\(io.description)")
            }
            throw ListenError(host: host, port: port, reason: "\(error)")
        }
    }

    /// The port it listens on.
    public var port: Int { channel.localAddress?.port ?? 0 }

    /// Connections open now.
    public var openConnections: Int { counters.openCount }

    /// Refusals so far, by reason.
    public var refusals: [Refusal: Int] { counters.refusalCounts }

    /// Stops listening and closes every open connection (an answer still being made is dropped).
    public func stop() async {
        try? await channel.close()
        for open in connections.all { try? await open.close() }
        if ownsGroup { try? await group.shutdownGracefully() }
    }

    /// Serves until the task is cancelled or the graceful shutdown reaches this service, then stops.
    public func run() async {
        try? await gracefulShutdown()
        await stop()
    }

    /// Paths answered without the token: liveness, and the page with its two files (they hold no data:
    /// the page is the same for every deployment, its numbers come from `/api/dashboard`).
    static func isOpen(_ path: String) -> Bool {
        ["/healthz", "/", "/dashboard", "/dashboard.js", "/dashboard.css"].contains(path)
    }

    /// Whether `authorization` (the request's header) carries `Bearer <token>`. The comparison takes the
    /// same time whatever the bytes sent (it runs over the expected token's length and never stops at the
    /// first difference), so the answer's timing says nothing about how much of a guess was right.
    static func authorized(_ authorization: String?, token: [UInt8]) -> Bool {
        guard let authorization else { return false }
        // RFC 7235: the scheme is case-insensitive; RFC 6750: one space, then the token.
        let text = authorization.trimmingLeadingAndTrailingSpaces()
        guard text.utf8.count > 7, text.prefix(7).lowercased() == "bearer " else { return false }
        let sent = Array(text.utf8.dropFirst(7))
        var difference = UInt8(sent.count == token.count ? 0 : 1)
        for i in 0..<token.count {
            difference |= token[i] ^ (i < sent.count ? sent[i] : 0)
        }
        return difference == 0
    }

    /// The read token (`metrics.auth_token`) and the control token (`metrics.control_token`), as bytes.
    struct Tokens: Sendable {
        var read: [UInt8]?
        var control: [UInt8]?

        init(read: String?, control: String?) {
            self.read = read.map { Array($0.utf8) }
            self.control = control.map { Array($0.utf8) }
        }
    }

    /// The answer to one request. `peer` (`address:port`) is for the control log lines.
    static func respond(
        method: HTTPMethod, path: String, authorization: String?, tokens: Tokens, peer: String, routes: Routes, logger: Logger
    ) async -> Response {
        let isControl = path.hasPrefix(CampaignControlRoute.prefix)
        // POST only where something changes (the campaign buttons), GET and HEAD everywhere else.
        guard isControl ? method == .POST : (method == .GET || method == .HEAD) else {
            var response = Response.text(.methodNotAllowed, isControl ? "only POST\n" : "only GET\n")
            response.headers = [("allow", isControl ? "POST" : "GET, HEAD")]
            return response
        }
        if isControl {
            return await control(path: path, authorization: authorization, tokens: tokens, peer: peer, routes: routes, logger: logger)
        }
        // The control token reads too: whoever may stop a campaign may see it.
        if let read = tokens.read, !isOpen(path), !authorized(authorization, token: read),
            !(tokens.control.map { authorized(authorization, token: $0) } ?? false)
        {
            return unauthorized(authorization, key: "metrics.auth_token")
        }
        switch path {
        case "/healthz":
            // Alive: the event loop answered. Nothing else is checked (a liveness probe that fails on a
            // dependency restarts a process that would recover by itself).
            return .text(.ok, "ok\n")
        case "/readyz":
            guard let readiness = routes.readiness else { return .text(.notFound, "no readiness here\n") }
            let problems = await readiness()
            if problems.isEmpty { return .text(.ok, "ready\n") }
            return .text(.serviceUnavailable, "not ready\n" + problems.map { "- \($0)\n" }.joined())
        case "/metrics":
            guard let metrics = routes.metrics else { return .text(.notFound, "no metrics here\n") }
            return Response(.ok, "text/plain; version=0.0.4; charset=utf-8", metrics())
        case "/", "/dashboard":
            guard routes.dashboard != nil else { return .text(.notFound, "no dashboard here\n") }
            return Response(
                .ok, "text/html; charset=utf-8", Array(DashboardPage.html.utf8),
                headers: [("content-security-policy", pageSecurityPolicy), ("x-frame-options", "DENY")])
        case "/dashboard.js":
            guard routes.dashboard != nil else { return .text(.notFound, "no dashboard here\n") }
            return Response(.ok, "text/javascript; charset=utf-8", Array(DashboardPage.script.utf8))
        case "/dashboard.css":
            guard routes.dashboard != nil else { return .text(.notFound, "no dashboard here\n") }
            return Response(.ok, "text/css; charset=utf-8", Array(DashboardPage.css.utf8))
        case "/api/dashboard":
            guard let dashboard = routes.dashboard else { return .text(.notFound, "no dashboard here\n") }
            return Response(.ok, "application/json", await dashboard())
        default:
            return .text(.notFound, "not found: try /metrics, /healthz, /readyz, /\n")
        }
    }

    /// `POST /api/campaigns/<id>/<action>`: only with the control token, and every attempt with a
    /// well-formed path is logged at notice (who, what, which campaign), refused or done.
    static func control(
        path: String, authorization: String?, tokens: Tokens, peer: String, routes: Routes, logger: Logger
    ) async -> Response {
        guard let route = routes.campaignControl else { return .text(.notFound, "no campaign control here\n") }
        guard let controlToken = tokens.control else {
            return .text(
                .forbidden,
                "campaign control needs metrics.control_token in the pipeline file (a token of its own: the buttons stop campaigns)\n")
        }
        let parsed = CampaignControlRoute.parse(path)
        guard authorized(authorization, token: controlToken) else {
            if case .success(let (campaign, action)) = parsed {
                logger.notice(
                    "campaign control refused: no valid control token",
                    metadata: ["peer": "\(peer)", "action": "\(action.rawValue)", "campaign": "\(campaign)"])
            }
            return unauthorized(authorization, key: "metrics.control_token")
        }
        switch parsed {
        case .failure(let bad): return .text(.badRequest, bad.problem + "\n")
        case .success(let (campaign, action)): return await route.perform(campaign: campaign, action: action, peer: peer, logger: logger)
        }
    }

    /// 401 with the RFC 6750 challenge (`invalid_token` when a token was sent and is not the one asked for).
    static func unauthorized(_ authorization: String?, key: String) -> Response {
        let challenge =
            authorization == nil ? #"Bearer realm="apns-pipeline""# : #"Bearer realm="apns-pipeline", error="invalid_token""#
        var response = Response.text(.unauthorized, "unauthorized: send Authorization: Bearer <\(key)>\n")
        response.headers = [("www-authenticate", challenge)]
        return response
    }

    /// `address:port` of a peer (`[address]:port` for IPv6), for log lines.
    static func describe(_ address: SocketAddress?) -> String {
        guard let address, let ip = address.ipAddress else { return "?" }
        let port = address.port.map { ":\($0)" } ?? ""
        return ip.contains(":") ? "[\(ip)]\(port)" : ip + port
    }
}

struct ConnectionCapReached: Error {}

/// The server's accepted connections that are still open.
final class OpenChannels: Sendable {
    private let open = Mutex<[ObjectIdentifier: any Channel]>([:])

    func opened(_ channel: any Channel) { open.withLock { $0[ObjectIdentifier(channel)] = channel } }
    func closed(_ channel: any Channel) { open.withLock { $0[ObjectIdentifier(channel)] = nil } }
    var all: [any Channel] { open.withLock { Array($0.values) } }
}

/// Open connections (by slot and by peer) and refusals, shared by the server's connections.
final class Counters: Sendable {
    /// What an accepted connection holds.
    enum Slot: Sendable, Equatable {
        case general
        /// A probe slot: answered for `/healthz` and `/readyz` only; another request is refused as
        /// `refusal` (the cap that sent it here).
        case probe(OperationsServer.Refusal)
    }

    /// A slot, or the cap that refused the connection.
    enum Admission: Sendable {
        case slot(Slot)
        case refused(OperationsServer.Refusal)
    }

    private struct PeerCount {
        var general = 0
        var probe = 0
    }
    private struct Open {
        var general = 0
        var probe = 0
        /// Only peers with a connection open: bounded by the slots.
        var peers: [String: PeerCount] = [:]
    }
    private let slots = Mutex(Open())
    private let refused = Mutex<[OperationsServer.Refusal: Int]>([:])
    private let onRefusal: (@Sendable (OperationsServer.Refusal) -> Void)?

    init(onRefusal: (@Sendable (OperationsServer.Refusal) -> Void)?) {
        self.onRefusal = onRefusal
    }

    /// Takes a slot for a connection from `peer`: a general one while the server and the peer are under
    /// their caps, else a probe slot, else none (the cap that refused it).
    func admit(peer: String, limits: OperationsServer.Limits) -> Admission {
        slots.withLock { o in
            var count = o.peers[peer] ?? PeerCount()
            let peerFull = count.general >= limits.maxConnectionsPerPeer
            let cap: OperationsServer.Refusal = peerFull ? .peerCap : .connectionCap
            let slot: Slot
            if !peerFull && o.general < limits.maxConnections {
                o.general += 1
                count.general += 1
                slot = .general
            } else if o.probe < limits.probeSlots && count.probe < limits.probeSlotsPerPeer {
                o.probe += 1
                count.probe += 1
                slot = .probe(cap)
            } else {
                return .refused(cap)
            }
            o.peers[peer] = count
            return .slot(slot)
        }
    }

    func closed(peer: String, slot: Slot) {
        slots.withLock { o in
            guard var count = o.peers[peer] else { return }
            if slot == .general {
                o.general -= 1
                count.general -= 1
            } else {
                o.probe -= 1
                count.probe -= 1
            }
            o.peers[peer] = count.general + count.probe == 0 ? nil : count
        }
    }

    var openCount: Int { slots.withLock { $0.general + $0.probe } }

    func refused(_ reason: OperationsServer.Refusal) {
        refused.withLock { $0[reason, default: 0] += 1 }
        onRefusal?(reason)
    }

    var refusalCounts: [OperationsServer.Refusal: Int] { refused.withLock { $0 } }
}

extension String {
    fileprivate func trimmingLeadingAndTrailingSpaces() -> Substring {
        let isSpace = { (c: Character) in c == " " || c == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return self[first...last]
    }
}

/// Reads one request, answers it (asynchronously: readiness and the dashboard ask Redis), closes.
private final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    struct Configuration: Sendable {
        var routes: OperationsServer.Routes
        var tokens: OperationsServer.Tokens
        var limits: OperationsServer.Limits
        var counters: Counters
        var logger: Logger
    }

    private let configuration: Configuration
    private let slot: Counters.Slot
    private var head: HTTPRequestHead?
    private var bodyBytes = 0
    /// Set once the request is complete (or refused): later input is ignored.
    private var answered = false
    private var requestDeadline: Scheduled<Void>?
    private var connectionDeadline: Scheduled<Void>?

    init(_ configuration: Configuration, slot: Counters.Slot) {
        self.configuration = configuration
        self.slot = slot
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // Both clocks start at accept: a client that connects and says nothing costs a slot for
        // `requestTimeout` at most (a probe slot for `probeRequestTimeout`).
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        let limits = configuration.limits
        let requestTimeout = slot == .general ? limits.requestTimeout : min(limits.requestTimeout, limits.probeRequestTimeout)
        requestDeadline = context.eventLoop.scheduleTask(in: .nanoseconds(requestTimeout.nanoseconds)) {
            let (handler, context) = bound.value
            guard !handler.answered else { return }
            handler.answered = true
            handler.configuration.counters.refused(.timeout)
            context.close(promise: nil)
        }
        connectionDeadline = context.eventLoop.scheduleTask(in: .nanoseconds(configuration.limits.connectionTimeout.nanoseconds)) {
            let (handler, context) = bound.value
            handler.configuration.counters.refused(.timeout)
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        requestDeadline?.cancel()
        connectionDeadline?.cancel()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // HTTPServerProtocolErrorHandler has answered 400 to a head over the decoder's limits (and will
        // close); count it.
        if let parser = error as? HTTPParserError, parser == .headerOverflow {
            configuration.counters.refused(.tooLarge)
        }
        answered = true
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        switch unwrapInboundIn(data) {
        case .head(let h):
            if case .probe(let cap) = slot, !OperationsServer.probePaths.contains(Self.path(of: h.uri)) {
                configuration.counters.refused(cap)
                var busy = OperationsServer.Response.text(
                    .serviceUnavailable, "busy: too many connections; this one is kept for /healthz and /readyz\n")
                busy.headers = [("retry-after", "1")]
                write(busy, method: h.method, version: h.version, context: context)
                return
            }
            head = h
        case .body(let buffer):
            bodyBytes += buffer.readableBytes
            if bodyBytes > configuration.limits.maxBodyBytes {
                configuration.counters.refused(.tooLarge)
                write(
                    .text(.payloadTooLarge, "no route takes a body\n"), method: .GET, version: head?.version ?? .http1_1, context: context)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            answered = true
            requestDeadline?.cancel()
            let path = Self.path(of: head.uri)
            let method = head.method
            let routes = configuration.routes
            let tokens = configuration.tokens
            let logger = configuration.logger
            let peer = OperationsServer.describe(context.remoteAddress)
            let authorization = head.headers.first(name: "authorization")
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            let promise = context.eventLoop.makePromise(of: OperationsServer.Response.self)
            promise.completeWithTask {
                await OperationsServer.respond(
                    method: method, path: path, authorization: authorization, tokens: tokens, peer: peer, routes: routes, logger: logger)
            }
            promise.futureResult.whenSuccess { response in
                let (handler, context) = bound.value
                if response.status == .unauthorized {
                    handler.configuration.counters.refused(.unauthorized)
                    handler.configuration.logger.debug(
                        "operations surface: request without the bearer token",
                        metadata: ["path": "\(path)", "peer": "\(context.remoteAddress?.description ?? "?")"])
                }
                handler.write(response, method: method, version: head.version, context: context)
            }
        }
    }

    /// The request target's path (its query left out).
    static func path(of uri: String) -> String {
        String(uri.split(separator: "?", maxSplits: 1).first ?? "/")
    }

    private func write(_ response: OperationsServer.Response, method: HTTPMethod, version: HTTPVersion, context: ChannelHandlerContext) {
        answered = true
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: response.contentType)
        headers.add(name: "content-length", value: String(response.body.count))
        headers.add(name: "cache-control", value: "no-store")
        headers.add(name: "connection", value: "close")
        headers.add(name: "x-content-type-options", value: "nosniff")
        headers.add(name: "referrer-policy", value: "no-referrer")
        if !response.headers.contains(where: { $0.0 == "content-security-policy" }) {
            headers.add(name: "content-security-policy", value: OperationsServer.dataSecurityPolicy)
        }
        for (name, value) in response.headers { headers.add(name: name, value: value) }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: version, status: response.status, headers: headers))), promise: nil)
        if method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

extension Duration {
    fileprivate var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
