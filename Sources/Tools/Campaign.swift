import APNsProtocol
import Foundation
import LocalTime
import Redis
import Sender

/// A bulk campaign: one template job, one audience file, published as jobs `ID:token`.
public enum Campaign {
    /// One line of the audience: a token and, from a CSV's language column, its language.
    public struct Recipient: Sendable {
        public var token: DeviceToken
        public var language: String?
        /// The audience CSV's `user` and `time_zone` columns: who the audience rules count and where
        /// they read the clock (design §2.14); each job carries them (the template's when empty).
        public var user: String?
        public var timeZone: String?

        public init(token: DeviceToken, language: String?, user: String? = nil, timeZone: String? = nil) {
            self.token = token
            self.language = language
            self.user = user
            self.timeZone = timeZone
        }
    }

    public struct Audience: Sendable {
        public var recipients: [Recipient]
        /// Lines that were not a valid token (1-based line numbers, at most the first 20), and how many.
        public var badLines: [Int]
        public var badLineCount: Int
    }

    /// Reads an audience file: one hex token per line, or a CSV whose header names a `token` column and
    /// optionally a `language` (or `lang`) column.
    public static func readAudience(path: String) throws -> Audience {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CampaignError("cannot read the token file \(path)")
        }
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        var tokenColumn = 0
        var languageColumn: Int?
        var userColumn: Int?
        var zoneColumn: Int?
        var firstLine = 1
        if let header = lines.first, header.lowercased().contains("token") && header.contains(",") {
            let names = header.split(separator: ",", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces).lowercased()
            }
            guard let t = names.firstIndex(of: "token") else { throw CampaignError("\(path): the CSV header has no `token` column") }
            tokenColumn = t
            languageColumn = names.firstIndex(of: "language") ?? names.firstIndex(of: "lang")
            userColumn = names.firstIndex(of: "user")
            zoneColumn = names.firstIndex(of: "time_zone")
            lines.removeFirst()
            firstLine = 2
        }
        var audience = Audience(recipients: [], badLines: [], badLineCount: 0)
        audience.recipients.reserveCapacity(lines.count)
        for (i, line) in lines.enumerated() where !line.allSatisfy(\.isWhitespace) {
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            let tokenText = tokenColumn < fields.count ? fields[tokenColumn].trimmingCharacters(in: .whitespaces) : ""
            guard let token = try? DeviceToken(hex: tokenText) else {
                audience.badLineCount += 1
                if audience.badLines.count < 20 { audience.badLines.append(firstLine + i) }
                continue
            }
            func column(_ c: Int?) -> String? {
                guard let c, c < fields.count else { return nil }
                let value = fields[c].trimmingCharacters(in: .whitespaces)
                return value.isEmpty ? nil : value
            }
            audience.recipients.append(
                Recipient(token: token, language: column(languageColumn), user: column(userColumn), timeZone: column(zoneColumn)))
        }
        return audience
    }

    /// A template is a job without `id`, `token` and `campaign`: `{"app": …, "payload": {…}, "alerts": {…},
    /// "priority": …, "expiry": …}`; its other keys (`collapse_id`, `push_type`, `time_zone`, `transactional`,
    /// …) go into every job as given, and the decoder checks them there.
    public static func readTemplate(path: String) throws -> JSONValue {
        guard let data = FileManager.default.contents(atPath: path) else { throw CampaignError("cannot read the template \(path)") }
        let value: JSONValue
        do {
            value = try JSONParser.parse(Array(data))
        } catch {
            throw CampaignError("\(path): \(error)")
        }
        guard let members = value.objectValue else {
            throw CampaignError("\(path): a template is a JSON object (a job without id and token)")
        }
        for forbidden in ["id", "token", "campaign"] where members.contains(where: { $0.key == forbidden }) {
            throw CampaignError("\(path): a template must not set `\(forbidden)`: the publisher sets it per recipient")
        }
        guard value["app"]?.stringValue != nil else { throw CampaignError("\(path): missing `app` (the bundle id)") }
        guard value["payload"]?["aps"] != nil else { throw CampaignError("\(path): missing `payload` with an `aps` dictionary") }
        return value
    }

    /// The id of a campaign's job for one token: `ID:token` (hex, lower-case).
    public static func jobID(campaign: String, token: DeviceToken) -> String {
        PushNotification.campaignJobID(campaign: campaign, token: token)
    }

    /// The job message for one recipient: the template plus id `ID:token`, the token and the campaign.
    /// A CSV language picks `alerts[language]` as the alert here already.
    public static func job(template: JSONValue, campaign: String, recipient: Recipient) -> [UInt8] {
        guard case .object(var members) = template else { return [] }
        let hex = recipient.token.hex
        if let language = recipient.language, let alert = template["alerts"]?[language],
            let p = members.firstIndex(where: { $0.key == "payload" }), case .object(var payload) = members[p].value,
            let a = payload.firstIndex(where: { $0.key == "aps" }), case .object(var aps) = payload[a].value
        {
            if let i = aps.firstIndex(where: { $0.key == "alert" }) {
                aps[i].value = alert
            } else {
                aps.insert((key: "alert", value: alert), at: 0)
            }
            payload[a].value = .object(aps)
            members[p].value = .object(payload)
        }
        members.insert((key: "id", value: .string(jobID(campaign: campaign, token: recipient.token))), at: 0)
        members.insert((key: "token", value: .string(hex)), at: 2)
        members.append((key: "campaign", value: .string(campaign)))
        // The recipient's own user and zone win over the template's (the decoder refuses a key twice).
        for (key, value) in [("user", recipient.user), ("time_zone", recipient.timeZone)] {
            guard let value else { continue }
            members.removeAll { $0.key == key }
            members.append((key: key, value: .string(value)))
        }
        return JSONValue.object(members).serialized()
    }
}

