import NIOCore
import NIOSSL
import Testing

@testable import Sender

/// Which connect failures are refusals that retrying cannot fix, without sockets (the real ones are in
/// `SendFailsFastTests`, `RefusedConnectTests` and `HTTPSProxyTransportTests`).
@Suite struct HTTP2ConnectRefusalTests {
    static func classify(_ error: any Error) -> HTTP2ConnectRefusal? {
        HTTP2ConnectRefusal.classify(error, app: "com.example.shop", host: "api.push.apple.com:443", serverHostname: "api.push.apple.com")
    }

    static func proxy(_ problem: HTTPSProxyError.Problem) -> HTTPSProxyError {
        HTTPSProxyError(proxy: "proxy:3128", target: "api.push.apple.com:443", source: "http2.proxy", problem: problem)
    }

    @Test func aProxyRefusingOurCredentialsIsARefusalItsOtherFailuresAreNot() {
        let refused = Self.classify(Self.proxy(.authenticationRequired(status: 407, credentialsGiven: true)))
        #expect(refused?.kind == .proxyAuthentication)
        #expect(
            refused?.description
                == "cannot connect to APNs at api.push.apple.com:443 for com.example.shop: the HTTPS proxy proxy:3128 refused CONNECT "
                + "api.push.apple.com:443: 407 Proxy Authentication Required — the user or password in http2.proxy is wrong")
        #expect(Self.classify(Self.proxy(.authenticationRequired(status: 401, credentialsGiven: false)))?.kind == .proxyAuthentication)
        // A proxy that is down, refuses the port, cannot reach Apple or is silent: these may pass.
        for problem: HTTPSProxyError.Problem in [
            .unreachable("connection refused"), .refused(status: 403, reason: "Forbidden"), .refused(status: 502, reason: "Bad Gateway"),
            .closed, .timedOut(seconds: 10), .malformedAnswer,
        ] {
            #expect(Self.classify(Self.proxy(problem)) == nil, "\(problem)")
        }
    }

    @Test func certificatesThatDoNotVerifyAndNoH2AreRefusals() {
        let name = Self.classify(NIOSSLExtraError.failedToValidateHostname)
        #expect(name?.kind == .certificate && name?.detail.contains("not for api.push.apple.com") == true)
        let h2 = HTTP2ConnectRefusal.noHTTP2(app: "com.example.shop", host: "api.push.apple.com:443", negotiated: "http/1.1")
        #expect(h2.kind == .noHTTP2 && h2.detail.contains("(ALPN: http/1.1)"))
        // A connection that dies, or times out, is not one.
        #expect(Self.classify(ChannelError.connectTimeout(.seconds(10))) == nil)
        #expect(Self.classify(NIOSSLError.uncleanShutdown) == nil)
        #expect(Self.classify(NIOSSLError.handshakeFailed(.sslError([]))) == nil)
    }

    /// BoringSSL's reason code from an error's text, as swift-nio-ssl prints it.
    @Test func theReasonCodeIsReadFromBoringSSLsText() {
        #expect(
            HTTP2ConnectRefusal.reason(
                in:
                    "sslError([Error: 268435581 error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED at /x/handshake.cc:393])"
            )
                == "CERTIFICATE_VERIFY_FAILED")
        #expect(
            HTTP2ConnectRefusal.reason(in: "error:10000418:SSL routines:OPENSSL_internal:TLSV1_ALERT_UNKNOWN_CA at /x/s3_pkt.cc:1")
                == "TLSV1_ALERT_UNKNOWN_CA")
        #expect(HTTP2ConnectRefusal.reason(in: "no code here") == "no code here")
    }
}
