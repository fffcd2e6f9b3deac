import APNsProtocol
import ArgumentParser
import Foundation
import Kafka
import Logging
import Operations
import Pipeline
import Redis
import Tools

/// `apns-pipeline campaign publish|status`.
struct CampaignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "Publish a bulk campaign to the jobs topic, follow its progress, pause, resume or cancel it.",
        subcommands: [Publish.self, Status.self, Wait.self, Pause.self, Resume.self, Pace.self, Cancel.self]
    )

    struct Publish: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish one job per token, with id CAMPAIGN:token. Publishing the same campaign again is safe (dedup).")

        @Option(help: "The pipeline file (Kafka and Redis settings).") var pipeline: String = "Pipelines/default.yaml"
        @Option(help: "Campaign id.") var campaign: String
        @Option(help: "Template JSON: a job without id, token and campaign.") var template: String
        @Option(help: "Tokens: one hex token per line, or a CSV with a token column and optional language, user and time_zone columns.")
        var tokens: String
        @Option(help: "Messages per produce batch.") var batch: Int = 5000
        @Option(
            help:
                "Scheduled start (RFC 3339, e.g. 2026-12-01T09:00:00Z): published now, nothing sent before. At most 30 days ahead. With --local-time: a wall-clock time, HH:MM."
        )
        var at: String?
        @Flag(help: "With --at HH:MM: each job goes out at that time on its recipient's clock (its time zone), over up to a day.")
        var localTime = false
        @Option(help: "Frequency cap of this campaign: at most N jobs per recipient per window, e.g. 1/24h (s, m, h, d).")
        var cap: String?
        @Option(help: "Holdout group: this share of recipients (by user, else token) is never sent the campaign, e.g. 5%.")
        var holdout: String?
        @Flag(help: "With --at: a time already past starts the campaign now instead of being refused.") var nowIfPast = false
        @Option(help: "Pace: at most this many jobs per second over every `run` process (as `campaign pace`).") var rate: Int?
        @Option(help: "Seconds to wait for every running process to confirm --at / --rate before publishing.")
        var controlTimeout: Double = 10
        @Flag(help: "No progress bar.") var quiet = false

        func run() async throws {
            let config = try loadPipeline(pipeline)
            let startAtMs = try validatedOptions()
            let rules = try audienceOptions()
            let (templateValue, recipients) = try readRecipients()
            let logger = quietLogger()
            let bootstrap = try config.kafka.resolvedBootstrapServers()
            let producer = try KafkaProducer.started(
                configuration: KafkaProducerConfiguration(bootstrapServers: bootstrap, properties: config.kafka.properties), logger: logger)
            let (redis, store) = try await openStore(config, logger: logger)
            if startAtMs != nil || rate != nil || rules.hasAudienceRules {
                try await applyScheduleAndPace(startAtMs: startAtMs, rules: rules, redis: redis, store: store)
            }
            let (done, new) = try await publish(
                recipients, template: templateValue, topic: config.kafka.jobsTopic, producer: producer, store: store)
            await producer.close()
            await redis.close()
            let again = done - new
            print(
                "published \(done) jobs of campaign \(campaign) to \(config.kafka.jobsTopic)\(again > 0 ? " (\(again) published before: not counted again in `jobs`)" : "")"
            )
        }

        /// The campaign id, `--at` and `--rate`, checked before anything is read or connected to.
        /// Returns the scheduled start (nil: now).
        private func validatedOptions() throws -> Int64? {
            guard !campaign.isEmpty, !campaign.contains(":") else { throw ValidationError("--campaign: a non-empty id without ':'") }
            let startAtMs: Int64?
            do {
                startAtMs = localTime ? nil : try Campaign.scheduledStart(at: at, nowIfPast: nowIfPast)
            } catch {
                throw ValidationError(error.description)
            }
            if let at, startAtMs == nil, !localTime {
                FileHandle.standardError.write(Data("campaign \(campaign): --at \(at) has passed: starting now (--now-if-past)\n".utf8))
            }
            if let rate, rate <= 0 || rate > 1_000_000 { throw ValidationError("--rate: 1…1000000 jobs per second") }
            return startAtMs
        }

        /// `--cap`, `--holdout` and `--local-time` as the campaign's control state (only those words set).
        private func audienceOptions() throws -> CampaignControlState {
            var state = CampaignControlState()
            do {
                if let cap { state.cap = try Campaign.frequencyCap(cap) }
                if let holdout { state.holdoutBasisPoints = try Campaign.holdoutBasisPoints(holdout) }
                if localTime {
                    state.localTime = try Campaign.localTime(at)
                    state.localTimeFromMs = Int64((Date().timeIntervalSince1970 * 1000).rounded())
                }
            } catch {
                throw ValidationError(error.description)
            }
            return state
        }

        /// The template and the audience, each token once; lines skipped and duplicates are warned about
        /// on stderr, since the count published would otherwise not match the file.
        private func readRecipients() throws -> (template: JSONValue, recipients: [Campaign.Recipient]) {
            let templateValue: JSONValue
            let audience: Campaign.Audience
            do {
                templateValue = try Campaign.readTemplate(path: template)
                audience = try Campaign.readAudience(path: tokens)
            } catch let e as CampaignError {
                throw ValidationError(e.description)
            }
            if audience.badLineCount > 0 {
                FileHandle.standardError.write(
                    Data(
                        "warning: \(audience.badLineCount) line(s) of \(tokens) are not device tokens (an even count of 16…200 hex digits) and are skipped (lines \(audience.badLines.map(String.init).joined(separator: ", "))\(audience.badLineCount > audience.badLines.count ? ", …" : ""))\n"
                            .utf8))
            }
            // One job per distinct token: a token listed twice would be one job id published twice.
            var seen = Set<String>()
            let recipients = audience.recipients.filter { seen.insert($0.token.hex).inserted }
            if recipients.count < audience.recipients.count {
                FileHandle.standardError.write(
                    Data(
                        "warning: \(audience.recipients.count - recipients.count) duplicate token(s) in \(tokens) are published once\n".utf8
                    ))
            }
            return (templateValue, recipients)
        }

        /// Before any job reaches Kafka, every running `run` process must hold the schedule / pace
        /// (design §2.12): else one could send a job early. Exits 2, having published nothing, when one
        /// does not confirm in time.
        private func applyScheduleAndPace(
            startAtMs: Int64?, rules: CampaignControlState, redis: any RedisConnection, store: PipelineStore
        ) async throws {
            let rate = rate
            let applied = try await store.changeControlAndWait(campaign: campaign, wait: .seconds(controlTimeout)) {
                var state = $0
                if let startAtMs { state.startAtMs = startAtMs }
                if let rate { state.rate = rate }
                if let cap = rules.cap { state.cap = cap }
                if let share = rules.holdoutBasisPoints { state.holdoutBasisPoints = share }
                if let time = rules.localTime {
                    state.localTime = time
                    state.localTimeFromMs = rules.localTimeFromMs
                }
                return state
            }
            if !applied.missing.isEmpty {
                await redis.close()
                FileHandle.standardError.write(
                    Data(
                        "campaign \(campaign): nothing published: \(applied.missing.count) running process(es) did not confirm the schedule/pace within \(controlTimeout) s: \(applied.missing.map(\.process).joined(separator: ", "))\n"
                            .utf8))
                throw ExitCode(2)
            }
            FileHandle.standardError.write(Data("campaign \(campaign): \(applied.state.description)\n".utf8))
        }

        /// Publishes the jobs in batches of `--batch`, each recorded in Redis once Kafka delivered it.
        /// Returns the jobs published and how many of them were new to the campaign.
        private func publish(
            _ recipients: [Campaign.Recipient], template templateValue: JSONValue, topic: String, producer: KafkaProducer,
            store: PipelineStore
        ) async throws -> (done: Int, new: Int) {
            let total = recipients.count
            // `campaign wait` is not done while this runs (publish_started_ms > publish_finished_ms).
            let markSets = try await store.beginPublish(campaign: campaign, expectedJobs: total)
            let progress = Progress(total: total, label: "publishing \(campaign)", enabled: !quiet)
            var done = 0
            var new = 0
            for start in stride(from: 0, to: total, by: batch) {
                let slice = recipients[start..<min(total, start + batch)]
                let messages = slice.map { r in
                    KafkaProducerMessage(
                        topic: topic, key: Array(r.token.hex.utf8),
                        value: Campaign.job(template: templateValue, campaign: campaign, recipient: r))
                }
                try await producer.sendBatch(messages)  // returns when every message is delivered
                new += try await store.recordPublished(
                    campaign: campaign, jobIDs: slice.map { Campaign.jobID(campaign: campaign, token: $0.token) }, markSets: markSets)
                done += messages.count
                progress.update(done)
            }
            try await store.finishPublish(campaign: campaign)
            progress.finish()
            return (done, new)
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a campaign's progress from Redis.",
            discussion: """
                Progress counts jobs: each job of the campaign once, by the outcome it first settled with, \
                however often its message was redelivered. The message figures (a redelivered message counts \
                again) are shown beside them. A campaign's keys expire redis.campaign_ttl_hours after its last \
                activity: a campaign Redis does not know (never published, or expired) is said so on stderr. Exit \
                status: 0, 1 on an error (Redis unreachable, bad pipeline file), 3 unknown or expired campaign.
                """)

        @Option(help: "The pipeline file (Redis settings).") var pipeline: String = "Pipelines/default.yaml"
        @Argument(help: "Campaign id.") var campaign: String
        @Flag(help: "Refresh every second until interrupted.") var watch = false
        @Flag(help: "Print one JSON object (with --watch: one per line, every second).") var json = false

        func run() async throws {
            try await exitingOnError {
                let config = try loadPipeline(pipeline)
                let (redis, store) = try await openStore(config, logger: quietLogger())
                repeat {
                    let progress = try await store.readCampaign(campaign)
                    if progress.counters.fields.isEmpty {
                        // No hash: never published, or expired with its keys (redis.campaign_ttl_hours).
                        let text =
                            "campaign \(campaign): unknown to Redis: never published, or expired (a campaign's keys live redis.campaign_ttl_hours = \(config.redis.effectiveCampaignTTLHours) h after its last activity)"
                        FileHandle.standardError.write(Data(((watch ? "\u{1B}[H\u{1B}[2J" : "") + text + "\n").utf8))
                        if !watch {
                            await redis.close()
                            throw ExitCode(3)
                        }
                        try await Task.sleep(for: .seconds(1))
                        continue
                    }
                    var status = Campaign.Status(progress)
                    status.control = try await store.readControl().campaigns[campaign]
                    let held = try await store.heldUsage(campaigns: [campaign])[campaign] ?? HeldUsage()
                    status.deferred = held.jobs
                    status.heldBytes = held.bytes
                    status.heldCapBytes = config.redis.heldCampaignMaxBytes
                    if held.jobs > 0, let time = status.control?.localTime, let fromMs = status.control?.localTimeFromMs {
                        let dues = Campaign.localTimeDues(time, fromMs: fromMs)
                        let counts = try await store.heldCounts(campaign: campaign, dues: dues.map(\.dueMs))
                        status.localWaiting = zip(dues, counts).compactMap { due, n in
                            n > 0 ? Campaign.LocalWait(dueMs: due.dueMs, utcOffsets: due.utcOffsets, jobs: n) : nil
                        }
                    }
                    // Written unbuffered: with --watch into a pipe, each line goes out as it is made.
                    let text = json ? status.json : (watch ? "\u{1B}[H\u{1B}[2J" : "") + CampaignCommand.render(status)
                    FileHandle.standardOutput.write(Data((text + "\n").utf8))
                    if watch { try await Task.sleep(for: .seconds(1)) }
                } while watch
                await redis.close()
            }
        }
    }

    struct Wait: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Wait until every published job of a campaign is settled (for scripts), showing progress.",
            discussion: """
                Done when the campaign's settled jobs reach its published jobs (`jobs_settled` = `jobs`) and \
                no `campaign publish` of it is under way: exact with any number of `run` processes. A campaign \
                Redis still does not know after --unknown-grace seconds (never published, or expired: its keys \
                live redis.campaign_ttl_hours after its last activity) ends the wait. Exit status: 0 done, 1 \
                error (Redis unreachable, bad pipeline file), 2 timed out, 3 unknown or expired campaign, 64 bad usage.
                """)

        @Option(help: "The pipeline file (Redis settings).") var pipeline: String = "Pipelines/default.yaml"
        @Argument(help: "Campaign id.") var campaign: String
        @Option(help: "Give up after this many seconds (exit 2).") var timeout: Double = 600
        @Option(help: "Seconds a campaign may stay unknown to Redis (a publish about to start) before the wait ends (exit 3).")
        var unknownGrace: Double = 10
        @Option(help: "Settled count to wait for (default: the campaign's published jobs).") var expect: Int?
        @Flag(
            help:
                "Count messages instead of jobs: wait until as many messages are settled as were published (e.g. a campaign published again, whose jobs are all done already, until its new messages are deduped)."
        )
        var messages = false
        @Flag(help: "No progress bar.") var quiet = false
        @Flag(help: "At the end, print the campaign's status as JSON (as `campaign status --json`).") var json = false

        func validate() throws {
            guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
            guard unknownGrace >= 0 else { throw ValidationError("--unknown-grace must be 0 or more") }
            if let expect, expect <= 0 { throw ValidationError("--expect must be positive") }
        }

        func run() async throws {
            try await exitingOnError {
                let config = try loadPipeline(pipeline)
                let (redis, store) = try await openStore(config, logger: quietLogger())
                let deadline = Date().addingTimeInterval(timeout)
                var progress: Progress?
                var status: Campaign.Status
                let unknownUntil = Date().addingTimeInterval(unknownGrace)  // past --timeout: the timeout speaks (exit 2)
                while true {
                    let read = try await store.readCampaign(campaign)
                    if read.counters.fields.isEmpty && Date() >= unknownUntil {
                        // No hash: never published, or expired with its keys. Waiting out --timeout would
                        // only hide that from the script (as `campaign status`: exit 3).
                        progress?.finish()
                        FileHandle.standardError.write(
                            Data(
                                "campaign \(campaign): unknown to Redis after \(unknownGrace) s: never published, or expired (a campaign's keys live redis.campaign_ttl_hours = \(config.redis.effectiveCampaignTTLHours) h after its last activity)\n"
                                    .utf8))
                        await redis.close()
                        throw ExitCode(3)
                    }
                    status = Campaign.Status(read, expected: expect.map(Int64.init), countsMessages: messages)
                    if progress == nil || Int64(progress!.total) != status.target {
                        // The target grows while a publish runs.
                        progress = Progress(total: Int(status.target), label: "settling \(campaign)", enabled: !quiet)
                    }
                    progress?.update(Int(min(status.settled, status.target)))
                    if status.isDone { break }
                    if Date() > deadline {
                        progress?.finish()
                        if json { print(status.json) }
                        let why = Self.whyNotDone(status)
                        FileHandle.standardError.write(
                            Data(
                                "campaign \(campaign): \(status.settled) of \(status.target) \(status.basis.rawValue) settled after \(timeout) s; \(why)\n"
                                    .utf8))
                        await redis.close()
                        throw ExitCode(2)
                    }
                    try await Task.sleep(for: .milliseconds(250))
                }
                progress?.finish()
                if json { print(status.json) }
                await redis.close()
            }
        }

        /// What a timed-out wait says next. A job count short while every published message has an
        /// outcome is most likely a count lost, not a job: on a Redis Cluster a `run` killed between a
        /// settle's two calls, or a fail-over, loses the count of jobs whose redelivery is then deduped
        /// (design §2.4; seen in ops/fleet's crash and fail-over runs).
        static func whyNotDone(_ status: Campaign.Status) -> String {
            let p = status.progress
            if p.isPublishing { return "a `campaign publish` of it has not finished" }
            if status.basis == .jobs, p.messagesSettled >= p.published {
                return "every published message has an outcome (\(p.messagesSettled) of \(p.published), redeliveries included): "
                    + "if no `run` holds work (lag 0), the job count is short, not the jobs — a `run` killed between a cluster "
                    + "settle's two calls, or a Redis fail-over, loses the count of jobs it settled (design §2.4); "
                    + "`campaign wait --messages` waits on messages instead"
            }
            return "is `apns-pipeline run` running?"
        }
    }

    static func render(_ status: Campaign.Status) -> String {
        let p = status.progress
        func row(_ name: String, _ jobs: String, _ messages: String) -> String {
            "  " + name.padding(toLength: 14, withPad: " ", startingAt: 0) + String(repeating: " ", count: max(0, 12 - jobs.count)) + jobs
                + String(repeating: " ", count: max(0, 12 - messages.count)) + messages
        }
        var lines = [
            "campaign \(p.id)" + (p.isPublishing ? " (publishing)" : "") + ": \(status.control?.description ?? "running")",
            row("", "jobs", "messages"),
        ]
        let jobs = p.jobs
        func j(_ f: CampaignField) -> String { jobs == nil ? "–" : "\(p[f])" }
        lines.append(row("published", jobs.map(String.init) ?? "–", "\(p.published)"))
        lines.append(row("accepted", j(.jobsAccepted), "\(p.counters[.accepted])"))
        lines.append(row("rejected", j(.jobsRejected), "\(p.counters[.rejected])"))
        lines.append(row("suppressed", j(.jobsSuppressed), "\(p.counters[.suppressed])"))
        lines.append(row("deduped", "", "\(p.counters[.deduped])"))
        lines.append(row("dead_lettered", j(.jobsDeadLettered), "\(p.counters[.deadLettered])"))
        if p.counters[.cancelled] > 0 || p[.jobsCancelled] > 0 || status.control?.cancelled == true {
            lines.append(row("cancelled", j(.jobsCancelled), "\(p.counters[.cancelled])"))
        }
        // The audience rules' outcomes, when a rule acted on the campaign (design §2.14).
        for (name, jobField, messageField) in [
            ("capped", CampaignField.jobsCapped, CounterField.capped), ("quiet", .jobsQuiet, .quiet), ("held_out", .jobsHeldOut, .heldOut),
        ] where p.counters[messageField] > 0 || p[jobField] > 0 {
            lines.append(row(name, j(jobField), "\(p.counters[messageField])"))
        }
        lines.append(row("settled", j(.jobsSettled), "\(p.messagesSettled)"))
        if status.deferred > 0 {
            let cap = status.heldCapBytes.map { " of its cap of \(mebibytes($0))" } ?? ""
            lines.append("  held in Redis: \(status.deferred) jobs, \(mebibytes(status.heldBytes))\(cap)")
        }
        if !status.localWaiting.isEmpty {
            lines.append("  waiting for their local \(status.control?.localTime ?? "time"):")
            let formatter = ISO8601DateFormatter()
            for wait in status.localWaiting {
                let due = formatter.string(from: Date(timeIntervalSince1970: Double(wait.dueMs) / 1000))
                lines.append("    UTC\(wait.utcOffsets.joined(separator: " / UTC"))  due \(due)  \(wait.jobs) jobs")
            }
        }
        let pct = status.fraction.map { String(format: "%.1f%%", $0 * 100) } ?? "–"
        lines.append(
            "  progress \(pct) of \(status.target) \(status.basis.rawValue)\(status.isDone ? ", done" : "")"
                + (jobs == nil ? " (published before per-job progress: messages redelivered count again)" : ""))
        return lines.joined(separator: "\n")
    }
}

