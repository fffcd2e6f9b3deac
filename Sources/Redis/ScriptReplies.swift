/// The gate script's answer for one job: one ASCII digit per job in the group's `codes` string
/// (`Scripts.gate`). The one definition of the codes: the script's Lua constants (`ADMITTED`, `DEDUPED`,
/// …) are generated from these raw values (``luaConstants``), and the reply is decoded with
/// ``init(digit:)``, so the Lua and the Swift side cannot drift apart.
enum GateAnswer: UInt8, CaseIterable, Sendable {
    /// Send it (a lease taken); the value, if any, is the token's language.
    case admitted = 1
    /// Settled as accepted before.
    case deduped = 2
    /// Another copy is in flight in this process (or earlier in this call).
    case inFlight = 3
    /// The token is suppressed and not registered since.
    case suppressed = 4
    /// Admitted by taking over a void lease (its value Swift sent back); the value, if any, is the language.
    case takenOver = 5
    /// Leased by another process; the value is the lease's (`<owner>/<call>/<expiry ms>`).
    case inFlightElsewhere = 6

    /// The Lua constant that names the code in the script.
    var luaName: String {
        switch self {
        case .admitted: "ADMITTED"
        case .deduped: "DEDUPED"
        case .inFlight: "IN_FLIGHT"
        case .suppressed: "SUPPRESSED"
        case .takenOver: "TAKEN_OVER"
        case .inFlightElsewhere: "IN_FLIGHT_ELSEWHERE"
        }
    }

    /// The code as the reply carries it: `table.concat` of the script's numbers, one ASCII digit each.
    var digit: UInt8 { UInt8(ascii: "0") + rawValue }

    /// The answer a reply's digit stands for; nil for any other byte.
    init?(digit: UInt8) {
        guard digit >= UInt8(ascii: "0") else { return nil }
        self.init(rawValue: digit - UInt8(ascii: "0"))
    }

    /// `local ADMITTED, DEDUPED, … = '1', '2', …`: prepended to the gate script. Strings, not numbers: the
    /// reply is their `table.concat`, which would format each number (a `printf` per job).
    static let luaConstants: String = {
        precondition(allCases.allSatisfy { $0.rawValue <= 9 }, "a gate answer is one digit in the reply")
        return "local " + allCases.map(\.luaName).joined(separator: ", ") + " = "
            + allCases.map { "'\($0.rawValue)'" }.joined(separator: ", ") + "\n"
    }()

    /// The decision for this answer and its value (see the cases; read only for the answers that carry
    /// one). `held`: the other process's lease value, for ``inFlightElsewhere`` (its owner's heartbeat
    /// is read next).
    func decision(value: @autoclosure () -> String?) -> (decision: GateDecision, held: String?) {
        switch self {
        case .admitted: return (.admitted(language: value()), nil)
        case .deduped: return (.deduped, nil)
        case .inFlight: return (.inFlight, nil)
        case .suppressed: return (.suppressed, nil)
        case .takenOver: return (.takenOver(language: value()), nil)
        case .inFlightElsewhere:
            let lease = value()
            return (.inFlightElsewhere(owner: lease.map(PipelineStore.leaseOwner(of:)) ?? "?"), lease)
        }
    }
}

/// Whether a settle part's dedup record was new: one ASCII character per add in the tag part's `flags`
/// (`Scripts.tagWrites`), read by the counters script and by Swift (``CounterWrites``) to count each
/// accepted job once. The scripts' Lua constants (`ADDED`, `NOT_ADDED`, `ADDED_BYTE`) are generated from
/// these raw values (``luaConstants``).
enum DedupAddFlag: UInt8, CaseIterable, Sendable {
    /// The SADD added the member: the job id was never accepted before.
    case added = 1
    /// The member was in the set already.
    case notAdded = 0

    /// The flag as the reply carries it: one ASCII digit.
    var digit: UInt8 { UInt8(ascii: "0") + rawValue }

    /// `local ADDED, NOT_ADDED, ADDED_BYTE = '1', '0', 49`: part of the scripts' helpers.
    static let luaConstants: String = {
        precondition(allCases.allSatisfy { $0.rawValue <= 9 }, "a dedup add flag is one digit in the reply")
        return "local ADDED, NOT_ADDED, ADDED_BYTE = '\(added.rawValue)', '\(notAdded.rawValue)', \(added.digit)\n"
    }()
}
