import Operations
import Redis
import Testing

@testable import Pipeline

/// The settled counters are summed per run of outcomes (app and kind): mixed runs still add up.
@Suite struct SettledCountsTests {
    @Test func runsOfOutcomesAddUpPerAppAndKind() {
        let prometheus = PrometheusMetrics()
        let metrics = PipelineMetrics(factory: prometheus.factory, transports: ["a": "binary", "b": "http2"])
        func o(_ app: String, _ kind: SettledOutcomeKind, code: String? = nil) -> SettledOutcome {
            SettledOutcome(jobID: "j", app: app, tokenHex: "", kind: kind, code: code)
        }
        metrics.settled(
            outcomes: [
                o("a", .accepted), o("a", .accepted), o("b", .accepted), o("a", .accepted), o("a", .rejected, code: "8"),
                o("a", .rejected, code: "8"), o("b", .deduped), o("", .deadLettered), o("a", .accepted),
            ], events: PipelineEvents())
        metrics.settled(outcomes: [o("a", .accepted), o("b", .suppressed)], events: PipelineEvents())
        let text = String(decoding: prometheus.text(), as: UTF8.self)
        for line in [
            #"apns_accepted_total{app="a",transport="binary"} 5"#, #"apns_accepted_total{app="b",transport="http2"} 1"#,
            #"apns_rejected_total{app="a",transport="binary"} 2"#, #"apns_deduped_total{app="b"} 1"#,
            #"apns_dead_lettered_total{app="unknown"} 1"#, #"apns_suppressed_total{app="b"} 1"#,
            #"apns_gateway_refusals_total{app="a",transport="binary",code="8"} 2"#,
        ] {
            #expect(text.contains(line), "\(line) in\n\(text)")
        }
    }

    /// The outcomes stream's counters: delivered messages by outcome, failures; each with its HELP.
    @Test func outcomeMessagesAreCountedByOutcome() {
        let prometheus = PrometheusMetrics()
        let metrics = PipelineMetrics(factory: prometheus.factory, transports: ["a": "http2"])
        metrics.outcomeMessages([
            OutcomeMessage(id: "1", outcome: .accepted), OutcomeMessage(id: "2", outcome: .accepted),
            OutcomeMessage(id: "3", outcome: .rejected),
        ])
        metrics.outcomeMessages([OutcomeMessage(id: "4", outcome: .accepted)])
        metrics.outcomeMessageFailures(3)
        let text = String(decoding: prometheus.text(), as: UTF8.self)
        for line in [
            #"apns_outcome_messages_total{outcome="accepted"} 3"#, #"apns_outcome_messages_total{outcome="rejected"} 1"#,
            "apns_outcome_message_failures_total 3", "# HELP apns_outcome_messages_total ", "# HELP apns_outcome_message_failures_total ",
        ] {
            #expect(text.contains(line), "\(line) in\n\(text)")
        }
    }
}
