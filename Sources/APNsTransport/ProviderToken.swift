import APNsProtocol
import Crypto
import Foundation

// Token-based provider authentication (Apple, "Establishing a token-based connection to APNs"): the
// provider signs a JSON Web Token with the P-256 key Apple issued ("AuthKey_<key id>.p8", PKCS#8 PEM):
// header {"alg":"ES256","kid":<key id>}, claims {"iss":<team id>,"iat":<epoch seconds>}, sent as
// `authorization: bearer <JWT>`. "APNs rejects any request whose token contains a timestamp that is
// more than one hour old", and "Refresh your token no more than once every 20 minutes".
//
// Key material never appears in a description, an error or a log line: errors name the file only.

/// Signs provider tokens with one Apple-issued key.
public struct ProviderTokenSigner: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public let keyID: String
    public let teamID: String
    private let key: P256.Signing.PrivateKey

    /// `pem`: the `.p8` file's text (PKCS#8 `PRIVATE KEY`; SEC1 `EC PRIVATE KEY` is accepted too).
    public init(pem: String, keyID: String, teamID: String) throws(ProviderTokenError) {
        guard let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) else {
            throw ProviderTokenError(file: nil, problem: "not a P-256 private key in PEM (PKCS#8 or SEC1)")
        }
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
    }

    public init(keyFile path: String, keyID: String, teamID: String) throws(ProviderTokenError) {
        let pem = try ProviderTokenError.readFile(path)
        do { try self.init(pem: pem, keyID: keyID, teamID: teamID) } catch { throw error.in(file: path) }
    }

    /// Names the key, never shows it.
    public var description: String { "ProviderTokenSigner(keyID: \(keyID), teamID: \(teamID))" }
    public var debugDescription: String { description }

    /// The public half, for a verifier.
    public var publicKey: P256.Signing.PublicKey { key.publicKey }

    /// A compact JWS `header.claims.signature` (base64url without padding, raw r‖s signature).
    public func token(issuedAt seconds: Int64) throws(ProviderTokenError) -> String {
        var header: [UInt8] = []
        header.append(contentsOf: #"{"alg":"ES256","kid":"#.utf8)
        JSONWriter.writeString(keyID, into: &header)
        header.append(UInt8(ascii: "}"))
        var claims: [UInt8] = []
        claims.append(contentsOf: #"{"iss":"#.utf8)
        JSONWriter.writeString(teamID, into: &claims)
        claims.append(contentsOf: #","iat":"#.utf8)
        claims.append(contentsOf: String(seconds).utf8)
        claims.append(UInt8(ascii: "}"))
        let signingInput = Base64URL.encodedString(header) + "." + Base64URL.encodedString(claims)
        guard let signature = try? key.signature(for: Array(signingInput.utf8)) else {
            throw ProviderTokenError(file: nil, problem: "signing failed")
        }
        return signingInput + "." + Base64URL.encodedString(Array(signature.rawRepresentation))
    }
}

/// Checks provider tokens against the public keys of the teams it knows (key id → team, key).
public struct ProviderTokenVerifier: Sendable {
    public struct Key: Sendable {
        public var teamID: String
        public var publicKey: P256.Signing.PublicKey

        public init(teamID: String, publicKey: P256.Signing.PublicKey) {
            self.teamID = teamID
            self.publicKey = publicKey
        }
    }

    public enum Verdict: Sendable, Hashable {
        case valid(keyID: String, teamID: String, issuedAt: Int64)
        /// Not three base64url parts, not JSON, `alg` not ES256, no `kid`, `iss` or whole-number `iat`.
        case malformed(String)
        /// No key with this `kid`.
        case unknownKey(String)
        /// The signature does not verify with the key, or `iss` is not the key's team.
        case badSignature
        /// `iat` older than the maximum age.
        case expired(issuedAt: Int64)
    }

    public var keys: [String: Key]
    /// Apple: one hour ("more than one hour old").
    public var maxAge: Int64
    /// Tolerated clock skew for an `iat` ahead of the verifier's clock, seconds; further ahead is
    /// malformed (a token from the future would otherwise never expire).
    public var maxFutureSkew: Int64 = 300

    public init(keys: [String: Key], maxAge: Int64 = 3600) {
        self.keys = keys
        self.maxAge = maxAge
    }

    /// Reads a PEM file holding either a public key (`PUBLIC KEY`) or the private `.p8` itself, so an
    /// operator can point the verifier at the key the pipeline signs with.
    public static func publicKey(fromFile path: String) throws(ProviderTokenError) -> P256.Signing.PublicKey {
        let pem = try ProviderTokenError.readFile(path)
        if let key = try? P256.Signing.PublicKey(pemRepresentation: pem) { return key }
        if let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) { return key.publicKey }
        throw ProviderTokenError(file: path, problem: "not a P-256 public or private key in PEM")
    }

    /// `now`: epoch seconds. The signature is checked before the age, so an expired verdict is only
    /// given for a token the key really made.
    public func verify(_ token: some StringProtocol, now: Int64) -> Verdict {
        let utf8 = token.utf8
        let parts = utf8.split(separator: UInt8(ascii: "."), maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .malformed("not three dot-separated parts") }
        guard let headerBytes = Base64URL.decode(Array(parts[0])), let claimBytes = Base64URL.decode(Array(parts[1])),
            let signatureBytes = Base64URL.decode(Array(parts[2]))
        else { return .malformed("not base64url") }
        guard let header = try? JSONParser.parse(headerBytes), let claims = try? JSONParser.parse(claimBytes) else {
            return .malformed("header or claims not JSON")
        }
        guard header["alg"]?.stringValue == "ES256" else { return .malformed("alg is not ES256") }
        guard let kid = header["kid"]?.stringValue else { return .malformed("no kid") }
        guard let iss = claims["iss"]?.stringValue else { return .malformed("no iss") }
        guard let iatValue = claims["iat"]?.intValue else { return .malformed("no whole-number iat") }
        guard let key = keys[kid] else { return .unknownKey(kid) }
        guard key.teamID == iss, signatureBytes.count == 64,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        else { return .badSignature }
        let signingInput = Array(utf8.prefix(parts[0].count + 1 + parts[1].count))
        guard key.publicKey.isValidSignature(signature, for: signingInput) else { return .badSignature }
        let iat = Int64(iatValue)
        if iat > now + maxFutureSkew { return .malformed("iat is in the future") }
        if now - iat > maxAge { return .expired(issuedAt: iat) }
        return .valid(keyID: kid, teamID: iss, issuedAt: iat)
    }
}

public struct ProviderTokenError: Error, Sendable, CustomStringConvertible {
    public var file: String?
    public var problem: String

    public var description: String { file.map { "provider token key \($0): \(problem)" } ?? "provider token: \(problem)" }

    func `in`(file: String) -> ProviderTokenError { ProviderTokenError(file: file, problem: problem) }

    static func readFile(_ path: String) throws(ProviderTokenError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ProviderTokenError(file: path, problem: "cannot read the file")
        }
        return String(decoding: data, as: UTF8.self)
    }
}

/// base64url without padding (RFC 7515 §2), as JWS uses.
public enum Base64URL {
    public static func encode(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        for c in Data(bytes).base64EncodedData() {
            switch c {
            case UInt8(ascii: "+"): out.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): out.append(UInt8(ascii: "_"))
            case UInt8(ascii: "="): break
            default: out.append(c)
            }
        }
        return out
    }

    public static func encodedString(_ bytes: [UInt8]) -> String { String(decoding: encode(bytes), as: UTF8.self) }

    /// nil for characters outside the base64url alphabet (padding included) or an impossible length.
    public static func decode(_ text: [UInt8]) -> [UInt8]? {
        guard text.count % 4 != 1 else { return nil }
        var standard = [UInt8]()
        standard.reserveCapacity(text.count + 3)
        for c in text {
            switch c {
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.append(c)
            default: return nil
            }
        }
        while standard.count % 4 != 0 { standard.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(standard)).map { Array($0) }
    }
}
