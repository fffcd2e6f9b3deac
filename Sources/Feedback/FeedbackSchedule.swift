import Logging

/// Polls every configured app's feedback service on an interval (default hourly; Apple's "The Feedback
/// Service" asks for at least daily), for as long as ``run()`` runs. A failed poll is logged with what to do about it and
/// tried again at the next interval; nothing here throws or crashes.
///
/// Polls of one round run one app after the other: the service is cheap to read, and one connection at
/// a time keeps the provider far from anything that looks like a connection storm.
public struct FeedbackSchedule: Sendable {
    public var apps: [FeedbackApp]
    public var interval: Duration
    /// Whether the first round runs at once (`true`) or after one interval.
    public var pollAtStart: Bool
    public let poller: FeedbackPoller
    private let logger: Logger

    /// The interval when none is configured (`feedback.interval_minutes`): its one home.
    public static let defaultInterval: Duration = .seconds(3600)

    public init(
        apps: [FeedbackApp],
        poller: FeedbackPoller,
        interval: Duration = FeedbackSchedule.defaultInterval,
        pollAtStart: Bool = true,
        logger: Logger = Logger(label: "apns.feedback.schedule")
    ) {
        self.apps = apps
        self.poller = poller
        self.interval = interval
        self.pollAtStart = pollAtStart
        self.logger = logger
    }

    /// Runs rounds until the task is cancelled. Rounds start on a fixed grid (`interval` apart from the
    /// first), so a slow round does not push later ones back; a round that overruns its interval is
    /// followed by the next one at once.
    public func run() async {
        let clock = ContinuousClock()
        let day: Duration = .seconds(86_400)
        if interval > day {
            logger.warning(
                "feedback interval is longer than a day; the spec asks providers to poll at least daily",
                metadata: [
                    "feedback.interval_s": "\(interval.components.seconds)"
                ])
        }
        logger.info(
            "feedback schedule started",
            metadata: [
                "feedback.apps": .array(apps.map { "\($0.app)" }), "feedback.interval_s": "\(interval.components.seconds)",
            ])
        var next = clock.now + (pollAtStart ? .zero : interval)
        while !Task.isCancelled {
            do {
                try await clock.sleep(until: next)
            } catch {
                break  // cancelled
            }
            _ = await pollAll()
            next = next + interval
            let now = clock.now
            if next < now {
                // Overran: skip the missed slots rather than polling back to back.
                while next < now { next = next + interval }
            }
        }
        logger.info("feedback schedule stopped")
    }

    /// One round: polls every app once, logs each result, returns them in the order of ``apps``.
    @discardableResult
    public func pollAll() async -> [Result<FeedbackPollSummary, FeedbackPollError>] {
        var results: [Result<FeedbackPollSummary, FeedbackPollError>] = []
        for app in apps {
            if Task.isCancelled { break }
            do throws(FeedbackPollError) {
                let summary = try await poller.poll(app)
                logger.info("feedback poll done", metadata: summary.metadata)
                results.append(.success(summary))
            } catch {
                var metadata = error.summary.metadata
                metadata["feedback.stage"] = "\(error.stage.rawValue)"
                metadata["feedback.next_poll_in"] = "\(interval)"
                metadata["error"] = "\(error.underlying)"
                metadata["feedback.advice"] = "\(error.advice)"
                let level: Logger.Level = error.stage == .cancelled ? .notice : .error
                logger.log(level: level, "feedback poll failed; retrying at the next interval", metadata: metadata)
                results.append(.failure(error))
            }
        }
        return results
    }
}
