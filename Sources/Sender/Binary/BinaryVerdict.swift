import APNsProtocol

/// What a binary error-response status means for the notification it names — the one place the
/// binary transport turns Table 5-1 numbers into meanings (everything after it sees `Rejection`).
/// Status 10 (shutdown) and 0 never name a failed notification (`ReplayBuffer.resolve` settles them).
enum BinaryVerdict: Equatable {
    case rejected(Rejection)
    /// A processing error on the gateway's side: worth another attempt, up to `maxAttempts`.
    case retry(reason: String)

    init(_ status: ErrorStatus) {
        switch status {
        case .invalidToken:
            self = .rejected(.invalidToken(since: nil, reason: "invalid-token"))
        case .processingError, .unknown:
            self = .retry(reason: "status \(status.rawValue): \(status.summary)")
        default:
            // 2–7: the frame was malformed; validation before sending should have caught it.
            self = .rejected(.badRequest(reason: "status \(status.rawValue): \(status.summary)"))
        }
    }
}
