import APNsProtocol
import Foundation
import Kafka
import LocalTime
import Redis
import TestSupport
import Testing
import Tools

@testable import Pipeline

/// The audience rules end to end (design §2.14–§2.18): `run` pipelines, real Redis (single and cluster),
/// the Kafka mock cluster over TCP, the gateway simulator over TLS.
@Suite(.serialized, .timeLimit(.minutes(6)), .enabled(if: RedisServer.available, RedisServer.skipReason))
struct AudienceRulesPipelineTests {
    func waitForProcesses(_ stack: Stack, _ count: Int64) async throws {
        try await eventually("\(count) processes in control:seen") {
            try await stack.hashLength(stack.store.keys.controlSeen) == count
        }
    }

    /// Until `campaign` has `count` jobs settled; on a timeout its hash is shown.
    func waitSettled(_ stack: Stack, _ campaign: String, _ count: Int64, timeout: Duration = .seconds(240)) async throws {
        var last = ""
        try await eventually("campaign \(campaign): \(count) jobs settled", timeout: timeout) {
            let p = try await stack.store.readCampaign(campaign)
            last = "\(p.counters.fields.sorted { $0.key < $1.key })"
            return p.jobsSettled >= count
        } orRecord: {
            last
        }
    }

    /// The gateway's records of `campaign`'s jobs: job id → times sent.
    func sent(_ stack: Stack, _ campaign: String) -> [String: Int] { stack.recorded(campaign: campaign) }

    /// An app cap of 1 per day: a second campaign to the same recipients is capped for each of them,
    /// whichever of two processes gates it, on a single Redis and on a cluster; recipients the first
    /// campaign did not reach get the second.
    @Test(arguments: [RedisTestTarget.single, .cluster])
    func anAppCapHoldsAcrossCampaignsAndProcesses(_ target: RedisTestTarget) async throws {
        let stack = try await Stack(redis: target)
        var c = stack.configuration()
        c.apps[0].frequencyCaps = FrequencyCapSettings(caps: [FrequencyCap(max: 1, perMs: 86_400_000)!])
        let one = RunningPipeline(c)
        let two = RunningPipeline(c)
        try await waitForProcesses(stack, 2)
        try await stack.publish(campaign: "first", template: template, tokens: (0..<200).map(token))
        try await waitSettled(stack, "first", 200)
        #expect(try await stack.store.readCampaign("first")[.jobsAccepted] == 200)

        try await stack.publish(campaign: "second", template: template, tokens: (100..<300).map(token))
        try await waitSettled(stack, "second", 200)
        let second = try await stack.store.readCampaign("second")
        #expect(second[.jobsCapped] == 100, "\(second.counters.fields)")
        #expect(second[.jobsAccepted] == 100, "\(second.counters.fields)")
        #expect(second.counters[.capped] >= 100)
        let reached = Set(sent(stack, "second").keys)
        #expect(reached == Set((200..<300).map { Campaign.jobID(campaign: "second", token: token($0)) }), "only the new recipients")
        #expect(try await stack.store.readStats().totals[.capped] >= 100)
        // `job status` of a capped job says so; of a sent one, accepted.
        let capped = try await stack.store.jobStatus(
            jobID: Campaign.jobID(campaign: "second", token: token(150)), app: shop, tokenHex: token(150).hex, campaign: "second")
        #expect(capped.state == .capped && capped.cappedAtMs != nil, "\(capped)")
        #expect(capped.capCounted == 1, "the first campaign's send counted: \(capped)")
        let sentOne = try await stack.store.jobStatus(
            jobID: Campaign.jobID(campaign: "second", token: token(250)), app: shop, tokenHex: token(250).hex, campaign: "second")
        #expect(sentOne.state == .accepted)
        try await one.stop()
        try await two.stop()
        await stack.stop()
    }

