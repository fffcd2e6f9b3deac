import ArgumentParser
import Foundation
import Pipeline
import Redis

/// `apns-pipeline job status`: what happened to one job, from Redis.
struct JobCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "job", abstract: "Look up one job in Redis.", subcommands: [Status.self])

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "What happened to a job: accepted (and when), in flight (and where), its token suppressed, or not seen.",
            discussion: """
                Read from the keys of the job's token (one round trip, no scan), so the app and the token (for a \
                broadcast, --channel) are needed beside the id. accepted: Apple accepted it, settled within the dedup bucket shown (records \
                live redis.dedup_ttl_hours); in-flight: a live `run` process holds its lease now; suppressed: its \
                token was refused (410, BadDeviceToken, feedback) and has not registered since, so the gate will not \
                send it; cancelled / deferred: none of these, and its campaign (--campaign, or the part before ':' \
                of a `campaign publish` id) is cancelled, or paused, paced or scheduled for later (held in Redis \
                until then); not-seen: none of these (still in Kafka, dead-lettered: see the dead-letter topic, or its \
                record expired). Exit status: 0, 1 on an error (Redis unreachable, bad pipeline file or token), 3 \
                not seen.
                """)

        @Option(help: "The pipeline file (Redis settings).") var pipeline: String = "Pipelines/default.yaml"
        @Option(help: "The job's app (bundle id).") var app: String
        @Option(help: "The job's device token (hex).") var token: String?
        @Option(help: "A broadcast job's channel id (instead of --token), as the job gave it.") var channel: String?
        @Option(help: "The job's campaign (default: the part before ':' of an id `<campaign>:<token>`).") var campaign: String?
        @Option(help: "The job's `user`, when it named one (whose frequency caps it counted against).") var user: String?
        @Argument(help: "Job id.") var id: String
        @Flag(help: "Print one JSON object.") var json = false

        func validate() throws {
            guard (token == nil) != (channel == nil) else {
                throw ValidationError("give --token (a device push) or --channel (a broadcast)")
            }
            guard let token else { return }
            let hex = token.utf8
            guard !hex.isEmpty, hex.count % 2 == 0, hex.count <= 200,
                hex.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 | 0x20 >= 97 && $0 | 0x20 <= 102) })
            else { throw ValidationError("--token: expected the device token as hex (an even number of 0-9 a-f, at most 200)") }
        }

        /// `--campaign`, else the campaign of a `campaign publish` id (`<campaign>:<token hex>`).
        var jobCampaign: String? {
            if let campaign { return campaign }
            guard let token, let colon = id.lastIndex(of: ":"), id[id.index(after: colon)...].lowercased() == token.lowercased() else {
                return nil
            }
            return String(id[..<colon])
        }

        func run() async throws {
            try await exitingOnError {
                let config = try loadPipeline(pipeline)
                guard config.apps.contains(where: { $0.bundleID == app }) else {
                    throw ValidationError("--app: no app entry in \(pipeline) has the bundle id \(app)")
                }
                let (redis, store) = try await openStore(config, logger: quietLogger())
                let status =
                    if let channel {
                        try await store.jobStatus(jobID: id, app: app, channelID: channel)
                    } else {
                        try await store.jobStatus(jobID: id, app: app, tokenHex: token ?? "", campaign: jobCampaign, user: user)
                    }
                await redis.close()
                let text =
                    json ? JobCommand.json(status, id: id, app: app, token: token, channel: channel) : JobCommand.render(status, id: id)
                FileHandle.standardOutput.write(Data((text + "\n").utf8))
                if status.state == .notSeen { throw ExitCode(3) }
            }
        }
    }

    static func time(_ epoch: Int64) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: TimeInterval(epoch)))
    }

    static func render(_ s: JobStatus, id: String) -> String {
        var lines = ["job \(id): \(s.state.rawValue)"]
        if let from = s.acceptedFrom, let until = s.acceptedUntil {
            lines.append("  accepted: settled between \(time(from)) and \(time(until))")
        }
        if let lease = s.lease {
            let expires = time(lease.expiresAtMs / 1000)
            lines.append(
                "  lease: held by \(lease.owner) until \(expires)\(s.leaseHolderAlive == true ? "" : " (its process is gone: void)")")
        }
        if let at = s.suppressedAt {
            lines.append("  token suppressed since \(time(at)) (\(s.suppressedReason ?? "?"))")
        }
        if let at = s.registeredAt { lines.append("  token registered at \(time(at))") }
        if let control = s.campaignControl { lines.append("  campaign: \(control.description)") }
        if let until = s.deferredUntilMs { lines.append("  deferred until \(time(until / 1000))") }
        if let p = s.profile {
            lines.append("  recipient: user \(p.user ?? "–"), time zone \(p.timeZone ?? "–") (its token's registration)")
        }
        if let at = s.cappedAtMs { lines.append("  capped at \(time(at / 1000)): its recipient was at a frequency cap") }
        if let at = s.quietAtMs {
            lines.append("  dropped at \(time(at / 1000)): inside its recipient's quiet hours (the app drops such jobs)")
        }
        if let n = s.capCounted { lines.append("  frequency caps: \(n) send(s) to its recipient counted") }
        if let n = s.campaignCapCounted { lines.append("  its campaign's cap: \(n) send(s) to its recipient counted") }
        return lines.joined(separator: "\n")
    }

    static func json(_ s: JobStatus, id: String, app: String, token: String?, channel: String?) -> String {
        var object: [String: Any] = ["id": id, "app": app, "state": s.state.rawValue]
        if let token { object["token"] = token.lowercased() }
        if let channel { object["channel"] = channel }
        if let from = s.acceptedFrom, let until = s.acceptedUntil {
            object["accepted_from"] = time(from)
            object["accepted_until"] = time(until)
        }
        if let lease = s.lease {
            object["lease_owner"] = lease.owner
            object["lease_expires"] = time(lease.expiresAtMs / 1000)
            object["lease_owner_alive"] = s.leaseHolderAlive ?? false
        }
        if let at = s.suppressedAt {
            object["suppressed_since"] = time(at)
            object["suppressed_reason"] = s.suppressedReason ?? ""
        }
        if let at = s.registeredAt { object["registered_at"] = time(at) }
        if let control = s.campaignControl { object["campaign_state"] = control.description }
        if let until = s.deferredUntilMs { object["deferred_until"] = time(until / 1000) }
        if let user = s.profile?.user { object["registered_user"] = user }
        if let zone = s.profile?.timeZone { object["registered_time_zone"] = zone }
        if let at = s.cappedAtMs { object["capped_at"] = time(at / 1000) }
        if let at = s.quietAtMs { object["quiet_at"] = time(at / 1000) }
        if let n = s.capCounted { object["cap_counted"] = n }
        if let n = s.campaignCapCounted { object["campaign_cap_counted"] = n }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
