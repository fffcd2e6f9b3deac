import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// One HTTP/1.1 server (SwiftNIO) for the operations surface: `/metrics` (Prometheus text), `/healthz`,
/// `/readyz`, the dashboard page (`/`) and its data (`/api/dashboard`). Each route is optional, so `run`
/// serves all of them and `dashboard` only the page. One request per connection (`Connection: close`):
/// scrapers and browsers cope, and the handler stays free of keep-alive state.
public final class OperationsServer: Sendable {
    /// What the server answers with.
    public struct Routes: Sendable {
        /// The Prometheus exposition text.
        public var metrics: (@Sendable () -> [UInt8])?
        /// Problems that make the process not ready (empty: ready).
        public var readiness: (@Sendable () async -> [String])?
        /// The dashboard's data, as JSON.
        public var dashboard: (@Sendable () async -> [UInt8])?

        public init(
            metrics: (@Sendable () -> [UInt8])? = nil, readiness: (@Sendable () async -> [String])? = nil,
            dashboard: (@Sendable () async -> [UInt8])? = nil
        ) {
            self.metrics = metrics
            self.readiness = readiness
            self.dashboard = dashboard
        }
    }

    struct Response: Sendable {
        var status: HTTPResponseStatus
        var contentType: String
        var body: [UInt8]

        init(_ status: HTTPResponseStatus, _ contentType: String, _ body: [UInt8]) {
            self.status = status
            self.contentType = contentType
            self.body = body
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

    public let host: String
    private let routes: Routes
    private let group: MultiThreadedEventLoopGroup
    private let logger: Logger
    private let channel: any Channel

    /// Binds `host:port` (0: a free port, see ``port``) and starts serving.
    public init(host: String, port: Int, routes: Routes, logger: Logger) async throws {
        self.host = host
        self.routes = routes
        self.logger = logger
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let routes = self.routes
        do {
            channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 64)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                        try channel.pipeline.syncOperations.addHandler(RequestHandler(routes: routes))
                    }
                }
                .bind(host: host, port: port).get()
        } catch {
            try? await group.shutdownGracefully()
            if let io = error as? IOError {
                throw ListenError(host: host, port: port, reason: "\(io.description)")
            }
            throw ListenError(host: host, port: port, reason: "\(error)")
        }
    }

    /// The port it listens on.
    public var port: Int { channel.localAddress?.port ?? 0 }

    public func stop() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }

    static func respond(method: HTTPMethod, path: String, routes: Routes) async -> Response {
        guard method == .GET || method == .HEAD else { return .text(.methodNotAllowed, "only GET\n") }
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
            return Response(.ok, "text/html; charset=utf-8", Array(DashboardPage.html.utf8))
        case "/api/dashboard":
            guard let dashboard = routes.dashboard else { return .text(.notFound, "no dashboard here\n") }
            return Response(.ok, "application/json", await dashboard())
        default:
            return .text(.notFound, "not found: try /metrics, /healthz, /readyz, /\n")
        }
    }
}

/// Reads one request, answers it (asynchronously: readiness and the dashboard ask Redis), closes.
private final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let routes: OperationsServer.Routes
    private var head: HTTPRequestHead?

    init(routes: OperationsServer.Routes) {
        self.routes = routes
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
        case .body:
            break  // no route takes a body
        case .end:
            guard let head else { return }
            self.head = nil
            let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "/")
            let method = head.method
            let routes = routes
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            let promise = context.eventLoop.makePromise(of: OperationsServer.Response.self)
            promise.completeWithTask { await OperationsServer.respond(method: method, path: path, routes: routes) }
            promise.futureResult.whenSuccess { response in
                let context = bound.value
                var headers = HTTPHeaders()
                headers.add(name: "content-type", value: response.contentType)
                headers.add(name: "content-length", value: String(response.body.count))
                headers.add(name: "cache-control", value: "no-store")
                headers.add(name: "connection", value: "close")
                context.write(
                    NIOAny(HTTPServerResponsePart.head(HTTPResponseHead(version: head.version, status: response.status, headers: headers))),
                    promise: nil)
                if method != .HEAD {
                    context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
                }
                let channel = context.channel
                context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil))).whenComplete { _ in
                    channel.close(promise: nil)
                }
            }
        }
    }
}
