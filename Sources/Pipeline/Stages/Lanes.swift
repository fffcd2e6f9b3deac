import Foundation
import Jobs
import Logging
import Redis
import ServiceLifecycle

/// The bulk lane (design §1.2): intake (Kafka), then one gate worker per gate connection (`gateStores`)
/// that decodes a batch and makes its gate call, then the send stage, joined by bounded hand-offs and
/// run in one task group. One worker decoding (CPU here) overlaps another's round trip (CPU in Redis).
///
/// A graceful stop cancels the intake alone: the batches it already took are still gated and sent, and
/// the lane's `run` returns once they are. Cancelling `run` stops every stage at once (what they hold
/// stays unsettled: Kafka redelivers it).
struct BulkLane: Sendable {
    let intake: Intake
    let gate: Gate
    /// One gate worker on each, each on a connection of its own (so one call's large reply never waits
    /// behind another's).
    let gateStores: [PipelineStore]
    let dispatch: Dispatch
    /// Jobs the held slots had no room for, and their partitions.
    let capWaits: CapWaits
    /// Fired when the settler gave up: what is sent now could never be settled.
    let sendingStopped: StopSignal

    /// A decoded batch and its gate call's answer (or the call's failure, thrown by the send stage when
    /// the batch's turn comes).
    struct GateAnswer: Sendable {
        var decoded: DecodedBatch
        var call: GateCall
        var result: Result<Gate.Result, any Error>
    }

    func run() async throws {
        // Cancelled at the drain deadline, the lane's Redis calls (gate calls, written marks) are abandoned,
        // not waited for: their leases lapse unsettled, as after a crash.
        try await RedisWait.$endsOnCancellation.withValue(true) { try await stages() }
    }

    private func stages() async throws {
        let work = BatchHandoff<GateWork>(capacity: 2)
        let answered = BatchHandoff<GateAnswer>(capacity: gateStores.count)
        // Batches taken by a gate worker and not yet sent: the calls in flight (one per worker), as many
        // answered and waiting for the send stage, and the one it sends. The gate runs that far ahead of
        // sending (running less far ahead cost binary runs ~10 % of their rate: benchmarks §7.13), and
        // what `SendOrder` holds back is bounded by it.
        let ahead = InFlightBudget(capacity: 2 * gateStores.count + 1)
        let regates = Regates()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { work.finish() }
                await cancelWhenGracefulShutdown { await intake.run(into: work) }
            }
            group.addTask {
                defer { answered.finish() }
                await withDiscardingTaskGroup { workers in
                    for store in gateStores {
                        workers.addTask { await gateWorker(store: store, from: work, into: answered, ahead: ahead) }
                    }
                }
            }
            group.addTask { await regates.run { await work.put(.again($0)) } }
            group.addTask { await capWaits.run { await work.put(.again($0)) } }
            // The send stage. The intake's batches are sent in the order they were decoded, whatever order
            // their gate calls finish in, so one token's jobs keep their order. A failure here (a gate
            // call's, when Redis is gone longer than the client waits) ends the group: the stages before
            // it are cancelled, and what they hold stays unsettled.
            var order = SendOrder<GateAnswer>()
            sending: for await answer in answered.batches {
                for next in order.arrived(answer, intakeOrder: answer.decoded.intakeOrder) {
                    if sendingStopped.isFired { break sending }
                    try await send(next, regates: regates)
                    ahead.release(1)
                }
            }
            for next in order.rest() where !sendingStopped.isFired {
                try await send(next, regates: regates)
            }
            // Everything taken was sent (or the settler gave up): the other stages end now.
            group.cancelAll()
        }
    }

    private func send(_ answer: GateAnswer, regates: Regates) async throws {
        let g = GatedBatch(decoded: answer.decoded, call: answer.call, gated: try answer.result.get())
        let left = try await dispatch.send(g, lane: .bulk)
        if let retry = left.regate { regates.add(retry) }
        if let full = left.heldFull { capWaits.add(full) }
        if g.decoded.fromCapWaits { capWaits.retried(g.decoded) }
    }

    /// A gate worker: takes the next batch while the lane's bound has room, decodes it (a batch from
    /// Kafka), makes its gate call on its own connection, and hands the batch on with the answer. Two copies of one job id in batches
    /// gated at once are safe: Redis runs the two scripts one after the other, each call's leases carry
    /// its own call id, so the second finds the first's lease and answers "in flight" (GateOverlapTests).
    /// A failed call is handed on too, and the worker ends: the send stage throws it, ending the lane.
    private func gateWorker(
        store: PipelineStore, from work: BatchHandoff<GateWork>, into answered: BatchHandoff<GateAnswer>,
        ahead: InFlightBudget
    ) async {
        let templates = JobTemplates()
        var batches = work.sharedBatches.makeAsyncIterator()
        while await ahead.acquire(1), let next = await batches.next() {
            let d =
                switch next {
                case .taken(let batch, let order): intake.decode(batch, intakeOrder: order, templates: templates)
                case .again(let batch): batch
                }
            let call = dispatch.marks.newCall()
            let result: Result<Gate.Result, any Error>
            do {
                result = .success(try await gate.decide(d, call: call.id, store: store))
            } catch {
                result = .failure(error)
            }
            await answered.put(GateAnswer(decoded: d, call: call, result: result))
            if case .failure = result { return }
        }
    }
}

