import APNsProtocol
import ArgumentParser
import Foundation
import Kafka
import Logging
import Pipeline
import Redis

/// `apns-pipeline campaign publish|status`.
struct CampaignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "Publish a bulk campaign to the jobs topic, or follow its progress.",
        subcommands: [Publish.self, Status.self, Wait.self]
    )

    struct Publish: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish one job per token, with id CAMPAIGN:token. Publishing the same campaign again is safe (dedup).")

        @Option(help: "The pipeline file (Kafka and Redis settings).") var pipeline: String = "Pipelines/default.yaml"
        @Option(help: "Campaign id.") var campaign: String
        @Option(help: "Template JSON: a job without id, token and campaign.") var template: String
        @Option(help: "Tokens: one hex token per line, or a CSV with a token column and an optional language column.") var tokens: String
        @Option(help: "Messages per produce batch.") var batch: Int = 5000
        @Flag(help: "No progress bar.") var quiet = false

        func run() async throws {
            let config = try loadPipeline(pipeline)
            guard !campaign.isEmpty, !campaign.contains(":") else { throw ValidationError("--campaign: a non-empty id without ':'") }
            let templateValue: JSONValue
            let audience: Campaign.Audience
            do {
                templateValue = try Campaign.readTemplate(path: template)
                audience = try Campaign.readAudience(path: tokens)
            } catch let e as CampaignError {
                throw ValidationError(e.description)
            }
            if audience.badLineCount > 0 {
                FileHandle.standardError.write(Data(
                    "warning: \(audience.badLineCount) line(s) of \(tokens) are not 64-hex-character tokens and are skipped (lines \(audience.badLines.map(String.init).joined(separator: ", "))\(audience.badLineCount > audience.badLines.count ? ", …" : ""))\n".utf8))
            }
            let logger = quietLogger()
            let bootstrap = try config.kafka.resolvedBootstrapServers()
            let producer = try KafkaProducer(
                configuration: KafkaProducerConfiguration(bootstrapServers: bootstrap, properties: config.kafka.properties), logger: logger)
            let (redis, store) = try await openStore(config, logger: logger)

            let total = audience.recipients.count
            let progress = Progress(total: total, label: "publishing \(campaign)", enabled: !quiet)
            var done = 0
            for start in stride(from: 0, to: total, by: batch) {
                let slice = audience.recipients[start..<min(total, start + batch)]
                let messages = slice.map { r in
                    KafkaProducerMessage(
                        topic: config.kafka.jobsTopic, key: Array(r.token.hex.utf8),
                        value: Campaign.job(template: templateValue, campaign: campaign, recipient: r))
                }
                try await producer.sendBatch(messages)  // returns when every message is delivered
                try await store.incrementPublished(campaign: campaign, by: messages.count)
                done += messages.count
                progress.update(done)
            }
            progress.finish()
            await producer.close()
            await redis.close()
            print("published \(done) jobs of campaign \(campaign) to \(config.kafka.jobsTopic)")
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a campaign's counters from Redis.")

        @Option(help: "The pipeline file (Redis settings).") var pipeline: String = "Pipelines/default.yaml"
        @Argument(help: "Campaign id.") var campaign: String
        @Flag(help: "Refresh every second until interrupted.") var watch = false

        func run() async throws {
            let config = try loadPipeline(pipeline)
            let (redis, store) = try await openStore(config, logger: quietLogger())
            repeat {
                let p = try await store.readCampaign(campaign)
                let table = CampaignCommand.render(p)
                if watch { print("\u{1B}[H\u{1B}[2J", terminator: "") }
                print(table)
                if watch { try await Task.sleep(for: .seconds(1)) }
            } while watch
            await redis.close()
        }
    }

    struct Wait: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Wait until every published job of a campaign is settled (for scripts), showing progress.")

        @Option(help: "The pipeline file (Redis settings).") var pipeline: String = "Pipelines/default.yaml"
        @Argument(help: "Campaign id.") var campaign: String
        @Option(help: "Give up after this many seconds (exit 1).") var timeout: Double = 600
        @Option(help: "Settled count to wait for (default: the campaign's `published`).") var expect: Int?

        func run() async throws {
            let config = try loadPipeline(pipeline)
            let (redis, store) = try await openStore(config, logger: quietLogger())
            let deadline = Date().addingTimeInterval(timeout)
            var progress: Progress?
            while true {
                let p = try await store.readCampaign(campaign)
                let target = Int(expect.map(Int64.init) ?? p.published)
                let settled = Int(CampaignCommand.settled(p))
                if progress == nil { progress = Progress(total: target, label: "settling \(campaign)", enabled: true) }
                progress?.update(min(settled, target))
                if target > 0 && settled >= target { break }
                if Date() > deadline {
                    progress?.finish()
                    throw ValidationError("campaign \(campaign): \(settled) of \(target) settled after \(Int(timeout)) s; is `apns-pipeline run` running?")
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            progress?.finish()
            await redis.close()
        }
    }

    static func settled(_ p: CampaignProgress) -> Int64 {
        ["accepted", "rejected", "suppressed", "deduped", "dead_lettered"].reduce(0) { $0 + (p.counters.fields[$1] ?? 0) }
    }

    static func render(_ p: CampaignProgress) -> String {
        let c = p.counters.fields
        let published = p.published
        let fields = ["accepted", "rejected", "suppressed", "deduped", "dead_lettered"]
        let settled = fields.reduce(0) { $0 + (c[$1] ?? 0) }
        func row(_ name: String, _ value: String) -> String {
            "  " + name.padding(toLength: 14, withPad: " ", startingAt: 0) + String(repeating: " ", count: max(0, 12 - value.count)) + value
        }
        var lines = ["campaign \(p.id)", row("published", "\(published)")]
        for f in fields { lines.append(row(f, "\(c[f] ?? 0)")) }
        let pct = published > 0 ? Double(settled) / Double(published) * 100 : 0
        lines.append(row("settled", String(format: "%.1f%%", pct)))
        return lines.joined(separator: "\n")
    }
}
