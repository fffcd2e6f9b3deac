import Foundation
import Redis
import TestSupport
import Testing

private let app = "com.example.shop"
private func token(_ n: Int) -> String { String(format: "%064x", n) }

/// `run` keeps more than one gate call in flight, each on a connection of its own (issue 14): two batches
/// of one process gated at the same time must still admit each job id once. Redis runs the two scripts
/// one after the other, and each call's leases carry that call's id, so the call that comes second finds
/// the first's lease and answers "in flight", whichever of the two it is.
@Suite(.enabled(if: RedisServer.available, RedisServer.skipReason))
struct GateOverlapTests {
    /// Two stores of one owner (one process), each on its own connection, gating batches that share
    /// job ids at the same time, many rounds: every shared id is admitted by exactly one of the calls.
    @Test(arguments: RedisTestTarget.allCases)
    func concurrentGateCallsOfOneProcessAdmitEachJobOnce(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let configuration = PipelineStoreConfiguration(
            inFlightLease: .seconds(600), leaseOwner: "one-process", ownerHeartbeat: .seconds(600))
        let first = PipelineStore(client: try server.connection(), configuration: configuration)
        let second = PipelineStore(client: try server.connection(), configuration: configuration)
        try await first.beat()
        let rounds = 20
        let shared = 200
        var admittedTwice: [String] = []
        var admittedByFirst = 0
        var admittedBySecond = 0
        for round in 0..<rounds {
            // Each batch: the shared ids (the copies) mixed with ids of its own, in a different order.
            let common = (0..<shared).map { GateRequest(jobID: "r\(round)-shared-\($0)", app: app, tokenHex: token($0 % 37)) }
            let own1 = (0..<50).map { GateRequest(jobID: "r\(round)-a-\($0)", app: app, tokenHex: token($0)) }
            let own2 = (0..<50).map { GateRequest(jobID: "r\(round)-b-\($0)", app: app, tokenHex: token($0)) }
            let batch1 = own1 + common
            let batch2 = common.reversed() + own2
            async let d1 = first.gate(batch1)
            async let d2 = second.gate(batch2)
            let (decisions1, decisions2) = try await (d1, d2)
            var admitted: [String: Int] = [:]
            for (request, decision) in Array(zip(batch1, decisions1)) + Array(zip(batch2, decisions2)) {
                switch decision {
                case .admitted: admitted[request.jobID, default: 0] += 1
                case .inFlight: admitted[request.jobID, default: 0] += 0
                default: Issue.record("unexpected decision \(decision) for \(request.jobID)")
                }
            }
            for (id, n) in admitted where n != 1 { admittedTwice.append("\(id): \(n)") }
            admittedByFirst += zip(batch1, decisions1).filter { $0.0.jobID.contains("shared") && $0.1 == .admitted(language: nil) }.count
            admittedBySecond += zip(batch2, decisions2).filter { $0.0.jobID.contains("shared") && $0.1 == .admitted(language: nil) }.count
            #expect(admitted.count == shared + 100)
        }
        #expect(admittedTwice.isEmpty, "job ids admitted other than once: \(admittedTwice.prefix(10))")
        #expect(admittedByFirst + admittedBySecond == rounds * shared)
        await first.client.close()
        await second.client.close()
    }

    /// The take-over path with two calls at once: a dead process's leases are taken over by one call,
    /// and the other call (same process) finds them in flight.
    @Test(arguments: RedisTestTarget.allCases)
    func concurrentTakeOverOfADeadOwnersLeaseHappensOnce(_ target: RedisTestTarget) async throws {
        let server = try await RedisUnderTest(target)
        defer { server.stop() }
        let dead = PipelineStore(
            client: try server.connection(),
            configuration: PipelineStoreConfiguration(
                inFlightLease: .seconds(600), leaseOwner: "dead-process", ownerHeartbeat: .seconds(600)))
        let configuration = PipelineStoreConfiguration(
            inFlightLease: .seconds(600), leaseOwner: "live-process", ownerHeartbeat: .seconds(600))
        let first = PipelineStore(client: try server.connection(), configuration: configuration)
        let second = PipelineStore(client: try server.connection(), configuration: configuration)
        let jobs = (0..<100).map { GateRequest(jobID: "j\($0)", app: app, tokenHex: token($0 % 13)) }
        try await dead.beat()
        #expect(try await dead.gate(jobs).allSatisfy { $0 == .admitted(language: nil) })
        // It dies between gate and settle: its heartbeat is gone, its leases stay.
        try await dead.endHeartbeat()
        try await first.beat()
        async let d1 = first.gate(jobs)
        async let d2 = second.gate(Array(jobs.reversed()))
        let (decisions1, decisions2) = try await (d1, d2)
        var takenOver: [String: Int] = [:]
        for (request, decision) in Array(zip(jobs, decisions1)) + Array(zip(jobs.reversed(), decisions2)) {
            switch decision {
            case .takenOver: takenOver[request.jobID, default: 0] += 1
            case .inFlight: takenOver[request.jobID, default: 0] += 0
            default: Issue.record("unexpected decision \(decision) for \(request.jobID)")
            }
        }
        #expect(takenOver.count == jobs.count)
        #expect(takenOver.values.allSatisfy { $0 == 1 }, "taken over other than once: \(takenOver.filter { $0.value != 1 })")
        await dead.client.close()
        await first.client.close()
        await second.client.close()
    }
}
