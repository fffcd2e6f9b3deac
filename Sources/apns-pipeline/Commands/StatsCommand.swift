import ArgumentParser
import Foundation
import Logging
import Pipeline
import Redis
import Tools

/// `apns-pipeline stats`: the pipeline's counters from Redis (`docs/design.md §4.1`: `{<p>}:stats`, the per-minute
/// `{<p>}:stats:<yyyyMMddHHmm>` buckets, `{<p>}:campaign:<id>`), with current rates, optionally refreshed
/// in place.
struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Show pipeline counters and rates per second from Redis.",
        discussion: """
            Totals come from {<prefix>}:stats. Rates come from the per-minute buckets: "last min/s" is the \
            last complete UTC minute ÷ 60, "now/s" the current minute so far ÷ the seconds elapsed in it. \
            Every process of the pipeline writes the same keys, so these are cluster-wide figures. \
            --json prints one JSON object (with --watch, one per line per refresh): stable keys, numbers as \
            numbers. Exit status: 0, or 1 when Redis cannot be read.
            """
    )

    @Option(help: "Take Redis's URL (or cluster nodes) and key prefix from this pipeline file.") var pipeline: String?
    @Option(help: "Redis URL: redis://[user:password@]host:port[/db].") var redis: String = RedisConfiguration.defaultURL
    @Option(help: "Redis Cluster nodes instead of --redis: host:port,host:port,… (any primaries; the rest are found).") var redisCluster:
        String?
    @Option(help: "Prefix of the Redis keys.") var prefix: String = RedisKeys.defaultPrefix
    @Option(help: "Also show this campaign's progress (<prefix>:campaign:<id>).") var campaign: String?
    @Flag(help: "Refresh in place until interrupted.") var watch = false
    @Option(help: "Seconds between refreshes with --watch.") var interval: Double = 1
    @Flag(help: "Print JSON (stable keys, numbers as numbers) instead of a table; with --watch, one object per line.") var json = false

    func validate() throws {
        guard interval > 0 else { throw ValidationError("--interval must be positive") }
    }

    func run() async throws {
        try await exitingOnError { try await show() }
    }

    private func show() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .error
            return handler
        }
        var target: RedisTarget
        var prefix = self.prefix
        if let pipeline {
            let config = try loadPipeline(pipeline)
            target = try config.redis.target()
            prefix = config.redis.prefix
        } else {
            target = try redisTarget(url: redis, cluster: redisCluster)
        }
        // A dashboard should say "unreachable" quickly rather than hang on a dead server.
        target.maximumWait = .seconds(2)
        let client = target.makeConnection()
        let redisDescription = target.redactedDescription
        let store = PipelineStore(client: client, configuration: PipelineStoreConfiguration(keyPrefix: prefix))
        let header = "apns-pipeline stats · \(redisDescription) · prefix \(prefix)"

        if json {
            repeat {
                do {
                    let line = try await Self.renderJSON(store: store, redis: redisDescription, prefix: prefix, campaign: campaign)
                    // Unbuffered: with --watch into a pipe, each object goes out as it is made.
                    FileHandle.standardOutput.write(Data((line + "\n").utf8))
                } catch {
                    FileHandle.standardError.write(Data("error: cannot read stats from \(redisDescription): \(error)\n".utf8))
                    if !watch {
                        await client.close()
                        throw ExitCode(1)
                    }
                }
                if watch { try? await Task.sleep(for: .milliseconds(Int64(interval * 1000))) }
            } while watch && !Task.isCancelled
            await client.close()
            return
        }

        if !watch {
            do {
                print(try await Self.render(store: store, header: header, campaign: campaign))
            } catch {
                await client.close()
                FileHandle.standardError.write(Data("error: cannot read stats from \(redisDescription): \(error)\n".utf8))
                throw ExitCode(1)
            }
            await client.close()
            return
        }

        let clearToEnd = "\u{1B}[J"
        let home = "\u{1B}[H"
        let clearLine = "\u{1B}[K"
        FileHandle.standardOutput.write(Data("\u{1B}[2J".utf8))
        while !Task.isCancelled {
            var screen: String
            do {
                screen = try await Self.render(store: store, header: header, campaign: campaign)
            } catch {
                screen = "\(header)\n\nRedis unreachable: \(error)\nretrying every \(interval) s…"
            }
            screen += "\n\n(refreshing every \(interval) s; Ctrl-C to stop)"
            let lines = screen.split(separator: "\n", omittingEmptySubsequences: false).map { $0 + clearLine }
            FileHandle.standardOutput.write(Data((home + lines.joined(separator: "\n") + clearToEnd).utf8))
            try? await Task.sleep(for: .milliseconds(Int64(interval * 1000)))
        }
        await client.close()
    }

    /// One screen: totals with rates, then the campaign's progress if asked.
    static func render(
        store: PipelineStore, header: String, campaign: String?, now: Int64 = PipelineStore.epochNow()
    ) async throws -> String {
        let stats = try await store.readStats(lastMinutes: 2, now: now)
        let progress: CampaignProgress? = if let campaign { try await store.readCampaign(campaign) } else { nil }
        return render(stats: stats, campaign: progress, header: header, now: now)
    }

    /// The `--json` form (README "Commands"): `time` (epoch s), `redis`, `prefix`, `totals` (every
    /// counter of `{<prefix>}:stats`, 0 when absent), `rejected_by_code`, `per_second` (`last_minute`: the
    /// last complete UTC minute ÷ 60; `current_minute`: the current minute so far ÷ its elapsed seconds),
    /// `minutes` (which minutes those are), and `campaign` (as `campaign status --json`) with --campaign.
    static func renderJSON(
        store: PipelineStore, redis: String, prefix: String, campaign: String?, now: Int64 = PipelineStore.epochNow()
    ) async throws -> String {
        let stats = try await store.readStats(lastMinutes: 2, now: now)
        let progress: CampaignProgress? = if let campaign { try await store.readCampaign(campaign) } else { nil }
        return json(stats: stats, campaign: progress, redis: redis, prefix: prefix, now: now)
    }

    static func json(stats: PipelineStats, campaign: CampaignProgress?, redis: String, prefix: String, now: Int64) -> String {
        let current = stats.minutes.last
        let previous = stats.minutes.count >= 2 ? stats.minutes[stats.minutes.count - 2] : nil
        let elapsed = max(1, now - (current?.start ?? now))
        var totals: [String: Int64] = [:]
        var last: [String: Double] = [:]
        var currentRates: [String: Double] = [:]
        for field in CounterField.allCases {
            totals[field.rawValue] = stats.totals[field]
            last[field.rawValue] = Double(previous?.counters[field] ?? 0) / 60
            currentRates[field.rawValue] = Double(current?.counters[field] ?? 0) / Double(elapsed)
        }
        var codes: [String: Int64] = [:]
        for (key, value) in stats.totals.fields where key.hasPrefix("rejected:") { codes[String(key.dropFirst("rejected:".count))] = value }
        // Broadcasts among each outcome (`broadcast:<outcome>`, design §4.1).
        var broadcasts: [String: Int64] = [:]
        for (key, value) in stats.totals.fields where key.hasPrefix("broadcast:") {
            broadcasts[String(key.dropFirst("broadcast:".count))] = value
        }
        struct Minutes: Encodable {
            var last: String?
            var current: String?
            var current_elapsed_s: Int64
        }
        struct Report: Encodable {
            var time: Int64, redis: String, prefix: String
            var totals: [String: Int64]
            var rejected_by_code: [String: Int64]
            var broadcasts_by_outcome: [String: Int64]
            var per_second: [String: [String: Double]]
            var minutes: Minutes
            var campaign: Campaign.Status?
        }
        let report = Report(
            time: now, redis: redis, prefix: prefix, totals: totals, rejected_by_code: codes, broadcasts_by_outcome: broadcasts,
            per_second: ["last_minute": last, "current_minute": currentRates],
            minutes: Minutes(last: previous?.minute, current: current?.minute, current_elapsed_s: elapsed),
            campaign: campaign.map { Campaign.Status($0) })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(report)) ?? Data("{}".utf8), as: UTF8.self)
    }

    static func render(stats: PipelineStats, campaign: CampaignProgress?, header: String, now: Int64) -> String {
        let current = stats.minutes.last
        let previous = stats.minutes.count >= 2 ? stats.minutes[stats.minutes.count - 2] : nil
        let elapsed = max(1, now - (current?.start ?? now))
        var out = "\(header)\n\(timestamp(now)) UTC\n\n"

        var rows: [[String]] = [["counter", "total", "last min/s", "now/s"]]
        func row(_ field: String, label: String? = nil) {
            let total = stats.totals.fields[field] ?? 0
            let last = Double(previous?.counters.fields[field] ?? 0) / 60
            let now = Double(current?.counters.fields[field] ?? 0) / Double(elapsed)
            rows.append([label ?? field, grouped(total), rate(last), rate(now)])
        }
        for field in CounterField.allCases {
            row(field.rawValue)
            if field == .rejected {
                // Per status, under `rejected`: any status seen in the totals or the recent minutes.
                var statuses = Set<String>()
                for counters in [stats.totals] + stats.minutes.map(\.counters) {
                    statuses.formUnion(counters.fields.keys.filter { $0.hasPrefix("rejected:") })
                }
                for key in statuses.sorted(by: { statusNumber($0) < statusNumber($1) }) {
                    row(key, label: "  \(key)")
                }
            }
        }
        // Broadcasts (jobs for a channel: one request each, reaching every subscribed device), when there
        // were any: the outcomes above include them.
        var broadcastFields = Set<String>()
        for counters in [stats.totals] + stats.minutes.map(\.counters) {
            broadcastFields.formUnion(counters.fields.keys.filter { $0.hasPrefix("broadcast:") })
        }
        for field in SettledOutcomeKind.allCases where broadcastFields.contains(PipelineStore.broadcastField(field)) {
            row(PipelineStore.broadcastField(field))
        }
        out += table(rows, rightAligned: [1, 2, 3])
        out +=
            "\nrates: last min = \(previous.map { "\($0.minute) UTC" } ?? "–") ÷ 60 s; now = \(current.map { "\($0.minute) UTC" } ?? "–") so far ÷ \(elapsed) s"

        if let campaign {
            // Per job (each job once, however often redelivered), beside the per-message figures.
            let status = Campaign.Status(campaign)
            func share(_ value: Int64) -> String {
                status.target > 0 ? String(format: "%.1f%%", Double(value) / Double(status.target) * 100) : "–"
            }
            let jobs = campaign.jobs != nil
            var rows: [[String]] = [
                ["campaign \(campaign.id)" + (campaign.isPublishing ? " (publishing)" : ""), "jobs", "of published", "messages"]
            ]
            rows.append(["published", jobs ? grouped(status.target) : "–", "", grouped(campaign.published)])
            rows.append(["settled", jobs ? grouped(campaign.jobsSettled) : "–", share(status.settled), grouped(campaign.messagesSettled)])
            let fields: [(CampaignField?, CounterField)] = [
                (.jobsAccepted, .accepted), (.jobsRejected, .rejected), (.jobsSuppressed, .suppressed), (nil, .deduped),
                (.jobsDeadLettered, .deadLettered), (.jobsCancelled, .cancelled), (.jobsCapped, .capped), (.jobsQuiet, .quiet),
                (.jobsHeldOut, .heldOut),
            ]
            for (jobField, messageField) in fields {
                let value = jobField.map { campaign[$0] }
                rows.append([
                    "  \(messageField.rawValue)", jobs ? value.map(grouped) ?? "" : "–", jobs ? value.map(share) ?? "" : "",
                    grouped(campaign.counters[messageField]),
                ])
            }
            rows.append(["pending", grouped(status.pending), "", ""])
            for field in [CounterField.replayed, .retried, .ambiguous] where campaign.counters[field] > 0 {
                rows.append([field.rawValue, "", "", grouped(campaign.counters[field])])
            }
            out += "\n\n" + table(rows, rightAligned: [1, 2, 3])
            if !jobs { out += "\n(published before per-job progress: progress counts messages, and a redelivered message counts again)" }
        }
        return out
    }

    static func table(_ rows: [[String]], rightAligned: Set<Int>) -> String {
        let columns = rows.map(\.count).max() ?? 0
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        var lines: [String] = []
        for (n, row) in rows.enumerated() {
            var cells: [String] = []
            for (i, cell) in row.enumerated() {
                let pad = String(repeating: " ", count: widths[i] - cell.count)
                cells.append(rightAligned.contains(i) ? pad + cell : cell + pad)
            }
            lines.append(cells.joined(separator: "   ").replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression))
            if n == 0 { lines.append(widths.map { String(repeating: "─", count: $0) }.joined(separator: "   ")) }
        }
        return lines.joined(separator: "\n")
    }

    static func grouped(_ value: Int64) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(c)
        }
        return (value < 0 ? "-" : "") + out
    }

    static func rate(_ value: Double) -> String { String(format: "%.1f", value) }

    static func statusNumber(_ key: String) -> Int { Int(key.dropFirst("rejected:".count)) ?? Int.max }

    static func timestamp(_ epoch: Int64) -> String {
        let stamp = RedisKeys.minuteStamp(epoch)  // yyyyMMddHHmm
        let c = Array(stamp)
        let second = epoch - (epoch / 60) * 60
        return
            "\(String(c[0..<4]))-\(String(c[4..<6]))-\(String(c[6..<8])) \(String(c[8..<10])):\(String(c[10..<12])):\(second < 10 ? "0" : "")\(second)"
    }
}
