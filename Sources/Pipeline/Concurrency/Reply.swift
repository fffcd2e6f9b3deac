/// The result of work one task does for another that waits for it in order (a gate call issued ahead
/// of the send stage): set once, awaited once — a one-element `AsyncStream`. The wait ends with
/// `CancellationError` when the waiter is cancelled, so a stop never waits on a call whose result nobody
/// needs any more.
struct Reply<Value: Sendable>: Sendable {
    private let stream: AsyncStream<Result<Value, any Error>>
    private let continuation: AsyncStream<Result<Value, any Error>>.Continuation

    init() {
        (stream, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(1))
    }

    /// Sets the result; the first call counts, later ones are ignored.
    func set(_ result: Result<Value, any Error>) {
        continuation.yield(result)
        continuation.finish()
    }

    /// The result, once set; `CancellationError` if the caller is cancelled first (or the result was
    /// already taken).
    func value() async throws -> Value {
        for await result in stream { return try result.get() }
        throw CancellationError()
    }
}