extension Campaign {
    /// The furthest ahead `campaign publish --at` may schedule a start: its jobs wait in Redis until then,
    /// and a date months away is more likely a typo (a year, a month) than a plan.
    public static let maxScheduleAhead: Duration = .seconds(30 * 86_400)

    /// The start `--at` names, in epoch milliseconds: nil when there is none to set (no `--at`, or a past
    /// time with `nowIfPast`: the campaign starts now). A time that is not RFC 3339 with its zone, one in
    /// the past (without `nowIfPast`), or one more than ``maxScheduleAhead`` after `now` is an error that
    /// says what was given and what to do.
    public static func scheduledStart(at text: String?, now: Date = Date(), nowIfPast: Bool = false) throws(CampaignError) -> Int64? {
        guard let text else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = formatter.date(from: text) ?? fractional.date(from: text) else {
            throw CampaignError("--at: expected an RFC 3339 time with its zone, e.g. 2026-12-01T09:00:00Z, found \(text)")
        }
        let shown = formatter.string(from: now)
        if date < now {
            if nowIfPast { return nil }
            throw CampaignError(
                "--at: \(text) is in the past (it is \(shown) now): give a later time, or add --now-if-past to start the campaign now")
        }
        if date.timeIntervalSince(now) > Double(maxScheduleAhead.components.seconds) {
            throw CampaignError(
                "--at: \(text) is more than \(maxScheduleAhead.components.seconds / 86_400) days ahead (it is \(shown) now): "
                    + "publish closer to the start (the jobs wait in Redis until then)")
        }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }
}

extension Campaign {
    /// `--cap 1/24h`.
    public static func frequencyCap(_ text: String) throws(CampaignError) -> FrequencyCap {
        guard let cap = FrequencyCap(parsing: text) else {
            throw CampaignError("--cap: expected N/window with N in 1…10000 and a window of 1s…31d (s, m, h, d), e.g. 1/24h, found \(text)")
        }
        return cap
    }

    /// `--holdout 5%` (or `0.5%`, or `5`): basis points, 1…10 000.
    public static func holdoutBasisPoints(_ text: String) throws(CampaignError) -> Int {
        let number = text.hasSuffix("%") ? String(text.dropLast()) : text
        let basisPoints = Double(number).map { ($0 * 100).rounded() }
        guard let percent = Double(number), let basisPoints, percent.isFinite, abs(basisPoints - percent * 100) < 1e-6,
            (1...10_000).contains(basisPoints)
        else {
            throw CampaignError("--holdout: expected a share of 0.01%…100% (at most two decimals), e.g. 5%, found \(text)")
        }
        return Int(basisPoints)
    }

