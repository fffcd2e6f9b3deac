import ArgumentParser

/// `apns-pipeline`: one executable, one subcommand per job an operator runs.
/// Each subcommand lives in its own file under `Commands/`.
@main
struct APNsPipeline: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-pipeline",
        abstract:
            "Send Apple push notifications in bulk: Kafka in, APNs out (HTTP/2 provider API or the legacy binary gateways), Redis beside.",
        version: versionLine,
        subcommands: [
            // Keep this list sorted; add a subcommand by adding its file under Commands/ and its type here.
            CampaignCommand.self,
            ChannelCommand.self,
            DashboardCommand.self,
            FeedbackCommand.self,
            GatewaySimCommand.self,
            JobCommand.self,
            KafkaDevCommand.self,
            ProviderTokenCommand.self,
            RunCommand.self,
            SendCommand.self,
            StatsCommand.self,
            TokenCommand.self,
        ]
    )
}
