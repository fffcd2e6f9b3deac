import APNsProtocol
import ArgumentParser
import Foundation
import Logging
import NIOPosix
import Pipeline
import Sender

/// `apns-pipeline channel create|list|get|delete`: Apple's channel management for broadcast push
/// (iOS 18 Live Activities), for an app of a pipeline file: its token key, its TLS trust, its
/// environment (or `--environment`). One request over one HTTP/2 connection per command.
struct ChannelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channel",
        abstract: "Manage an app's broadcast channels (Live Activities): create, list, get, delete.",
        discussion: """
            Requests go to Apple's channel management host of the environment \
            (api-manage-broadcast.sandbox.push.apple.com:2195, api-manage-broadcast.push.apple.com:2196), or to \
            the app's hosts when the pipeline file points it at a server outside Apple's (the HTTP/2 simulator). \
            Token authentication only (the app's token section). Up to 10,000 channels per app and environment: \
            delete a channel when its event is over. \
            Exit status: 0 done; 1 APNs refused the request (the message says why and what to do); 2 no usable \
            answer (network, TLS, timeout); 64 bad arguments or pipeline file. With --json, stdout is one JSON \
            object either way ("ok": true or false).
            """,
        subcommands: [Create.self, List.self, Get.self, Delete.self]
    )

    struct Common: ParsableArguments {
        @Option(help: "The pipeline file the app is configured in.") var pipeline: String
        @Option(help: "The app's bundle id (an app of the pipeline file with a token section).") var app: String
        @Option(help: "sandbox or production (default: the app's environment in the pipeline file).")
        var environment: ChannelManagementConfiguration.Environment?
        @Flag(help: "Print one JSON object (for scripts) instead of text.") var json = false
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a channel; prints its id (base64), to give to the devices that subscribe.")
        @OptionGroup var common: Common
        @Option(help: "What APNs keeps for a device that is offline: no-storage (nothing) or most-recent (the last message).")
        var storagePolicy: APNsChannelStoragePolicy = .noStorage

        func run() async throws { try await perform(.create(storagePolicy), common) }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the app's channel ids in the environment.")
        @OptionGroup var common: Common

        func run() async throws { try await perform(.list, common) }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a channel's storage policy.")
        @OptionGroup var common: Common
        @Option(help: "The channel id (as `channel create` printed it).") var channel: String

        func validate() throws { try checkChannelID(channel) }
        func run() async throws { try await perform(.get(channelID: channel), common) }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a channel (its subscribers get nothing more on it).")
        @OptionGroup var common: Common
        @Option(help: "The channel id (as `channel create` printed it).") var channel: String

        func validate() throws { try checkChannelID(channel) }
        func run() async throws { try await perform(.delete(channelID: channel), common) }
    }
}

extension APNsChannelStoragePolicy: ExpressibleByArgument {
    public init?(argument: String) { self.init(name: argument) }
    public static var allValueStrings: [String] { allCases.map(\.name) }
    public var defaultValueDescription: String { name }
}

extension ChannelManagementConfiguration.Environment: ExpressibleByArgument {}

private func checkChannelID(_ id: String) throws {
    guard APNsChannelManagement.isPlausibleChannelID(id) else {
        throw ValidationError(
            "--channel: \"\(id)\" is not a channel id (base64 text of at most \(APNsChannelManagement.maxChannelIDLength) "
                + "characters, as `channel create` and `channel list` print it)")
    }
}

/// Loads the app's settings, sends the request, prints the outcome; a refusal or failure ends the
/// process with its exit status (after its message, or its JSON object with --json).
private func perform(_ operation: ChannelOperation, _ common: ChannelCommand.Common) async throws {
    let pipeline = try loadPipeline(common.pipeline)
    guard let app = pipeline.apps.first(where: { $0.bundleID == common.app }) else {
        let known = pipeline.apps.map(\.bundleID).joined(separator: ", ")
        throw ValidationError("--app: \(common.app) is not an app of \(common.pipeline) (its apps: \(known))")
    }
    let configuration: ChannelManagementConfiguration
    do {
        configuration = try pipeline.channelManagementConfiguration(for: app, environment: common.environment, file: common.pipeline)
    } catch let error as ConfigurationError {
        throw ValidationError("\(error)")
    } catch {
        // The key file could not be read or is not a P-256 key (the error names the file only).
        throw ValidationError("\(common.pipeline): apps[\(app.bundleID)].token.key: \(error)")
    }
    // The process-wide group: one request, and the process ends with the command.
    let group = MultiThreadedEventLoopGroup.singleton
    var base: [(String, JSONValue)] = [
        ("operation", .string(operation.name)), ("app", .string(configuration.app)),
        ("environment", .string(configuration.environment.rawValue)), ("host", .string("\(configuration.host)")),
    ]
    // Untyped: `do throws(ChannelManagementError)` here crashed the release build's optimizer (Swift 6.3.1,
    // "Found ownership error" in CopyPropagation).
    do {
        let (result, requestID) = try await ChannelManagementClient.perform(
            operation, configuration: configuration, group: group, logger: quietLogger())
        base.insert(("ok", true), at: 0)
        let fields: [(String, JSONValue)]
        let text: String
        switch result {
        case .created(let id, let policy):
            fields = [
                ("channel_id", .string(id)), ("storage_policy", .string(policy.name)),
                ("message_storage_policy", .integer(policy.rawValue)),
            ]
            text = "created channel \(id) (storage policy \(policy.name)) for \(configuration.app) in \(configuration.environment.rawValue)"
        case .channel(let id, let policy, let value, let pushType):
            let name = policy?.name ?? value.map { "unknown (\($0))" } ?? "unknown"
            fields = [
                ("channel_id", .string(id)), ("storage_policy", policy.map { .string($0.name) } ?? .null),
                ("message_storage_policy", value.map { .integer($0) } ?? .null), ("push_type", pushType.map { .string($0) } ?? .null),
            ]
            text = "channel \(id): storage policy \(name), push type \(pushType ?? "?")"
        case .list(let ids):
            fields = [("channel_ids", .array(ids.map { .string($0) })), ("count", .integer(ids.count))]
            text =
                ids.isEmpty
                ? "no channels for \(configuration.app) in \(configuration.environment.rawValue)"
                : ids.joined(separator: "\n")
        case .deleted(let id):
            fields = [("channel_id", .string(id)), ("deleted", true)]
            text = "deleted channel \(id)"
        }
        if common.json {
            print(
                JSONValue.object((base + fields + [("request_id", .string(requestID))]).map { (key: $0.0, value: $0.1) }).serializedString)
        } else {
            print(text)
        }
    } catch let error as ChannelManagementError {
        try fail(error, operation: operation, base: base, json: common.json)
    }
}

/// A refused or failed request: one JSON object (`--json`) and the message on stderr, then its exit status.
@inline(never)
private func fail(_ error: ChannelManagementError, operation: ChannelOperation, base: [(String, JSONValue)], json: Bool) throws -> Never {
    if json {
        var fields = base
        fields.insert(("ok", false), at: 0)
        fields += [
            ("status", error.status.map { .integer($0) } ?? .null), ("reason", error.reason.map { .string($0) } ?? .null),
            ("channel_id", operation.channelID.map { .string($0) } ?? .null),
            ("request_id", error.requestID.map { .string($0) } ?? .null), ("message", .string(error.description)),
        ]
        print(JSONValue.object(fields.map { (key: $0.0, value: $0.1) }).serializedString)
    }
    FileHandle.standardError.write(Data("error: \(error.description)\n".utf8))
    throw ExitCode(error.exitStatus)
}
