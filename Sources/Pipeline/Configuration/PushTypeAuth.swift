import APNsProtocol
import Jobs

/// Which apps can send the push types Apple serves over token-based connections only
/// (`APNsPushType.requiresTokenAuthentication`: `liveactivity`, `location`). Apple, "Starting
/// and updating Live Activities with ActivityKit push notifications": "Send the push tokens you receive
/// from ActivityKit to your server and use them establish a token-based connection to APNs"; answering on
/// Live Activity pushes (Apple Developer Forums thread 712499): "Certificate-based authentication is not
/// supported for these APNs pushes. You should use token-based authentication instead"; "Sending
/// notification requests to APNs": "The location push type supports only token-based authentication".
/// The binary interface has no push types at all.
///
/// Checked twice. At start, for an app entry that says what it sends (`push_types`): a file that names
/// `liveactivity` or `location` for a binary or certificate app is refused, naming the app and the key.
/// Per job, whatever the entry says: a `push_type: liveactivity` (or `location`) job for such an app is
/// dead-lettered (`push-type-needs-token-auth`) when it reaches the app, before anything is sent.
/// docs/design.md §3.2.
extension PipelineConfiguration.App {
    /// Why this app cannot send the push types its entry names (`push_types`), nil when it can.
    var pushTypeProblem: String? {
        let needToken = (pushTypes ?? []).filter(\.requiresTokenAuthentication)
        guard !needToken.isEmpty, !sendsEveryPushType else { return nil }
        let has = interfaceWithoutToken
        return
            "app \(bundleID) uses \(has), but \(needToken.map(\.rawValue).joined(separator: " and ")) pushes need HTTP/2 with token authentication: give the app a token section (key, key_id, team_id), or remove them from push_types"
    }

    /// True for an app with token authentication (HTTP/2): it can send every push type.
    var sendsEveryPushType: Bool {
        guard transport.capabilities.hasTokenAuthentication, case .token = authentication else { return false }
        return true
    }

    /// What an app that cannot send every push type uses, for the messages that say so.
    private var interfaceWithoutToken: String {
        let capabilities = transport.capabilities
        return capabilities.interfaceDescription + (capabilities.hasTokenAuthentication ? " with certificate authentication" : "")
    }

    /// Throws the dead letter of a broadcast (a `channel` job) this app cannot send: a broadcast carries
    /// a Live Activity, which Apple serves over token authentication only (above), and the binary
    /// interface has no broadcast at all. Same reason as a Live Activity to a device
    /// (`push-type-needs-token-auth`), with a detail that says it is the broadcast.
    func checkCanBroadcast() throws(JobError) {
        if sendsEveryPushType { return }
        let has = interfaceWithoutToken
        throw JobError(
            reason: .pushTypeNeedsTokenAuth,
            detail:
                "app \(bundleID) uses \(has); a broadcast (a job with channel) needs HTTP/2 with token authentication (a token section in its app entry)"
        )
    }

    /// Throws the dead letter of a job whose push type this app cannot send.
    func checkCanSend(_ pushType: APNsPushType) throws(JobError) {
        if !pushType.requiresTokenAuthentication || sendsEveryPushType { return }
        let has = interfaceWithoutToken
        throw JobError(
            reason: .pushTypeNeedsTokenAuth,
            detail:
                "app \(bundleID) uses \(has); \(pushType.rawValue) pushes need HTTP/2 with token authentication (a token section in its app entry)"
        )
    }
}

/// Which apps can take a token of a size other than 32 bytes. Apple,
/// `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`: "APNs device tokens are of
/// variable length. Do not hard-code their size." The provider API puts the token's hex in the request
/// path, of any length; the legacy binary interface has a 32-byte token item ("Device token, 32 bytes")
/// and a gateway answers any other size with status 5, "Invalid token size". So, as for push types, a job
/// is decided when it reaches its app, before anything is sent: a binary app's job with a token that is
/// not 32 bytes is dead-lettered `token-size-needs-http2` (docs/design.md §3.2).
extension PipelineConfiguration.App {
    /// Throws the dead letter of a job whose token this app's interface cannot carry.
    func checkCanSend(tokenOf token: DeviceToken) throws(JobError) {
        if token.fitsBinaryInterface || transport.capabilities.carriesAnyTokenSize { return }
        throw Self.tokenSizeRefusal(app: bundleID, token: token)
    }

    /// The refusal of a `token` a binary app cannot send (`send --protocol binary` gives the same one).
    public static func tokenSizeRefusal(app: String, token: DeviceToken) -> JobError {
        JobError(
            reason: .tokenSizeNeedsHTTP2,
            detail:
                "app \(app) uses the binary interface, which takes 32-byte device tokens only; this token is \(token.byteCount) bytes (\(token.hexCount) hex digits): send it over HTTP/2 (transport: http2)"
        )
    }
}
