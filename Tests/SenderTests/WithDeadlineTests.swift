import TestSupport
import Testing

/// `withDeadline`, the guard the proxy tests put on their waits: a result passes through, and a body that
/// never finishes — not even when cancelled — is a thrown error naming what was awaited, not a hang.
@Suite struct WithDeadlineTests {
    @Test func aResultOrAnErrorPassesThrough() async throws {
        #expect(try await withDeadline("a quick answer") { 42 } == 42)
        do {
            _ = try await withDeadline("a failing body") { () async throws -> Int in throw TestFailure("the body's own error") }
            Issue.record("no error")
        } catch {
            #expect("\(error)" == "the body's own error")
        }
    }

    @Test func aBodyThatNeverEndsIsAnErrorAtTheDeadline() async throws {
        do {
            // Suspended for good: cancellation cannot end it (a task group would wait for it forever).
            try await withDeadline("a reply that never comes", seconds: 0.2) {
                await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
            }
            Issue.record("returned without a result")
        } catch {
            #expect("\(error)".contains("waiting for: a reply that never comes"), "\(error)")
        }
    }
}
