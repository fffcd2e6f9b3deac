import NIOSSL

/// A provider's TLS identity for one app: the client certificate and key Apple issued for its topic,
/// and the CA that the gateway's certificate must chain to. Used for both gateway and feedback
/// connections ("You use the same SSL certificate for connecting to the feedback service as you use
/// for sending notifications").
public struct ProviderCredentials: Sendable, Hashable {
    /// The app topic (bundle id) the certificate is for.
    public var app: String
    public var certificatePath: String
    public var privateKeyPath: String
    /// PEM bundle of trusted roots; nil uses the system's (production: Apple's gateways chain to a
    /// public root).
    public var trustRootsPath: String?

    public init(app: String, certificatePath: String, privateKeyPath: String, trustRootsPath: String?) {
        self.app = app
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
        self.trustRootsPath = trustRootsPath
    }

    /// The credentials `ops/certs` makes for `app` in `directory`.
    public static func test(app: String, in directory: String) -> ProviderCredentials {
        ProviderCredentials(
            app: app, certificatePath: "\(directory)/\(app).pem", privateKeyPath: "\(directory)/\(app).key",
            trustRootsPath: "\(directory)/ca.pem")
    }

    /// A client TLS context: client certificate presented, server certificate and hostname verified.
    /// `applicationProtocols`: ALPN offers (`["h2"]` for the HTTP/2 provider API; none for binary).
    /// Throws (with the file named) when a file cannot be read.
    public func makeClientContext(applicationProtocols: [String] = []) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        // swift-nio-ssl allows TLS 1.0 by default; TLS 1.0 and 1.1 are deprecated (RFC 8996), and Apple
        // says "Use HTTP/2 and TLS 1.2 or later to establish a connection between your provider server
        // and one of the following servers" ("Sending Notification Requests to APNs"). Every client of
        // the pipeline (binary sender, feedback poller, HTTP/2 with a certificate) gets its context here.
        tls.minimumTLSVersion = .tlsv12
        tls.certificateVerification = .fullVerification
        tls.applicationProtocols = applicationProtocols
        if let trustRootsPath { tls.trustRoots = .file(trustRootsPath) }
        do {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
        } catch {
            throw CredentialsError(path: certificatePath, reason: "\(error)")
        }
        do {
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: privateKeyPath, format: .pem))
        } catch {
            throw CredentialsError(path: privateKeyPath, reason: "\(error)")
        }
        return try NIOSSLContext(configuration: tls)
    }

    /// The topic the certificate itself names, to catch a certificate configured for the wrong app.
    public func certificateTopic() throws -> String? {
        guard let first = try NIOSSLCertificate.fromPEMFile(certificatePath).first else { return nil }
        return CertificateTopic.topic(fromDER: try first.toDERBytes())
    }
}

public struct CredentialsError: Error, CustomStringConvertible {
    public var path: String
    public var reason: String
    public var description: String { "cannot load \(path): \(reason)" }
}
