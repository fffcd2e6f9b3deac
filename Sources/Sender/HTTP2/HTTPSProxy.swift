import Foundation
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import TimeUnits

/// An HTTPS proxy (HTTP CONNECT) between the sender and Apple: `http://[user:password@]host[:port]`,
/// from the pipeline file (`http2.proxy`) or the environment (`HTTPS_PROXY`). Corporate egress often
/// allows nothing else. The proxy only relays bytes: TLS (ALPN h2) runs end to end with Apple through
/// the tunnel, so the proxy sees the host and port, never a notification or a credential of Apple's.
///
/// The password is a secret: ``description`` shows it as `***`, and no error quotes the URL.
public struct HTTPSProxy: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String?
    /// Sent only in `Proxy-Authorization` (Basic) on the CONNECT request; never logged.
    public var password: String?
    /// Where the proxy was configured (`http2.proxy`, `HTTPS_PROXY`…): named by errors, so an operator
    /// knows which setting to fix.
    public var source: String

    public init(host: String, port: Int, username: String? = nil, password: String? = nil, source: String = "http2.proxy") {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.source = source
    }

    /// A proxy URL's problem; never quotes the URL (it may hold a password anywhere when malformed).
    public struct URLError: Error, CustomStringConvertible, Equatable {
        public var problem: String
        public var description: String { problem }
    }

    static let expected = "expected http://[user:password@]host:port"

    /// `http://[user:password@]host[:port][/]`, as curl and most tools read `HTTPS_PROXY`: no scheme
    /// means `http://`, no port means 80. The user and password are percent-decoded (a password holding
    /// `@ : / % #` is written `%40 %3A %2F %25 %23`). Only a plain-HTTP proxy is spoken to: `https://`
    /// (TLS to the proxy itself) and `socks5://` are refused with the reason.
    public init(url: String, source: String = "http2.proxy") throws(URLError) {
        var rest = Substring(url.trimmingCharacters(in: .whitespaces))
        if let scheme = rest.range(of: "://") {
            let name = rest[..<scheme.lowerBound].lowercased()
            switch name {
            case "http": break
            case "https":
                throw URLError(
                    problem: "an https:// proxy (TLS to the proxy itself) is not supported: \(Self.expected) — the tunnel "
                        + "to Apple is TLS end to end either way; most proxies take CONNECT on their plain http:// port")
            default:
                throw URLError(problem: "the scheme \(name.isEmpty ? "(empty)" : name):// is not supported: \(Self.expected)")
            }
            rest = rest[scheme.upperBound...]
        }
        // RFC 3986 §3.2: the authority runs to the next "/", "?" or "#"; a proxy URL has no path.
        if let end = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            guard rest[end...] == "/" else {
                throw URLError(
                    problem:
                        "a proxy URL has no path, query or fragment: \(Self.expected) (percent-encode / ? # @ in the password: %2F %3F %23 %40)"
                )
            }
            rest = rest[..<end]
        }
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let user = userInfo.firstIndex(of: ":").map { userInfo[..<$0] } ?? userInfo
            guard let decodedUser = String(user).removingPercentEncoding, !decodedUser.isEmpty else {
                throw URLError(problem: "bad or empty user name before the @ (a % must start %XX): \(Self.expected)")
            }
            username = decodedUser
            if let colon = userInfo.firstIndex(of: ":") {
                guard let decoded = String(userInfo[userInfo.index(after: colon)...]).removingPercentEncoding else {
                    throw URLError(
                        problem: "bad percent-encoding in the password (a % must start %XX; write % itself as %25): \(Self.expected)")
                }
                password = decoded
            }
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw URLError(problem: "unclosed [ in the proxy host: \(Self.expected)") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                portText = after.dropFirst()
            } else if !after.isEmpty {
                throw URLError(problem: "unexpected text after the proxy host's ]: \(Self.expected)")
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "@" || $0 == "[" || $0 == "]" }) else {
            throw URLError(problem: "missing or malformed proxy host: \(Self.expected)")
        }
        var port = 80
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw URLError(problem: "bad proxy port: expected a number in 1…65535 (\(Self.expected))")
            }
            port = value
        }
        self.init(host: String(host), port: port, username: username, password: password, source: source)
    }

    /// `host:port` (`[v6]:port`): how logs and errors name the proxy.
    public var address: String { Self.authority(host: host, port: port) }

    /// The URL with the password replaced by `***`: the only form that may appear in logs.
    public var description: String {
        let credentials = username.map { $0 + (password != nil ? ":***" : "") + "@" } ?? ""
        return "http://\(credentials)\(address)"
    }

    /// `Basic base64(user:password)` (RFC 7617), or nil without credentials.
    var proxyAuthorization: String? {
        guard let username else { return nil }
        return "Basic " + Data("\(username):\(password ?? "")".utf8).base64EncodedString()
    }

    static func authority(host: String, port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

/// The proxy for the HTTP/2 connections, and the hosts reached without it (`NO_PROXY`).
public struct HTTPSProxySettings: Sendable, Hashable {
    public var proxy: HTTPSProxy
    /// Host names and domain suffixes reached directly (lowercased, no port, no brackets); `*` is every host.
    public var noProxy: [String]
    /// Where `noProxy` came from (`http2.no_proxy`, `NO_PROXY`…), for the start log.
    public var noProxySource: String?

    public init(proxy: HTTPSProxy, noProxy: [String] = [], noProxySource: String? = nil) {
        self.proxy = proxy
        self.noProxy = noProxy.compactMap(Self.normalized)
        self.noProxySource = noProxySource
    }

    /// The proxy to reach `host` through, or nil when `noProxy` lists it: the entry itself
    /// (`api.push.apple.com`, `127.0.0.1`), or a domain it is under (`apple.com` and `.apple.com` both
    /// take `api.push.apple.com`), or `*`. Names are compared as written, case aside: an address is not
    /// matched to the names that resolve to it, and there are no CIDR ranges (as curl).
    public func proxy(for host: String) -> HTTPSProxy? {
        guard let name = Self.normalized(host) else { return proxy }
        for entry in noProxy {
            if entry == "*" || name == entry || name.hasSuffix("." + entry) { return nil }
        }
        return proxy
    }

    /// One `NO_PROXY` entry or host as compared: lowercased, without brackets, a port, a leading `.` or
    /// `*.`, a trailing `.`; nil for an empty one.
    static func normalized(_ entry: String) -> String? {
        var e = Substring(entry.trimmingCharacters(in: .whitespaces).lowercased())
        if e == "*" { return "*" }
        if e.hasPrefix("[") {
            guard let close = e.firstIndex(of: "]") else { return nil }
            e = e[e.index(after: e.startIndex)..<close]
        } else if e.filter({ $0 == ":" }).count == 1, let colon = e.firstIndex(of: ":") {
            e = e[..<colon]  // host:port; ports are not compared
        }
        if e.hasPrefix("*.") { e = e.dropFirst(2) } else if e.hasPrefix(".") { e = e.dropFirst() }
        if e.hasSuffix(".") { e = e.dropLast() }
        return e.isEmpty ? nil : String(e)
    }

    /// `NO_PROXY`'s comma-separated list (spaces allowed).
    public static func noProxyList(_ text: String) -> [String] {
        text.split(separator: ",").map(String.init).compactMap(normalized)
    }

    /// The proxy variable the environment sets, as curl reads it: `https_proxy`, else `HTTPS_PROXY`
    /// (an empty value counts as unset). `http_proxy` is not read: Apple is reached over https only.
    public static func proxyVariable(in environment: [String: String]) -> (name: String, value: String)? {
        for name in ["https_proxy", "HTTPS_PROXY"] {
            if let value = environment[name], !value.trimmingCharacters(in: .whitespaces).isEmpty { return (name, value) }
        }
        return nil
    }

    /// `no_proxy`, else `NO_PROXY` (empty counts as unset).
    public static func noProxyVariable(in environment: [String: String]) -> (name: String, value: String)? {
        for name in ["no_proxy", "NO_PROXY"] {
            if let value = environment[name], !value.trimmingCharacters(in: .whitespaces).isEmpty { return (name, value) }
        }
        return nil
    }
}

/// A proxy that could not be used: unreachable, refusing CONNECT, closing or silent. The HTTP/2
/// connection treats it as a failed connect (back-off, then again; nothing is lost). Names the proxy by
/// `host:port` and never quotes its credentials.
public struct HTTPSProxyError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Problem: Sendable, Equatable {
        /// No TCP connection to the proxy (refused, unreachable, not resolved, timed out).
        case unreachable(String)
        /// 407 (or tinyproxy's 401): credentials missing or wrong.
        case authenticationRequired(status: Int, credentialsGiven: Bool)
        /// Any other answer than 2xx (403: CONNECT to this host/port not allowed; 502/503: the proxy
        /// could not reach the target).
        case refused(status: Int, reason: String)
        /// The proxy closed the connection before its answer ended.
        case closed
        case timedOut(seconds: Double)
        /// An answer that is no tunnel (a 2xx with a body).
        case malformedAnswer
    }

    public var proxy: String
    public var target: String
    public var source: String
    public var problem: Problem

    public var description: String {
        let retry = "the connection retries with back-off, nothing is lost"
        if case .authenticationRequired = problem {
            // Wrong credentials do not get better by trying: the connection stops (`HTTP2ConnectRefusal`).
            return summary + "; the connection waits (as for refused credentials) before it tries again; nothing is lost"
        }
        return summary + "; " + retry
    }

    /// What happened and what to do, without what the connection does next (`send` stops at a refusal
    /// of our credentials: there is no retry to promise there).
    public var summary: String {
        switch problem {
        case .unreachable(let detail):
            return "cannot reach the HTTPS proxy \(proxy) (\(source)): \(detail) — check that it runs and that \(source) names it"
        case .authenticationRequired(let status, let given):
            return
                "the HTTPS proxy \(proxy) refused CONNECT \(target): \(status) \(status == 401 ? "Unauthorized" : "Proxy Authentication Required") — "
                + (given ? "the user or password in \(source) is wrong" : "it wants credentials: \(source) = http://user:password@\(proxy)")
        case .refused(let status, let reason):
            let hint =
                status >= 500
                ? "the proxy could not reach \(target) (its DNS, firewall or Apple's side)"
                : "the proxy must allow CONNECT to \(target) (squid: SSL_ports and http_access; tinyproxy: ConnectPort), or list the host in NO_PROXY / http2.no_proxy if it needs no proxy"
            return "the HTTPS proxy \(proxy) refused CONNECT \(target): \(status) \(reason) — \(hint)"
        case .closed:
            return "the HTTPS proxy \(proxy) closed the connection before answering CONNECT \(target)"
        case .timedOut(let seconds):
            return "the HTTPS proxy \(proxy) did not answer CONNECT \(target) within \(seconds) s"
        case .malformedAnswer:
            return "the HTTPS proxy \(proxy) answered CONNECT \(target) with something that is no tunnel (a body after 2xx)"
        }
    }
}

