import APNsProtocol
import Jobs

/// Which apps can send Live Activity pushes (issue 31). Apple, "Starting and updating Live Activities
/// with ActivityKit push notifications": "Send the push tokens you receive from ActivityKit to your server
/// and use them establish a token-based connection to APNs"; and, answering on Live Activity pushes
/// (Apple Developer Forums thread 712499): "Certificate-based authentication is not supported for these
/// APNs pushes. You should use token-based authentication instead." The binary interface has no push
/// types at all.
///
/// "Configured for" is decided per job, not per pipeline file: nothing in an app entry says it sends
/// Live Activities, so a file with a certificate app starts as before, and a `push_type: liveactivity`
/// job for that app is dead-lettered (`live-activity-needs-token-auth`, naming the app and what it
/// has) when it reaches the app, before anything is sent. docs/design.md §3.2.
extension PipelineConfiguration.App {
    /// True for an HTTP/2 app with token authentication.
    var canSendLiveActivities: Bool {
        guard transport == .http2, case .token = authentication else { return false }
        return true
    }

    /// Throws the dead letter of a Live Activity job this app cannot send.
    func checkCanSendLiveActivities() throws(JobError) {
        if canSendLiveActivities { return }
        let has = transport == .binary ? "the binary interface" : "HTTP/2 with certificate authentication"
        throw JobError(
            reason: .liveActivityNeedsTokenAuth,
            detail: "app \(bundleID) uses \(has); Live Activity pushes need HTTP/2 with token authentication (a token section in its app entry)")
    }
}
