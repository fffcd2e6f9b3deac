import NIOCore

/// Runs a task's jobs on one SwiftNIO event loop (a task executor preference, SE-0417), for a short
/// task on the path of the transports' writes: on Swift's pool such a task waits, at each resumption,
/// for a thread that decoding, gating and dispatching keep busy in chunks of a batch each (milliseconds),
/// while an event loop runs it between two reads. Only for tasks whose work between suspensions is small.
final class EventLoopTaskExecutor: TaskExecutor {
    private let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
