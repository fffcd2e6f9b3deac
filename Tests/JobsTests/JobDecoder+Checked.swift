import APNsProtocol
import Jobs
import Testing

extension JobDecoder {
    /// Decodes `bytes` after checking that the template path (`run`, `send`) decodes them as the plain
    /// decoder does (`JobTemplateTests.expectSameDecoding`).
    func checkedDecode(_ bytes: [UInt8], now: UInt32, sourceLocation: SourceLocation = #_sourceLocation) throws(JobError) -> Job {
        JobTemplateTests.expectSameDecoding(bytes, decoder: self, now: now, sourceLocation: sourceLocation)
        return try decode(bytes, now: now)
    }

    /// The refusal of `bytes` (both decoding paths must agree), nil when they are accepted: the caller's
    /// `#expect` on it then fails.
    func refusal(_ bytes: [UInt8], now: UInt32, sourceLocation: SourceLocation = #_sourceLocation) -> JobError? {
        do {
            _ = try checkedDecode(bytes, now: now, sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }
}
