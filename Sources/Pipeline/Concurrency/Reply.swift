import Synchronization

/// The result of work one task does for another that waits for it in order (a gate call issued ahead
/// of the send stage): set once, awaited once. The wait ends with `CancellationError` when the waiter
/// is cancelled, so a stop never waits on a call whose result nobody needs any more.
final class Reply<Value: Sendable>: Sendable {
    private enum State {
        case pending
        case waiting(CheckedContinuation<Value, any Error>)
        case done(Result<Value, any Error>)
        case taken
    }

    private let state = Mutex(State.pending)

    init() {}

    /// Sets the result; the first call counts, later ones are ignored.
    func set(_ result: Result<Value, any Error>) {
        let waiter = state.withLock { s -> CheckedContinuation<Value, any Error>? in
            switch s {
            case .pending:
                s = .done(result)
                return nil
            case .waiting(let c):
                s = .taken
                return c
            case .done, .taken:
                return nil
            }
        }
        waiter?.resume(with: result)
    }

    /// The result, once set; `CancellationError` if the caller is cancelled first.
    func value() async throws -> Value {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Value, any Error>) in
                let ready = state.withLock { s -> Result<Value, any Error>? in
                    switch s {
                    case .pending:
                        if Task.isCancelled {
                            s = .taken
                            return .failure(CancellationError())
                        }
                        s = .waiting(c)
                        return nil
                    case .done(let result):
                        s = .taken
                        return result
                    case .waiting, .taken:
                        return .failure(ReplyError.awaitedTwice)
                    }
                }
                if let ready { c.resume(with: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<Value, any Error>? in
                guard case .waiting(let c) = s else { return nil }
                s = .taken
                return c
            }
            waiter?.resume(throwing: CancellationError())
        }
    }
}

enum ReplyError: Error {
    case awaitedTwice
}
