import APNsProtocol
import Jobs

/// Which apps can send the push types Apple serves over token-based connections only
/// (`APNsPushType.requiresTokenAuthentication`: `liveactivity`, `location`; issue 31). Apple, "Starting
/// and updating Live Activities with ActivityKit push notifications": "Send the push tokens you receive
/// from ActivityKit to your server and use them establish a token-based connection to APNs"; answering on
/// Live Activity pushes (Apple Developer Forums thread 712499): "Certificate-based authentication is not
/// supported for these APNs pushes. You should use token-based authentication instead"; "Sending
/// notification requests to APNs": "The location push type supports only token-based authentication".
/// The binary interface has no push types at all.
///
/// "Configured for" is decided per job, not per pipeline file: nothing in an app entry says which push
/// types it sends, so a file with a certificate app starts as before, and a `push_type: liveactivity`
/// (or `location`) job for that app is dead-lettered (`push-type-needs-token-auth`) when it reaches the
/// app, before anything is sent. docs/design.md §3.2.
extension PipelineConfiguration.App {
    /// True for an HTTP/2 app with token authentication: it can send every push type.
    var sendsEveryPushType: Bool {
        guard transport == .http2, case .token = authentication else { return false }
        return true
    }

    /// Throws the dead letter of a broadcast (a `channel` job) this app cannot send: a broadcast carries
    /// a Live Activity, which Apple serves over token authentication only (above), and the binary
    /// interface has no broadcast at all. Same reason as a Live Activity to a device
    /// (`push-type-needs-token-auth`), with a detail that says it is the broadcast.
    func checkCanBroadcast() throws(JobError) {
        if sendsEveryPushType { return }
        let has = transport == .binary ? "the binary interface" : "HTTP/2 with certificate authentication"
        throw JobError(
            reason: .pushTypeNeedsTokenAuth,
            detail:
                "app \(bundleID) uses \(has); a broadcast (a job with channel) needs HTTP/2 with token authentication (a token section in its app entry)"
        )
    }

    /// Throws the dead letter of a job whose push type this app cannot send.
    func checkCanSend(_ pushType: APNsPushType) throws(JobError) {
        if !pushType.requiresTokenAuthentication || sendsEveryPushType { return }
        let has = transport == .binary ? "the binary interface" : "HTTP/2 with certificate authentication"
        throw JobError(
            reason: .pushTypeNeedsTokenAuth,
            detail:
                "app \(bundleID) uses \(has); \(pushType.rawValue) pushes need HTTP/2 with token authentication (a token section in its app entry)"
        )
    }
}
