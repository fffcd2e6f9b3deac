import APNsProtocol
import Foundation
import Synchronization

/// The apps' broadcast channels, as APNs's channel management keeps them: per app, in creation order,
/// each with its `message-storage-policy`; at most `limit` per app.
final class ChannelRegistry: Sendable {
    private struct App {
        var order: [String] = []
        var policies: [String: Int] = [:]
        /// Devices subscribed to each channel (a broadcast reaches them all): the fault script's
        /// `channel_subscribers` when the channel was created.
        var subscribers: [String: Int] = [:]
    }
    private let apps = Mutex<[String: App]>([:])

    /// Adds a channel; false when the app already has `limit`.
    func create(app: String, id: String, policy: Int, limit: Int, subscribers: Int = 0) -> Bool {
        apps.withLock { apps in
            var a = apps[app] ?? App()
            guard a.order.count < limit else { return false }
            a.order.append(id)
            a.policies[id] = policy
            a.subscribers[id] = subscribers
            apps[app] = a
            return true
        }
    }

    func policy(app: String, id: String) -> Int? { apps.withLock { $0[app]?.policies[id] } }

    /// The devices subscribed to a channel of `app`; nil when the app has no such channel.
    func subscribers(app: String, id: String) -> Int? { apps.withLock { $0[app]?.subscribers[id] } }

    /// Removes a channel; false when the app has no such channel.
    func delete(app: String, id: String) -> Bool {
        apps.withLock { apps in
            guard apps[app]?.policies.removeValue(forKey: id) != nil else { return false }
            apps[app]?.subscribers.removeValue(forKey: id)
            apps[app]?.order.removeAll { $0 == id }
            return true
        }
    }

    func list(app: String) -> [(id: String, storagePolicy: Int)] {
        apps.withLock { apps in
            guard let a = apps[app] else { return [] }
            return a.order.map { ($0, a.policies[$0] ?? 0) }
        }
    }
}

extension HTTP2Connection {
    /// A channel management request (Apple, "Sending channel management requests to APNs"; the contract
    /// is `APNsChannelManagement`): authentication as for a notification (token, or a certificate for
    /// the app), then create (POST …/channels), read (GET …/channels + apns-channel-id), delete (DELETE
    /// …/channels + apns-channel-id) or list (GET …/all-channels). Every answer carries the request's
    /// `apns-request-id` (or one made here); errors carry `{"reason": …}`.
    func channelRequest(
        _ resource: APNsChannelManagement.Resource, method: String, fields: [(String, String)], body: [UInt8],
        certificateTopic: (topic: String, auth: String)?
    ) -> Outcome {
        func field(_ name: String) -> String? { fields.first { $0.0 == name }?.1 }
        let sent = field(APNsChannelManagement.Header.requestID)
        let requestID = sent.flatMap { APNsRequestValidator.isCanonicalUUID($0) ? $0 : nil } ?? makeUUID()
        let operation: String
        switch (resource, method) {
        case (.channels, "POST"): operation = "create"
        case (.channels, "GET"): operation = "get"
        case (.channels, "DELETE"): operation = "delete"
        case (.allChannels, "GET"): operation = "list"
        default: operation = "other"
        }
        let answer = ChannelAnswer(core: core, operation: operation, requestID: requestID)

        let app: String
        switch resource {
        case .channels(let bundle), .allChannels(let bundle): app = bundle
        case .unknown: return answer.refuseAPNs(.badPath)
        }
        // Authentication, as for /3/device.
        if let certificateTopic {
            guard app == certificateTopic.topic else { return answer.refuseAPNs(.topicDisallowed) }
        } else {
            guard let authorization = field(APNsHeader.authorization) else { return answer.refuseAPNs(.missingProviderToken) }
            if case .failure(let reason) = checkToken(authorization, now: Int64(Date().timeIntervalSince1970)) {
                return answer.refuseAPNs(reason)
            }
        }
        raiseStreamLimit()

        switch operation {
        case "create":
            return createChannel(app: app, body: body, answer: answer)
        case "get", "delete":
            guard let id = field(APNsChannelManagement.Header.channelID) else { return answer.refuseChannel(.missingChannelId) }
            guard APNsChannelManagement.isPlausibleChannelID(id) else { return answer.refuseChannel(.badChannelId) }
            if operation == "delete" {
                return core.channels.delete(app: app, id: id) ? answer.reply(204, "204") : answer.refuseChannel(.channelNotRegistered)
            }
            guard let policy = core.channels.policy(app: app, id: id) else { return answer.refuseChannel(.channelNotRegistered) }
            let value: JSONValue = [
                ChannelAnswer.policyKey: .integer(policy), ChannelAnswer.pushTypeKey: .string(APNsChannelManagement.pushType),
            ]
            return answer.reply(200, "200", body: value.serialized())
        case "list":
            let value: JSONValue = ["channels": .array(core.channels.list(app: app).map { .string($0.id) })]
            return answer.reply(200, "200", body: value.serialized())
        default:
            return answer.refuseAPNs(.methodNotAllowed)
        }
    }