/// Bytes as MiB with one decimal, for people.
func mebibytes(_ bytes: Int64) -> String { String(format: "%.1f MiB", Double(bytes) / 1_048_576) }

/// Runs a command body whose failures are exit status 1 with the error on stderr (scripts read the
/// status: README "Commands"); `ExitCode`s (2 for a timeout) and usage errors pass through.
func exitingOnError(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let e as ExitCode {
        throw e
    } catch let e as ValidationError {
        FileHandle.standardError.write(Data("error: \(e.message)\n".utf8))
        throw ExitCode(1)
    } catch {
        FileHandle.standardError.write(Data("error: \(error)\n".utf8))
        throw ExitCode(1)
    }
}

extension CampaignCommand {
    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Cancel a campaign: none of its jobs not yet written to a gateway connection is sent.",
            discussion: """
                Every job of the campaign not yet written to a connection — still in Kafka, at the gate, or \
                queued in a transport — settles as `cancelled` (counted per job in `jobs_cancelled`, part of \
                `jobs_settled`), including jobs published after this command. Final: there is no undo \
                (publish under a new campaign id). Returns once every running `run` process (heartbeat \
                present) has applied it: from then on none writes another job of the campaign. Exit status: \
                0 seen by every process, 1 error (Redis unreachable, bad pipeline file), 2 some process did \
                not confirm within --timeout (named on stderr; the cancel stays in force, and applies there \
                as soon as it reads Redis again).
                """)

        @OptionGroup var control: ControlOptions

        func run() async throws { try await control.apply(.cancel) }
    }

    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Pause a campaign: its jobs are held in Redis, not sent, until `campaign resume`.",
            discussion: """
                From the moment every running `run` process has applied it (this command returns then), the \
                gate holds every job of the campaign it reads — from Kafka, including jobs published later — in \
                Redis (`{<p>}:deferred:<campaign>`) instead of sending it: its message settles `deferred` (its \
                offset commits; the job is not counted in `jobs_settled`), so it takes no place in the in-flight \
                budget and holds up nothing else in its partition. Jobs the gate admitted before and not yet \
                written to a connection are held back by the transports the same way (what was already written \
                goes out). `campaign resume` publishes the held jobs to the jobs topic again; each is sent once \
                (dedup). Exit status as `campaign cancel`.
                """)

        @OptionGroup var control: ControlOptions

        func run() async throws { try await control.apply(.pause) }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Resume a paused campaign: its held jobs go back to the jobs topic and are sent, each once.",
            discussion: """
                Returns once every running `run` process has applied it; the held jobs are then published to \
                the jobs topic again by one process (in the background, ~1 000 per round trip) and sent as \
                usual. A cancelled campaign stays cancelled. Exit status as `campaign cancel`.
                """)

        @OptionGroup var control: ControlOptions

        func run() async throws { try await control.apply(.resume) }
    }

    struct Pace: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Pace a campaign: at most N of its jobs per second, over every `run` process together (0 removes it).",
            discussion: """
                Settable while the campaign runs. Each job takes the next slot of the campaign's clock in \
                Redis (one call per batch); a job whose slot is later is held in Redis and published again at \
                its slot (design §2.13). Other campaigns run at full speed. Exit status as `campaign cancel`.
                """)

        @OptionGroup var control: ControlOptions
        @Option(help: "Jobs per second (0: no pacing).") var rate: Int

        func validate() throws {
            guard rate >= 0 && rate <= 1_000_000 else { throw ValidationError("--rate: 0…1000000 jobs per second (0 removes pacing)") }
        }

        func run() async throws {
            let rate = rate
            try await control.apply(action: "pace") {
                var state = $0
                state.rate = rate > 0 ? rate : nil
                return state
            }
        }
    }

}

