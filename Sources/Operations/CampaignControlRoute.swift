import Foundation
import Logging
import NIOHTTP1
import Redis

/// What the dashboard's campaign buttons do: the same change as `campaign pause`, `resume` and `cancel`
/// (design §2.10), sent as `POST /api/campaigns/<id>/<action>`.
public enum CampaignAction: String, Sendable, CaseIterable {
    case pause, resume, cancel

    /// The state after the action at `nowMs`. A cancelled campaign stays cancelled (resume changes nothing
    /// there); a cancel records when it was first made (its entry expires a retention later, design §2.10).
    public func apply(to state: CampaignControlState, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> CampaignControlState {
        var state = state
        switch self {
        case .pause: state.paused = true
        case .resume: state.paused = false
        case .cancel:
            if !state.cancelled { state.cancelledAtMs = nowMs }
            state.cancelled = true
        }
        return state
    }
}

/// `POST /api/campaigns/<id>/<action>`: changes the campaign's control state in Redis, then waits (up
/// to ``confirmationWait``) until every running `run` process has applied it, as the CLI does, and
/// answers JSON `{campaign, action, state, version, processes, confirmed}`. A process that has not
/// confirmed by then still applies the change at its next poll of Redis (every 250 ms).
///
/// Only served with `metrics.control_token` set, and only to that token (not the read token,
/// `metrics.auth_token`): a button that stops a campaign must not be open to whoever reaches the port or
/// reads the metrics (``OperationsServer`` answers 403 without it, 401 to another token). Every action
/// is logged at notice with the peer, the action and the campaign, and how it ended.
public struct CampaignControlRoute: Sendable {
    let store: PipelineStore
    let confirmationWait: Duration

    /// Long enough for a process polling every 250 ms on a loaded machine; a process that misses it
    /// still applies the change (the answer says how many confirmed).
    public static let defaultConfirmationWait: Duration = .seconds(3)

    public init(store: PipelineStore, confirmationWait: Duration = defaultConfirmationWait) {
        self.store = store
        self.confirmationWait = confirmationWait
    }

    /// The campaign id and the action named by a path under `/api/campaigns/`, or why not. The id is
    /// percent-decoded (the page encodes it with `encodeURIComponent`); it must be 1…128 bytes, as a
    /// job's `campaign` (design §3.1), without control characters.
    struct BadPath: Error {
        var problem: String
    }

    static func parse(_ path: String) -> Result<(campaign: String, action: CampaignAction), BadPath> {
        let rest = path.dropFirst(prefix.count)
        guard let slash = rest.lastIndex(of: "/") else {
            return .failure(BadPath(problem: "expected /api/campaigns/<id>/pause|resume|cancel"))
        }
        guard let action = CampaignAction(rawValue: String(rest[rest.index(after: slash)...])) else {
            return .failure(BadPath(problem: "unknown action: expected pause, resume or cancel"))
        }
        guard let bytes = percentDecoded(rest[..<slash]), (1...128).contains(bytes.count),
            !bytes.contains(where: { $0 < 0x20 || $0 == 0x7F })
        else {
            return .failure(BadPath(problem: "campaign id: 1…128 bytes, percent-encoded, no control characters"))
        }
        return .success((String(decoding: bytes, as: UTF8.self), action))
    }

    static let prefix = "/api/campaigns/"

    /// RFC 3986 percent-decoding; nil for a malformed escape or bytes that are not UTF-8.
    static func percentDecoded(_ text: Substring) -> [UInt8]? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self) == nil ? nil : bytes
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    func perform(campaign: String, action: CampaignAction, peer: String, logger: Logger) async -> OperationsServer.Response {
        let who: Logger.Metadata = ["peer": "\(peer)", "action": "\(action.rawValue)", "campaign": "\(campaign)"]
        do {
            let before = try await store.readControl().campaigns[campaign] ?? CampaignControlState()
            if action == .resume, before.cancelled {
                logger.notice("campaign control refused: the campaign is cancelled", metadata: who)
                return .json(.conflict, ["error": .string("campaign \(campaign) is cancelled: that is final (publish under a new id)")])
            }
            let change = try await store.changeControlAndWait(campaign: campaign, wait: confirmationWait) { action.apply(to: $0) }
            let confirmed = change.processes.count - change.missing.count
            logger.notice(
                "campaign control: \(action.rawValue)",
                metadata: who.merging([
                    "state": "\(change.state.description)", "confirmed": "\(confirmed)", "processes": "\(change.processes.count)",
                ]) { a, _ in a })
            return .json(
                .ok,
                [
                    "campaign": .string(campaign), "action": .string(action.rawValue), "state": .string(change.state.description),
                    "version": .int(change.version), "processes": .int(Int64(change.processes.count)),
                    "confirmed": .int(Int64(confirmed)),
                ])
        } catch {
            logger.notice(
                "campaign control failed: Redis did not take the change", metadata: who.merging(["error": "\(error)"]) { a, _ in a })
            return .json(.serviceUnavailable, ["error": .string("Redis did not take the change: \(error)")])
        }
    }
}

extension OperationsServer.Response {
    /// A flat JSON object (strings and integers: all the control route answers with).
    enum JSONScalar {
        case string(String)
        case int(Int64)
    }

    static func json(_ status: HTTPResponseStatus, _ object: KeyValuePairs<String, JSONScalar>) -> Self {
        func quoted(_ text: String) -> String {
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case _ where scalar.value < 0x20:
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
        let body = object.map { key, value in
            let text: String
            switch value {
            case .string(let s): text = quoted(s)
            case .int(let n): text = String(n)
            }
            return quoted(key) + ":" + text
        }.joined(separator: ",")
        return Self(status, "application/json", Array(("{" + body + "}\n").utf8))
    }
}