extension HTTPSProxy {
    /// Opens a TCP connection to the proxy, asks it for a tunnel to `host:port` (`CONNECT host:port
    /// HTTP/1.1`, `Host`, `Proxy-Authorization: Basic …` with credentials), waits for a 2xx, removes the
    /// HTTP/1 handlers, then lets `initialize` set the channel up (on its event loop) for the target: TLS
    /// and whatever speaks over it. The returned channel then carries only the target's bytes.
    ///
    /// Every failure (no connection, a refusal such as 403/407, a close, no answer within `timeout`) is
    /// an ``HTTPSProxyError`` and the channel is closed: for the caller, a failed connect.
    ///
    /// The proxy resolves `host`: no address of the target is looked up here, so a caller's spread over
    /// the target's addresses does not apply through a proxy.
    public func connectTunnel(
        to host: String, port: Int, on eventLoop: any EventLoop, timeout: TimeAmount,
        initialize: @escaping @Sendable (any Channel) throws -> Void
    ) -> EventLoopFuture<any Channel> {
        let proxy = self
        let target = Self.authority(host: host, port: port)
        return ClientBootstrap(group: eventLoop)
            .connectTimeout(timeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: self.host, port: self.port)
            .flatMapErrorThrowing { error in
                throw HTTPSProxyError(proxy: proxy.address, target: target, source: proxy.source, problem: .unreachable("\(error)"))
            }
            .flatMap { channel in
                proxy.establishTunnel(on: channel, to: host, port: port, deadline: .now() + timeout)
                    .flatMapThrowing {
                        try initialize(channel)
                        return channel
                    }
                    .flatMapError { error in
                        channel.close(promise: nil)
                        return channel.eventLoop.makeFailedFuture(error)
                    }
            }
    }

