import APNsTransport
import Foundation
import Synchronization

/// The provider token of one (team, key): made on first use, renewed when it is ~50 minutes old (APNs
/// refuses tokens over an hour old) and never sooner than 20 minutes after the last one (APNs answers
/// faster renewals with 429 TooManyProviderTokenUpdates). Every connection that signs with this key
/// shares the one token, so N connections do not mean N renewals.
public final class ProviderTokenCache: Sendable, CustomStringConvertible {
    public struct Token: Sendable, Equatable {
        /// The compact JWT. Never logged.
        public var value: String
        public var issuedAt: Int64
    }

    private let signer: ProviderTokenSigner
    private let clock: @Sendable () -> Int64
    private let renewAfter: Int64
    private let minimumInterval: Int64
    private let state = Mutex<Token?>(nil)

    /// `clock`: epoch seconds (injectable for tests).
    public init(
        signer: ProviderTokenSigner, renewAfter: Int64 = 50 * 60, minimumInterval: Int64 = 20 * 60,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.signer = signer
        self.clock = clock
        self.renewAfter = renewAfter
        self.minimumInterval = minimumInterval
    }

    public var keyID: String { signer.keyID }
    public var teamID: String { signer.teamID }
    public var description: String { "ProviderTokenCache(keyID: \(keyID), teamID: \(teamID))" }

    /// The token to send now, renewed first when it is due.
    public func current() throws -> Token {
        let now = clock()
        return try state.withLock { token in
            if let t = token, now - t.issuedAt < renewAfter { return t }
            let fresh = Token(value: try signer.token(issuedAt: now), issuedAt: now)
            token = fresh
            return fresh
        }
    }

    /// APNs said the token issued at `rejectedIssuedAt` expired (403 ExpiredProviderToken). Renews it
    /// unless another connection already did, or unless it is younger than the minimum interval (then
    /// APNs and we disagree about the time, and renewing faster would only earn a 429). Returns
    /// whether the current token differs from the rejected one.
    @discardableResult
    public func renew(rejectedIssuedAt: Int64) throws -> Bool {
        let now = clock()
        return try state.withLock { token in
            if let t = token, t.issuedAt != rejectedIssuedAt { return true }
            if let t = token, now - t.issuedAt < minimumInterval { return false }
            token = Token(value: try signer.token(issuedAt: now), issuedAt: now)
            return true
        }
    }

    private static let registry = Mutex<[String: ProviderTokenCache]>([:])

    /// The process-wide cache for this key, so every app and connection signing with the same
    /// (team, key) shares one token. Reads the `.p8` file on first use; errors name the file only.
    public static func shared(keyFile: String, keyID: String, teamID: String) throws -> ProviderTokenCache {
        let name = "\(teamID)/\(keyID)"
        if let cache = registry.withLock({ $0[name] }) { return cache }
        let signer = try ProviderTokenSigner(keyFile: keyFile, keyID: keyID, teamID: teamID)
        return registry.withLock { caches in
            if let existing = caches[name] { return existing }
            let cache = ProviderTokenCache(signer: signer)
            caches[name] = cache
            return cache
        }
    }
}