    /// `--at HH:MM` with `--local-time`.
    public static func localTime(_ at: String?) throws(CampaignError) -> String {
        guard let at else { throw CampaignError("--local-time: give the wall-clock time with --at, e.g. --at 09:00") }
        let parts = at.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[1].count == 2, (1...2).contains(parts[0].count), let h = Int(parts[0]), let m = Int(parts[1]),
            (0..<24).contains(h), (0..<60).contains(m), parts.allSatisfy({ $0.allSatisfy(\.isASCII) })
        else {
            throw CampaignError("--at with --local-time: expected a wall-clock time HH:MM (24-hour), e.g. 09:00, found \(at)")
        }
        return (h < 10 ? "0" : "") + "\(h):" + parts[1]
    }
}

extension Campaign {
    /// Held jobs of a local-time campaign due at one instant: those of every UTC offset whose wall clock
    /// reads the campaign's time then (two offsets a day apart share an instant: +14:00 and −10:00).
    public struct LocalWait: Sendable, Hashable, Encodable {
        public var dueMs: Int64
        /// `+02:00`, `-10:00`, `+05:45`.
        public var utcOffsets: [String]
        public var jobs: Int64

        public init(dueMs: Int64, utcOffsets: [String], jobs: Int64) {
            self.dueMs = dueMs
            self.utcOffsets = utcOffsets
            self.jobs = jobs
        }

        enum CodingKeys: String, CodingKey {
            case due
            case utcOffsets = "utc_offsets"
            case jobs
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            let formatter = ISO8601DateFormatter()
            try c.encode(formatter.string(from: Date(timeIntervalSince1970: Double(dueMs) / 1000)), forKey: .due)
            try c.encode(utcOffsets, forKey: .utcOffsets)
            try c.encode(jobs, forKey: .jobs)
        }
    }

    /// The instants a local-time campaign (`--at <time> --local-time`, published at `fromMs`) is due at,
    /// one per UTC offset of −12:00…+14:00 in quarter hours, merged where two offsets share one: what
    /// `campaign status` counts its held jobs at.
    public static func localTimeDues(_ time: String, fromMs: Int64) -> [(dueMs: Int64, utcOffsets: [String])] {
        guard let wall = WallTime(parsing: time) else { return [] }
        let from = Date(timeIntervalSince1970: Double(fromMs) / 1000)
        var byDue: [Int64: [String]] = [:]
        for quarter in (-12 * 4)...(14 * 4) {
            let seconds = quarter * 900
            guard let zone = TimeZone(secondsFromGMT: seconds) else { continue }
            let due = Int64((LocalDelivery.due(wall, after: from, in: zone).timeIntervalSince1970 * 1000).rounded(.up))
            let sign = seconds < 0 ? "-" : "+"
            let minutes = abs(seconds) / 60
            byDue[due, default: []].append(sign + String(format: "%02d:%02d", minutes / 60, minutes % 60))
        }
        return byDue.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }
}

public struct CampaignError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension Campaign {
    /// Where a campaign stands, as `campaign status`, `campaign wait` and `stats --campaign` report it
    /// (text and `--json`). Progress is per job (`jobs_settled` of `jobs`: each job counted once, whatever
    /// the redeliveries and however many `run` processes), unless the campaign was published before
    /// per-job progress existed (no `jobs` field): then it falls back to the message figures, which a
    /// redelivered message counts twice.
    public struct Status: Sendable, Hashable, Encodable {
        public enum Basis: String, Sendable, Hashable, Encodable {
            case jobs, messages
        }

        public var progress: CampaignProgress
        /// Settled count to wait for instead of the published one (`campaign wait --expect`).
        public var expected: Int64?
        /// Count messages even when per-job fields exist (`campaign wait --messages`: e.g. until a
        /// campaign published again has had every message settled, deduped).
        public var countsMessages: Bool
        /// The campaign's control state (`campaign cancel`, …; design §2.10), when the caller read it.
        public var control: CampaignControlState? { didSet { controlRead = true } }
        /// Jobs held in Redis now (paused, scheduled or paced: the held slots), when the caller read it.
        public var deferred: Int64 = 0
        /// Their bytes as the caps count them, and the campaign's cap (`redis.held_campaign_max_bytes`).
        public var heldBytes: Int64 = 0
        public var heldCapBytes: Int64?
        /// A local-time campaign's held jobs by the instant they are due, with the UTC offsets whose
        /// wall-clock time that is (design §2.17), when the caller read them.
        public var localWaiting: [LocalWait] = []
        /// Whether the caller read the control state (`state` and `deferred` are in the JSON only then).
        public private(set) var controlRead = false