    /// The CONNECT exchange on an open channel to the proxy (on its event loop; reused by the tests on
    /// an `EmbeddedChannel`): succeeds once the proxy's 2xx answer has ended and the HTTP/1 handlers are
    /// gone, so the next bytes either way are the target's.
    func establishTunnel(on channel: any Channel, to host: String, port: Int, deadline: NIODeadline) -> EventLoopFuture<Void> {
        channel.eventLoop.assertInEventLoop()
        let target = Self.authority(host: host, port: port)
        let promise = channel.eventLoop.makePromise(of: Void.self)
        var headers = HTTPHeaders([("Host", target)])
        if let authorization = proxyAuthorization { headers.add(name: "Proxy-Authorization", value: authorization) }
        // The target host as CONNECT's request target wants it (an IPv6 address in brackets).
        let connectHost = host.contains(":") ? "[\(host)]" : host
        let encoder = HTTPRequestEncoder()
        // The target speaks only after our TLS ClientHello, so nothing can follow the proxy's answer yet:
        // there are no left-over bytes to forward.
        let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes))
        let recorder = ProxyAnswerRecorder()
        let connect = NIOHTTP1ProxyConnectHandler(
            targetHost: connectHost, targetPort: port, headers: headers, deadline: deadline, promise: promise)
        let sync = channel.pipeline.syncOperations
        do {
            try sync.addHandler(encoder)
            try sync.addHandler(decoder)
            try sync.addHandler(recorder)
            try sync.addHandler(connect)  // sends CONNECT now: the channel is active
        } catch {
            promise.fail(error)
        }
        let proxy = self
        let timeout = max(.zero, deadline - .now())
        return promise.futureResult.assumeIsolated().flatMap {
            // The CONNECT handler removed itself; the HTTP/1 codec goes too. The decoder leaves the
            // pipeline only on the next tick (`ByteToMessageHandler`), and until then it would take
            // TLS's bytes for HTTP/1 requests: the tunnel is ready once it is gone.
            sync.removeHandler(recorder, promise: nil)
            sync.removeHandler(encoder, promise: nil)
            return sync.removeHandler(decoder)
        }.flatMapErrorThrowing { error in
            throw proxy.tunnelError(error, target: target, status: recorder.status, timeout: timeout)
        }.nonisolated()
    }

    /// NIOExtras' error, told apart by kind (its `==` compares kinds), with the status the recorder saw.
    private func tunnelError(_ error: any Error, target: String, status: HTTPResponseStatus?, timeout: TimeAmount) -> HTTPSProxyError {
        typealias E = NIOHTTP1ProxyConnectHandler.Error
        let problem: HTTPSProxyError.Problem
        if let e = error as? E {
            if e == E.proxyAuthenticationRequired() {
                problem = .authenticationRequired(status: 407, credentialsGiven: username != nil)
            } else if e == E.invalidProxyResponseHead(HTTPResponseHead(version: .http1_1, status: .ok)), let status {
                // tinyproxy answers a wrong password with 401 rather than RFC 9110's 407.
                problem =
                    status.code == 401
                    ? .authenticationRequired(status: 401, credentialsGiven: username != nil)
                    : .refused(status: Int(status.code), reason: status.reasonPhrase)
            } else if e == E.httpProxyHandshakeTimeout() {
                problem = .timedOut(seconds: (Duration(timeout).seconds * 10).rounded() / 10)
            } else if e == E.invalidProxyResponse() {
                problem = .malformedAnswer
            } else {
                problem = .closed  // remoteConnectionClosed, channelUnexpectedlyInactive, noResult
            }
        } else if let e = error as? HTTPSProxyError {
            return e
        } else {
            // The HTTP/1 decoder's errors (not HTTP at all) and pipeline errors.
            problem = .unreachable("\(error)")
        }
        return HTTPSProxyError(proxy: address, target: target, source: source, problem: problem)
    }
}

/// Notes the status of the proxy's answer on its way to `NIOHTTP1ProxyConnectHandler`, whose error
/// for a refusal does not expose it: the error names it (403 and 502 call for different fixes).
private final class ProxyAnswerRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    var status: HTTPResponseStatus?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) { status = head.status }
        context.fireChannelRead(data)
    }
}