/// The priority lane (design §1.4): its consumer's batches (whatever came since the last one: never
/// waited for to fill), its own budget, one gate call at a time on its own connection, then the
/// transports' priority queues. Settles through the same settler as the bulk lane.
struct PriorityLane: Sendable {
    let intake: Intake
    let gate: Gate
    let store: PipelineStore
    /// The lane's "written" marks, set while its batches are gated.
    let markStore: PipelineStore
    let dispatch: Dispatch
    /// Jobs of an app's `max_rate` the held slots had no room for, and their partitions.
    let capWaits: CapWaits
    let sendingStopped: StopSignal
    let logger: Logger

    func run() async throws {
        // As the bulk lane's: cancelled, its Redis calls are abandoned.
        try await RedisWait.$endsOnCancellation.withValue(true) { try await stages() }
    }

    private func stages() async throws {
        let decoded = BatchHandoff<DecodedBatch>(capacity: 2)
        let regates = Regates()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { decoded.finish() }
                await cancelWhenGracefulShutdown { await intake.run(into: decoded) }
            }
            group.addTask { await regates.run { await decoded.put($0) } }
            group.addTask { await capWaits.run { await decoded.put($0) } }
            for await d in decoded.batches {
                if sendingStopped.isFired { break }
                let call = dispatch.marks.newCall()
                let gateStart = ContinuousClock.now
                // The batch's "written" mark is set while it is gated, on a connection of its own (design
                // §1.4): one Redis wait instead of two before a priority job can be written.
                // Refused (the heartbeat lapsed since the call was issued), the send stage counts the
                // call's jobs `ambiguous` first (`WrittenMarks.countLapsed`).
                async let marked = markStore.markWritten(call: call.id, heartbeat: call.heartbeat)
                let gated = try await gate.decide(d, call: call.id, store: store)
                let mark: WrittenMarkState = try await marked ? .set : .lapsed
                if logger.logLevel <= .debug {
                    logger.debug(
                        "priority batch gated",
                        metadata: ["count": "\(d.jobs.count)", "gate_ms": "\((ContinuousClock.now - gateStart).milliseconds)"])
                }
                let left = try await dispatch.send(GatedBatch(decoded: d, call: call, gated: gated), lane: .priority, mark: mark)
                if let retry = left.regate { regates.add(retry) }
                if let full = left.heldFull { capWaits.add(full) }
                if d.fromCapWaits { capWaits.retried(d) }
                if logger.logLevel <= .debug, let t = d.messages.first?.timestampMilliseconds {
                    logger.debug(
                        "priority batch handed to the transports",
                        metadata: [
                            "count": "\(d.jobs.count)", "publish_to_handoff_ms": "\(Int64(Date().timeIntervalSince1970 * 1000) - t)",
                        ])
                }
            }
            group.cancelAll()
        }
    }
}
