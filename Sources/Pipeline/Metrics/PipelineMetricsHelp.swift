extension PipelineMetrics {
    /// The `# HELP` text of every metric, by name (docs/operations.md §8 "The metrics" says more). A metric
    /// missing here is exported without HELP, which `promtool check metrics` reports and
    /// `OperationsTests` fail on: a new metric adds its line here.
    public static let help: [String: String] = [
        Name.received: "Job messages taken from Kafka (apns:stats received).",
        Name.accepted: "Notifications the gateway accepted (apns:stats accepted).",
        Name.rejected: "Notifications the gateway refused (apns:stats rejected; the reason is in apns_gateway_refusals_total).",
        Name.suppressed: "Jobs not sent because their device token is suppressed (apns:stats suppressed).",
        Name.deduped: "Jobs not sent because the same job was already settled (apns:stats deduped).",
        Name.deadLettered: "Jobs written to the dead-letter topic (apns:stats dead_lettered; app unknown when the message did not decode).",
        Name.cancelled: "Jobs of a cancelled campaign settled without being sent (apns:stats cancelled).",
        Name.deferred: "Messages of a paused, scheduled or paced campaign held in Redis until due (apns:stats deferred).",
        Name.capped: "Jobs not sent because their recipient was over a frequency cap (apns:stats capped).",
        Name.quiet: "Jobs dropped because their recipient was inside the app's quiet hours (apns:stats quiet).",
        Name.heldOut: "Jobs not sent because their recipient is in the campaign's holdout group (apns:stats held_out).",
        Name.heldJobs: "Jobs held in Redis now (paused, scheduled, paced, apps[].max_rate), all processes together.",
        Name.heldBytes: "Bytes of the jobs held in Redis now, as redis.held_max_bytes counts them, all processes together.",
        Name.heldCapWaiting: "Jobs this process keeps unsettled because the held slots are at a byte cap (their partitions are held).",
        Name.heldPartitions: "Partitions this process does not fetch while their jobs wait for room under the held-bytes cap.",
        Name.refusals: "Gateway refusals by code: binary status or HTTP/2 reason (apns:stats rejected:<code>).",
        Name.replayed: "Notifications resent after a connection was lost (apns:stats replayed).",
        Name.ambiguous: "Notifications that may or may not have been delivered (the transports' part of apns:stats ambiguous).",
        Name.retried: "Notifications sent again after a retryable answer (apns:stats retried).",
        Name.reconnects: "Gateway connections opened again after a loss (apns:stats reconnects).",
        Name.sequenceUnknown: "Binary error responses naming a notification no longer buffered.",
        Name.resentAfterSettle: "Binary: frames resent from the settle grace window.",
        Name.lostAfterSettle: "Binary: frames lost after they were settled (apns:stats lost_after_settle).",
        Name.refusedAfterSettle: "Binary: frames refused after they were settled (apns:stats refused_after_settle).",
        Name.deadLetterFailures: "Writes to the dead-letter topic that failed (apns:stats dead_letter_failures).",
        Name.resentAfterCrash: "Jobs sent again because the process that leased them died (apns:stats resent_after_crash).",
        Name.inFlightWaits: "Times ingest waited because pipeline.max_in_flight jobs were in flight (apns:stats in_flight_waits).",
        Name.writes: "Socket writes to the gateway (mean flush size: written bytes / writes).",
        Name.framesWritten: "Notification frames written to the gateway.",
        Name.bytesWritten: "Bytes written to the gateway.",
        Name.inFlightJobs: "Jobs taken from Kafka and not settled yet (at most pipeline.max_in_flight).",
        Name.connectionUp: "1 when the gateway connection is connected (or draining), else 0.",
        Name.connections: "Gateway connections per state.",
        Name.queueDepth: "Notifications waiting to be written on the connection.",
        Name.replayBuffer: "Binary: notifications in the connection's replay buffer.",
        Name.replayBufferBytes: "Binary: bytes in the connection's replay buffer.",
        Name.streamsInUse: "HTTP/2: requests written on the connection and not answered.",
        Name.consumerLag: "Messages of the partition not settled yet: the high watermark minus the first unsettled offset.",
        Name.assignedPartitions: "Partitions of the jobs topic assigned to this process.",
        Name.settlementLatency:
            "Kafka message timestamp to the message settled and committable (first message of each batch per partition).",
        Name.kafkaBatch: "Messages per Kafka batch.",
        Name.priorityLatency:
            "Priority lane: a job's Kafka timestamp (publish) to its transport reporting it accepted (HTTP/2: its 200; binary: settled by time), every accepted priority job.",
        Name.priorityReceived: "Priority lane: messages taken from kafka.priority_topic (also counted in apns_received_total).",
        Name.settleBatch: "Outcomes per settle call.",
        Name.answerLatency: "HTTP/2: a request's frames written to its answer, every answer.",
        Name.retries:
            "Resends by reason (5xx, 429, reset, connection-lost, stream-timeout, refused-stream, goaway, …): apns:stats retried:<reason>.",
        Name.gaveUp:
            "Jobs whose retries ran out of time (gateway-gave-up) or past their expiry (expired), dead-lettered (apns:stats gave_up).",
        Name.liveActivityPriority10:
            "push_type liveactivity jobs handed to the transport at priority 10, each drawing on the device's Live Activity budget.",
        Name.broadcasts:
            "Broadcasts (jobs for a channel) handed to the transport: one request each, reaching every device subscribed to the channel (outcomes: apns:stats broadcast:<outcome>).",
        Name.outcomeMessages: "Messages delivered to kafka.outcomes_topic, one per settled job, by outcome (at least once).",
        Name.outcomeMessageFailures:
            "Outcome messages kafka.outcomes_topic did not take; each is retried, and settling waits for it (nothing commits past it).",
        Name.sinkFailing:
            "Seconds the oldest write still failing to the sink's topic (outcomes, dead_letter) has been failing, 0 when all are delivered; from pipeline.readiness_grace_s on, /readyz says not ready.",
        Name.providerTokenAge:
            "HTTP/2 token authentication: age of the oldest provider token the app's connections send (APNs refuses it past 60 min).",
    ]
}
