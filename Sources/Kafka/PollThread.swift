import Foundation
import ServiceLifecycle

/// Runs a client's poll loop on a thread of its own (librdkafka's poll and flush block: they must not
/// hold one of the cooperative pool's threads) and returns when the loop has returned. `requestStop`
/// must make the loop end: it is called when the calling task is cancelled, and on a service group's
/// graceful shutdown when `stopsOnGracefulShutdown`.
func runPollThread(
    named name: String, stopsOnGracefulShutdown: Bool, requestStop: @escaping @Sendable () -> Void,
    loop: @escaping @Sendable () -> Void
) async {
    await withTaskCancellationHandler {
        if stopsOnGracefulShutdown {
            await withGracefulShutdownHandler {
                await onThread(named: name, loop)
            } onGracefulShutdown: {
                requestStop()
            }
        } else {
            await onThread(named: name, loop)
        }
    } onCancel: {
        requestStop()
    }
}

private func onThread(named name: String, _ loop: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        let thread = Thread {
            loop()
            done.resume()
        }
        thread.name = name
        thread.start()
    }
}