        public init(_ progress: CampaignProgress, expected: Int64? = nil, countsMessages: Bool = false) {
            self.progress = progress
            self.expected = expected
            self.countsMessages = countsMessages
        }

        public var basis: Basis { countsMessages || progress.jobs == nil ? .messages : .jobs }
        /// What "all settled" means: `--expect`, else the distinct jobs published (`jobs`), else the
        /// messages published.
        public var target: Int64 { expected ?? (basis == .jobs ? progress.jobs : nil) ?? progress.published }
        public var settled: Int64 { basis == .jobs ? progress.jobsSettled : progress.messagesSettled }
        public var pending: Int64 { max(0, target - settled) }
        /// `settled ÷ target`, in 0…1 (nil while nothing is published).
        public var fraction: Double? { target > 0 ? min(1, Double(settled) / Double(target)) : nil }
        /// Everything published is settled and no publish is under way.
        public var isDone: Bool { target > 0 && settled >= target && !progress.isPublishing }

        /// The `--json` form: stable keys, numbers as numbers (`README.md` "Commands").
        public var json: String {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return String(decoding: (try? encoder.encode(JSONForm(self))) ?? Data("{}".utf8), as: UTF8.self)
        }

        public func encode(to encoder: any Encoder) throws { try JSONForm(self).encode(to: encoder) }

        struct JSONForm: Encodable, Sendable {
            let status: Status

            init(_ status: Status) { self.status = status }

            enum Keys: String, CodingKey {
                case campaign, state, deferred, basis, target, settled, pending, progress, publishing, done, jobs, messages
                case rejectedByCode = "rejected_by_code"
                case heldBytes = "held_bytes"
                case heldCapBytes = "held_cap_bytes"
                case localWaiting = "local_time_waiting"
            }

            func encode(to encoder: any Encoder) throws {
                let p = status.progress
                var c = encoder.container(keyedBy: Keys.self)
                try c.encode(p.id, forKey: .campaign)
                if status.controlRead {
                    try c.encode(status.control?.description ?? "running", forKey: .state)
                    try c.encode(status.deferred, forKey: .deferred)
                    try c.encode(status.heldBytes, forKey: .heldBytes)
                    if let cap = status.heldCapBytes { try c.encode(cap, forKey: .heldCapBytes) }
                    if !status.localWaiting.isEmpty { try c.encode(status.localWaiting, forKey: .localWaiting) }
                }
                try c.encode(status.basis, forKey: .basis)
                try c.encode(status.target, forKey: .target)
                try c.encode(status.settled, forKey: .settled)
                try c.encode(status.pending, forKey: .pending)
                if let f = status.fraction { try c.encode(f, forKey: .progress) } else { try c.encodeNil(forKey: .progress) }
                try c.encode(p.isPublishing, forKey: .publishing)
                try c.encode(status.isDone, forKey: .done)
                if let jobs = p.jobs {
                    try c.encode(
                        [
                            "published": jobs, "settled": p.jobsSettled, "pending": max(0, jobs - p.jobsSettled),
                            "accepted": p[.jobsAccepted], "rejected": p[.jobsRejected], "suppressed": p[.jobsSuppressed],
                            "dead_lettered": p[.jobsDeadLettered], "cancelled": p[.jobsCancelled],
                            "capped": p[.jobsCapped], "quiet": p[.jobsQuiet], "held_out": p[.jobsHeldOut],
                        ], forKey: .jobs)
                } else {
                    try c.encodeNil(forKey: .jobs)
                }
                var messages = ["published": p.published, "settled": p.messagesSettled]
                for field in CounterField.allCases where field != .received && field != .deadLetterFailures && field != .inFlightWaits {
                    messages[field.rawValue] = p.counters[field]
                }
                try c.encode(messages, forKey: .messages)
                var codes: [String: Int64] = [:]
                for (key, value) in p.counters.fields where key.hasPrefix("rejected:") {
                    codes[String(key.dropFirst("rejected:".count))] = value
                }
                try c.encode(codes, forKey: .rejectedByCode)
            }
        }
    }
}
