import Foundation
import TestSupport
import Testing

@testable import Redis

/// The digit-coded replies of the scripts have one definition each (``GateAnswer``, ``DedupAddFlag``):
/// the Lua constants are generated from it and the Swift side decodes with it.
@Suite struct ScriptRepliesTests {
    @Test func eachGateAnswerDecodesToItsDecision() {
        let lease = "owner-b/call-7/1764000000000"
        let expected: [(GateAnswer, GateDecision, String?)] = [
            (.admitted, .admitted(language: "fr"), nil),
            (.deduped, .deduped, nil),
            (.inFlight, .inFlight, nil),
            (.suppressed, .suppressed, nil),
            (.takenOver, .takenOver(language: "fr"), nil),
            (.inFlightElsewhere, .inFlightElsewhere(owner: "owner-b"), lease),
        ]
        #expect(expected.map(\.0) == GateAnswer.allCases)
        for (answer, decision, held) in expected {
            let value = answer == .inFlightElsewhere ? lease : "fr"
            guard let decoded = GateAnswer(digit: answer.digit) else {
                Issue.record("digit \(answer.digit) of \(answer) not decoded")
                continue
            }
            #expect(decoded == answer)
            let (got, gotHeld) = decoded.decision(value: value)
            #expect(got == decision, "\(answer)")
            #expect(gotHeld == held, "\(answer)")
        }
        // Answers without a value: admitted with no language; in flight elsewhere with no lease value.
        #expect(GateAnswer.admitted.decision(value: nil).decision == .admitted(language: nil))
        #expect(GateAnswer.inFlightElsewhere.decision(value: nil).decision == .inFlightElsewhere(owner: "?"))
        // Any other byte is no answer (the gate throws on it).
        for byte in [UInt8(ascii: "0"), UInt8(ascii: "7"), UInt8(ascii: "9"), UInt8(ascii: "a"), 0, 1, 255] {
            #expect(GateAnswer(digit: byte) == nil, "\(byte)")
        }
    }

    @Test func theScriptsNameTheCodesThroughTheGeneratedConstants() {
        #expect(
            GateAnswer.luaConstants
                == "local ADMITTED, DEDUPED, IN_FLIGHT, SUPPRESSED, TAKEN_OVER, IN_FLIGHT_ELSEWHERE = '1', '2', '3', '4', '5', '6'\n")
        #expect(Scripts.gate.source.contains(GateAnswer.luaConstants))
        // No code is written as a number literal in the gate's Lua any more.
        for pattern in [#"codes\[[^\]]+\] = \d"#, #"code = \d"#, #"code == \d"#, #"== \d then codes"#] {
            #expect(Scripts.gate.source.range(of: pattern, options: .regularExpression) == nil, "\(pattern)")
        }
        #expect(DedupAddFlag.added.digit == UInt8(ascii: "1") && DedupAddFlag.notAdded.digit == UInt8(ascii: "0"))
        for script in [Scripts.tagWrites, Scripts.counters, Scripts.settle] {
            #expect(script.source.contains(DedupAddFlag.luaConstants))
            #expect(!script.source.contains("== 49") && !script.source.contains("string.rep('1'"))
        }
    }

    /// The constants as Lua reads them: each code comes back from the server as the digit Swift decodes.
    @Test(.enabled(if: RedisServer.available, RedisServer.skipReason))
    func luaRepliesTheDigitsSwiftDecodes() async throws {
        let server = try await RedisUnderTest(.single)
        defer { server.stop() }
        let client = try server.connection()
        let names = GateAnswer.allCases.map(\.luaName).joined(separator: ", ")
        let gate = RedisScript(GateAnswer.luaConstants + "return table.concat({ \(names) })")
        guard case .bulk(let codes) = try await client.eval(gate, keys: RedisArguments(), arguments: RedisArguments()) else {
            Issue.record("no bulk reply")
            return
        }
        #expect(codes.map { GateAnswer(digit: $0) } == GateAnswer.allCases)
        let flags = RedisScript(DedupAddFlag.luaConstants + "return { ADDED .. NOT_ADDED, string.byte(ADDED) == ADDED_BYTE }")
        let reply = try await client.eval(flags, keys: RedisArguments(), arguments: RedisArguments())
        #expect(reply.array?.first == .bulk([DedupAddFlag.added.digit, DedupAddFlag.notAdded.digit]))
        #expect(reply.array?.last?.integer == 1)
    }
}