    /// Who the recipient is: the job's `user` (a cap of 1 per day across two tokens of one user), else its
    /// token's registered user; the job's `time_zone`, else its token's registered one, else the app's
    /// default (quiet hours dropping jobs where it is night in UTC, not in Kiritimati); a transactional
    /// job is never capped. On a single Redis and on a cluster (the gate reads the profiles in its call).
    @Test(arguments: [RedisTestTarget.single, .cluster])
    func theRecipientIsTheJobsUserAndZoneElseItsRegistrations(_ target: RedisTestTarget) async throws {
        let stack = try await Stack(redis: target)
        var c = stack.configuration()
        c.apps[0].frequencyCaps = FrequencyCapSettings(caps: [FrequencyCap(max: 1, perMs: 86_400_000)!])
        c.apps[0].quietHours = QuietHoursSettings(
            window: Self.windowAroundNow(endingInMinutes: 120), defaultTimeZone: Self.utc, action: .drop)
        let pipeline = RunningPipeline(c)
        try await waitForProcesses(stack, 1)
        let now = Int(Date().timeIntervalSince1970)
        // Registrations: token 11 belongs to bob, token 12 lives in Kiritimati.
        try await stack.publishRaw(
            [
                #"{"app":"\#(shop)","token":"\#(token(11).hex)","registered_at":\#(now),"user":"bob","time_zone":"Pacific/Kiritimati"}"#,
                #"{"app":"\#(shop)","token":"\#(token(12).hex)","registered_at":\#(now),"time_zone":"Pacific/Kiritimati"}"#,
            ], topic: "apns.registrations")
        try await eventually("the profiles stored") {
            let bob = try await stack.store.profile(app: shop, tokenHex: token(11).hex)
            let other = try await stack.store.profile(app: shop, tokenHex: token(12).hex)
            return bob.user == "bob" && other.timeZone == "Pacific/Kiritimati"
        }
        func job(_ id: String, _ t: Int, _ extra: String) -> String {
            #"{"id":"\#(id)","app":"\#(shop)","token":"\#(token(t).hex)","payload":{"aps":{"alert":"x"}}\#(extra)}"#
        }
        let kiritimati = #","time_zone":"Pacific/Kiritimati""#
        try await stack.publishRaw([
            // alice, two devices, both awake: one of the two is capped.
            job("alice-1", 1, #","user":"alice""# + kiritimati), job("alice-2", 2, #","user":"alice""# + kiritimati),
            // alice again, transactional: never capped.
            job("alice-code", 3, #","user":"alice","transactional":true"# + kiritimati),
            // bob by his registered token, and by name on another device: one of the two is capped.
            job("bob-1", 11, ""), job("bob-2", 13, #","user":"bob""# + kiritimati),
            // No zone of its own: the registration's (awake) for token 12, the default (UTC: quiet) for 14.
            job("zone-registered", 12, ""), job("zone-default", 14, ""),
        ])
        var last = ""
        try await eventually("the seven jobs settled") {
            let totals = try await stack.store.readStats().totals
            last = "\(totals.fields.filter { ["accepted", "capped", "quiet"].contains($0.key) })"
            return totals[.accepted] + totals[.capped] + totals[.quiet] >= 7
        } orRecord: {
            last
        }
        let sentIDs = Set(stack.simulator.records.compactMap(\.jobID))
        let totals = try await stack.store.readStats().totals
        #expect(totals[.capped] == 2, "\(last)")
        #expect(totals[.quiet] == 1, "\(last)")
        #expect(sentIDs.intersection(["alice-1", "alice-2"]).count == 1, "\(sentIDs)")
        // The capped one of alice's two, found by `job status` under her name.
        let aliceCapped = sentIDs.contains("alice-1") ? ("alice-2", 2) : ("alice-1", 1)
        let status = try await stack.store.jobStatus(jobID: aliceCapped.0, app: shop, tokenHex: token(aliceCapped.1).hex, user: "alice")
        #expect(status.state == .capped, "\(status)")
        #expect(sentIDs.contains("alice-code"))
        #expect(sentIDs.intersection(["bob-1", "bob-2"]).count == 1, "bob's registered token and his name are one recipient: \(sentIDs)")
        #expect(sentIDs.contains("zone-registered") && !sentIDs.contains("zone-default"), "\(sentIDs)")
        try await pipeline.stop()
        await stack.stop()
    }

    /// A campaign's own cap (`--cap`) counts only its own jobs: a job id published twice counts once (a
    /// redelivery is no second send), another campaign to the same recipients is not capped by it.
    @Test func aCampaignCapCountsOnlyItsOwnJobs() async throws {
        let stack = try await Stack()
        let pipeline = RunningPipeline(stack.configuration())
        try await waitForProcesses(stack, 1)
        try await stack.changeControl("daily") { $0.cap = FrequencyCap(max: 1, perMs: 3_600_000) }
        try await stack.publish(campaign: "other", template: template, tokens: (0..<50).map(token))
        try await waitSettled(stack, "other", 50)
        try await stack.publish(campaign: "daily", template: template, tokens: (0..<50).map(token))
        try await waitSettled(stack, "daily", 50)
        #expect(try await stack.store.readCampaign("daily")[.jobsAccepted] == 50, "another campaign's sends do not count")
        // The same jobs again: deduped, never capped by their own first send.
        try await stack.publish(campaign: "daily", template: template, tokens: (0..<50).map(token))
        try await eventually("the copies settled") { try await stack.store.readCampaign("daily").counters[.deduped] >= 50 }
        let daily = try await stack.store.readCampaign("daily")
        #expect(daily[.jobsCapped] == 0 && daily.counters[.capped] == 0, "\(daily.counters.fields)")
        try await pipeline.stop()
        await stack.stop()
    }

    /// `--holdout 10%`: exactly the recipients the hash names are left out (settled `held_out`, never
    /// sent), the same on a second publish.
    @Test func aHoldoutLeavesOutTheRecipientsItsHashNames() async throws {
        let stack = try await Stack()
        let pipeline = RunningPipeline(stack.configuration())
        try await waitForProcesses(stack, 1)
        try await stack.changeControl("lift") { $0.holdoutBasisPoints = 1000 }
        let tokens = (0..<400).map(token)
        let out = Set(tokens.filter { HoldoutRule.isHeldOut(campaign: "lift", recipient: "t:" + $0.hex, basisPoints: 1000) }.map(\.hex))
        #expect(out.count > 20 && out.count < 60, "about 10 % of 400: \(out.count)")
        try await stack.publish(campaign: "lift", template: template, tokens: tokens)
        try await waitSettled(stack, "lift", 400)
        let lift = try await stack.store.readCampaign("lift")
        #expect(lift[.jobsHeldOut] == Int64(out.count), "\(lift.counters.fields)")
        #expect(lift[.jobsAccepted] == Int64(400 - out.count))
        let reached = Set(sent(stack, "lift").keys)
        for t in tokens {
            let id = Campaign.jobID(campaign: "lift", token: t)
            #expect(reached.contains(id) == !out.contains(t.hex), "\(t.hex)")
        }
        try await pipeline.stop()
        await stack.stop()
    }

    /// Quiet hours with `action: drop`: every job of the app arriving inside them settles `quiet`, none
    /// is sent.
    @Test func quietHoursDropSettlesQuiet() async throws {
        let stack = try await Stack()
        var c = stack.configuration()
        c.apps[0].quietHours = QuietHoursSettings(
            window: Self.windowAroundNow(endingInMinutes: 120), defaultTimeZone: Self.utc, action: .drop)
        let pipeline = RunningPipeline(c)
        try await waitForProcesses(stack, 1)
        try await stack.publish(campaign: "night", template: template, tokens: (0..<100).map(token))
        try await waitSettled(stack, "night", 100)
        let night = try await stack.store.readCampaign("night")
        #expect(night[.jobsQuiet] == 100, "\(night.counters.fields)")
        #expect(sent(stack, "night").isEmpty)
        // `job status` says what became of a dropped job (its token tag's record, read in its one round trip).
        let dropped = try await stack.store.jobStatus(
            jobID: Campaign.jobID(campaign: "night", token: token(7)), app: shop, tokenHex: token(7).hex)
        #expect(dropped.state == .quiet, "\(dropped)")
        #expect(dropped.quietAtMs != nil)
        let other = try await stack.store.jobStatus(
            jobID: Campaign.jobID(campaign: "other", token: token(7)), app: shop, tokenHex: token(7).hex)
        #expect(other.state == .notSeen, "a job never dropped is not said to be")
        try await pipeline.stop()
        await stack.stop()
    }

    /// Quiet hours that end within two minutes hold the jobs in Redis; the `run` process is killed
    /// (`kill -9`) while they are held; another one sends every job once, none before the hours end.
    @Test func jobsHeldForQuietHoursSurviveACrashAndGoOutWhenTheyEnd() async throws {
        guard PipelineProcess.binary != nil else { throw TestFailure("the apns-pipeline binary is not built") }
        let stack = try await Stack()
        let window = Self.windowAroundNow(endingInMinutes: 2)
        let endMs = Self.endOfWindowMs(window)
        let file = try stack.pipelineFile(
            appLines: """
                    quiet_hours: {from: "\(window.from)", to: "\(window.to)", default_time_zone: UTC}
                """)
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("quiet-\(UUID().uuidString).log").path
        let first = try PipelineProcess(pipelineFile: file, logFile: log)
        defer { first.crashWithoutWaiting() }
        try await waitForProcesses(stack, 1)
        try await stack.publish(campaign: "quiet", template: template, tokens: (0..<300).map(token))
        // Its campaign has no control state: held under the app's place.
        let place = DeferredRelease.appDeferral(shop)
        try await eventually("every job held") {
            try await stack.store.heldUsage(campaigns: [place])[place]?.jobs == 300
        }
        #expect(sent(stack, "quiet").isEmpty)
        await first.crash()
        let second = try PipelineProcess(pipelineFile: file, logFile: log)
        defer { second.crashWithoutWaiting() }
        try await stack.waitAccepted("quiet", count: 300, timeout: .seconds(300))
        let times = stack.simulator.records.compactMap { r in r.jobID?.hasPrefix("quiet:") == true ? r.time : nil }
        #expect(times.count == 300, "each job once: \(times.count)")
        #expect((times.min() ?? 0) >= endMs, "nothing before the quiet hours ended")
        #expect(try await stack.store.readCampaign("quiet").counters[.deferred] >= 300)
        _ = await second.stop()
        await stack.stop()
    }

    /// `--local-time` at the next minute on the recipients' clock (their zone: the app's default, UTC):
    /// held until then, then sent, each job once.
    @Test func localTimeHoldsEachJobUntilItsWallClockTime() async throws {
        let stack = try await Stack()
        let pipeline = RunningPipeline(stack.configuration())
        try await waitForProcesses(stack, 1)
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let wall = Self.wallTime(atMs: nowMs + 60_000 + (60_000 - nowMs % 60_000))
        try await stack.changeControl("morning") {
            $0.localTime = wall.description
            $0.localTimeFromMs = nowMs
        }
        let dueMs = LocalTimeRule.dueMs(wall, fromMs: nowMs, in: Self.utc)
        #expect(dueMs > nowMs + 60_000 && dueMs <= nowMs + 180_000)
        try await stack.publish(campaign: "morning", template: template, tokens: (0..<100).map(token))
        try await eventually("every job held") {
            try await stack.store.heldUsage(campaigns: ["morning"])["morning"]?.jobs == 100
        }
        // What `campaign status` shows: all 100 wait for UTC+00:00's 09:00-like instant.
        let dues = Campaign.localTimeDues(wall.description, fromMs: nowMs)
        let counts = try await stack.store.heldCounts(campaign: "morning", dues: dues.map(\.dueMs))
        let waiting = zip(dues, counts).filter { $0.1 > 0 }
        #expect(waiting.count == 1 && waiting.first?.0.utcOffsets.contains("+00:00") == true && waiting.first?.1 == 100, "\(waiting)")
        try await stack.waitAccepted("morning", count: 100, timeout: .seconds(300))
        let times = stack.simulator.records.compactMap { r in r.jobID?.hasPrefix("morning:") == true ? r.time : nil }
        #expect(times.count == 100)
        #expect((times.min() ?? 0) >= dueMs, "nothing before \(wall) UTC")
        try await pipeline.stop()
        await stack.stop()
    }

    static let utc = TimeZone(identifier: "UTC")!

    static func wallTime(atMs ms: Int64) -> WallTime {
        let minuteOfDay = Int((ms / 60_000) % 1440)
        return WallTime(hour: minuteOfDay / 60, minute: minuteOfDay % 60)!
    }

    /// A UTC window that began 10 minutes ago and ends at a minute boundary at least `minutes` - 1 and at
    /// most `minutes` minutes from now (a window can only end on a whole minute).
    static func windowAroundNow(endingInMinutes minutes: Int) -> QuietHours {
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let from = wallTime(atMs: nowMs - 600_000)
        let to = wallTime(atMs: nowMs + Int64(minutes) * 60_000)
        return QuietHours(from: from, to: to)!
    }

    /// When `window` (UTC) ends next, epoch ms.
    static func endOfWindowMs(_ window: QuietHours) -> Int64 {
        let now = Date()
        return Int64((window.end(containing: now, in: utc) ?? now).timeIntervalSince1970 * 1000)
    }
}