/// What `campaign cancel|pause|resume|pace` share: the campaign, the pipeline file, the wait for every
/// running process, the output.
struct ControlOptions: ParsableArguments {
    @Option(help: "The pipeline file (Redis settings).") var pipeline: String = "Pipelines/default.yaml"
    @Argument(help: "Campaign id.") var campaign: String
    @Option(help: "Seconds to wait for every running process to confirm.") var timeout: Double = 10
    @Flag(help: "Print one JSON object.") var json = false

    func validate() throws {
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        // As `campaign publish` (a job id is `<campaign>:<token>`): no such campaign can exist.
        guard !campaign.isEmpty, !campaign.contains(":") else { throw ValidationError("campaign: a non-empty id without ':'") }
    }

    /// The dashboard button's change (``CampaignAction``), from the command line.
    func apply(_ action: CampaignAction) async throws {
        try await apply(action: action.rawValue) { action.apply(to: $0) }
    }

    /// Changes the campaign's control state, then waits until every live `run` process applied it
    /// (design §2.10): one line of text, or with `--json` one object; exit 2 naming the processes that
    /// did not confirm within `timeout`.
    func apply(action: String, _ change: (CampaignControlState) -> CampaignControlState) async throws {
        try await exitingOnError {
            let config = try loadPipeline(pipeline)
            let (redis, store) = try await openStore(config, logger: quietLogger())
            let started = Date()
            let applied = try await store.changeControlAndWait(campaign: campaign, wait: .seconds(timeout), change)
            await redis.close()
            let (version, state, processes, missing) = (applied.version, applied.state, applied.processes, applied.missing)
            let elapsed = Date().timeIntervalSince(started)
            if json {
                let object: [String: Any] = [
                    "campaign": campaign, "action": action, "state": state.description, "version": version,
                    "processes": processes.count, "confirmed": processes.count - missing.count,
                    "missing": missing.map { ["owner": $0.owner, "process": $0.process] }, "seconds": (elapsed * 1000).rounded() / 1000,
                ]
                let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
                print(String(decoding: data, as: UTF8.self))
            } else if missing.isEmpty {
                print(
                    "campaign \(campaign): \(state.description) (\(action) seen by \(processes.count) running process\(processes.count == 1 ? "" : "es") in \(String(format: "%.2f", elapsed)) s)"
                )
            }
            if !missing.isEmpty {
                FileHandle.standardError.write(
                    Data(
                        "campaign \(campaign): \(action) recorded, but \(missing.count) of \(processes.count) running process(es) did not confirm within \(timeout) s: \(missing.map { "\($0.process) (owner \($0.owner))" }.joined(separator: ", ")); it applies there once they read Redis again\n"
                            .utf8))
                throw ExitCode(2)
            }
        }
    }
}
