import NIOSSL

/// A connection that trying again cannot make: the proxy refuses our credentials (401, 407), the
/// server does not speak HTTP/2 (ALPN did not choose `h2`), or a certificate does not verify (the
/// server's against our trust roots or name, or ours at the server). Something in the configuration,
/// or at the other end, must change first, so the connection does not retry at its reconnect pace:
/// it stops for `authFailureDelay` as for refused credentials, keeps its jobs (they go to another
/// connection or wait), and counts as not up. `send` exits at the first one with its `description`,
/// a line that says what is wrong and what to do; `run` logs it (at most once a minute per transport)
/// and stays not ready.
public struct HTTP2ConnectRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The HTTPS proxy answered CONNECT 407 (or tinyproxy's 401).
        case proxyAuthentication = "proxy-authentication"
        /// TLS worked but the server did not negotiate `h2`.
        case noHTTP2 = "no-http2"
        /// The server's certificate does not verify (trust roots, name), or the server refused ours.
        case certificate
    }

    public var kind: Kind
    /// The app whose connection it was.
    public var app: String
    /// What was connected to, `host:port`.
    public var host: String
    /// What happened and what to do, one line (no secret: a proxy is named by `host:port`).
    public var detail: String

    public var description: String { "cannot connect to APNs at \(host) for \(app): \(detail)" }

    /// The refusal an error from a connect or a TLS handshake stands for, if it is one (nil: a failure
    /// that may pass, retried at the reconnect pace). `serverHostname`: the name the certificate was
    /// checked against.
    static func classify(_ error: any Error, app: String, host: String, serverHostname: String) -> HTTP2ConnectRefusal? {
        if let proxy = error as? HTTPSProxyError, case .authenticationRequired = proxy.problem {
            return HTTP2ConnectRefusal(kind: .proxyAuthentication, app: app, host: host, detail: proxy.summary)
        }
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return HTTP2ConnectRefusal(
                kind: .certificate, app: app, host: host,
                detail: "the server's certificate is not for \(serverHostname) — check the host, or the name it is checked against "
                    + "(http2.server_hostname, send --server-hostname)")
        }
        let text: String
        switch error {
        case NIOSSLError.handshakeFailed(let e): text = "\(e)"
        case let e as BoringSSLError: text = "\(e)"
        default: return nil
        }
        let code = Self.reason(in: text)
        if code.contains("NO_APPLICATION_PROTOCOL") { return noHTTP2(app: app, host: host, negotiated: nil) }
        if code.contains("CERTIFICATE_VERIFY_FAILED") {
            return HTTP2ConnectRefusal(
                kind: .certificate, app: app, host: host,
                detail: "the server's certificate does not verify against the trust roots (\(code)) — check http2.ca "
                    + "(send --ca): without it the system's roots are used, which Apple's hosts chain to")
        }
        let refusedOurs = [
            "BAD_CERTIFICATE", "UNKNOWN_CA", "CERTIFICATE_REQUIRED", "CERTIFICATE_EXPIRED", "CERTIFICATE_REVOKED",
            "UNSUPPORTED_CERTIFICATE", "CERTIFICATE_UNKNOWN",
        ]
        if code.contains("ALERT_"), refusedOurs.contains(where: { code.contains($0) }) {
            return HTTP2ConnectRefusal(
                kind: .certificate, app: app, host: host,
                detail: "the server refused our client certificate (\(code)) — check the app's certificate and key "
                    + "(an Apple Push Services certificate for this app and environment, not expired)")
        }
        return nil
    }

    /// The server chose another protocol than `h2` (or none).
    static func noHTTP2(app: String, host: String, negotiated: String?) -> HTTP2ConnectRefusal {
        HTTP2ConnectRefusal(
            kind: .noHTTP2, app: app, host: host,
            detail: "the server did not negotiate HTTP/2 (ALPN: \(negotiated ?? "none")): it is not Apple's provider API — check the "
                + "host and port (api.push.apple.com:443 or :2197; gateway.push.apple.com:2195 is the retired binary interface)")
    }

    /// BoringSSL's reason code from an error text (`…:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED at …`),
    /// or the whole text when it has none.
    static func reason(in text: String) -> String {
        for word in text.split(whereSeparator: { $0 == ":" || $0 == " " }) where word.contains("_") && word == word.uppercased() {
            return String(word)
        }
        return text
    }
}