    /// POST …/channels: a body of exactly `message-storage-policy` and `push-type` (LiveActivity), and
    /// room for one more channel of the app.
    private func createChannel(app: String, body: [UInt8], answer: ChannelAnswer) -> Outcome {
        // Apple's table: "The JSON Request payload is unparseable" (BadRequestPayload), "… contained an
        // unrecognizable attribute" (BadRequestParams). Both body fields are "Required"; Apple lists no
        // reason for a missing or out-of-range `message-storage-policy`, so it is answered as an
        // attribute APNs cannot use (BadRequestParams), a missing `push-type` as MissingPushType.
        guard let json = try? JSONParser.parse(body), let members = json.objectValue else {
            return answer.refuseChannel(.badRequestPayload)
        }
        guard members.allSatisfy({ $0.key == ChannelAnswer.policyKey || $0.key == ChannelAnswer.pushTypeKey }) else {
            return answer.refuseChannel(.badRequestParams)
        }
        guard let pushType = json[ChannelAnswer.pushTypeKey]?.stringValue else { return answer.refuseChannel(.missingPushType) }
        // Apple: "The only allowed value is LiveActivity."
        guard pushType.lowercased() == APNsChannelManagement.pushType.lowercased() else { return answer.refuseAPNs(.invalidPushType) }
        guard let policy = json[ChannelAnswer.policyKey]?.intValue, APNsChannelStoragePolicy(rawValue: policy) != nil else {
            return answer.refuseChannel(.badRequestParams)
        }
        let id = newChannelID()
        guard
            core.channels.create(
                app: app, id: id, policy: policy, limit: core.faults.channelLimit, subscribers: core.faults.channelSubscribers)
        else {
            return answer.refuseChannel(.cannotCreateChannelConfig)
        }
        return answer.reply(201, "201", headers: [(APNsChannelManagement.Header.channelID, id)])
    }

    /// A new channel id: base64 of 16 random bytes (24 characters), as ActivityKit expects ("The channel
    /// ID is a base64-encoded string"), from the connection's seeded generator.
    private func newChannelID() -> String {
        let a = random.next()
        let b = random.next()
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            bytes[i] = UInt8(truncatingIfNeeded: a >> (8 * UInt64(i)))
            bytes[8 + i] = UInt8(truncatingIfNeeded: b >> (8 * UInt64(i)))
        }
        return Data(bytes).base64EncodedString()
    }
}

/// How one channel management request is answered: every answer carries its `apns-request-id` and is
/// counted under its operation and outcome; errors carry `{"reason": …}`.
private struct ChannelAnswer {
    static let policyKey = "message-storage-policy"
    static let pushTypeKey = "push-type"
    let core: HTTP2Core
    let operation: String
    let requestID: String

    func reply(_ status: Int, _ outcome: String, headers: [(String, String)] = [], body: [UInt8] = []) -> HTTP2Connection.Outcome {
        core.count { $0.channelAnswers["\(operation) \(outcome)", default: 0] += 1 }
        return .channel(status: status, headers: [(APNsChannelManagement.Header.requestID, requestID)] + headers, body: body)
    }

    func refuse(_ status: Int, _ reason: String) -> HTTP2Connection.Outcome {
        reply(status, reason, body: APNsErrorBody(reasonText: reason).encoded())
    }

    func refuseChannel(_ reason: APNsChannelReason) -> HTTP2Connection.Outcome { refuse(reason.status, reason.rawValue) }
    func refuseAPNs(_ reason: APNsReason) -> HTTP2Connection.Outcome { refuse(reason.status, reason.rawValue) }
}
