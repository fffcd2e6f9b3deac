import APNsProtocol
import Foundation
import GatewaySimulator

extension HTTP2Connection {
    /// A broadcast (`POST /4/broadcasts/apps/<bundle id>`; Apple, "Sending broadcast push notification
    /// requests to APNs"; the contract is `APNsBroadcast`): the request's shape, then authentication
    /// ("APNs validates the request using either the provided authentication token or your server's
    /// certificate"), then the channel ("If authentication succeeds, APNs then validates the channel ID":
    /// 400 `ChannelNotRegistered` for one the app does not have), then the expiration against the
    /// channel's storage policy ("Providing a nonzero expiration for a channel created with the No Message
    /// Stored storage policy results in message rejection": 400 `BadExpirationDate`,
    /// `APNsBroadcastExpiration`), then delivery "to all the devices subscribed to the channel" — here one
    /// record saying the channel and how many devices it reached (`channel_subscribers` when the channel
    /// was created).
    ///
    /// A certificate is refused as for any Live Activity push (`TopicDisallowed`): Apple's Live Activity
    /// article says "Certificate-based authentication is not supported for these APNs pushes", and the
    /// pipeline sends broadcasts over token authentication only. The answer is 200 with the request's
    /// `apns-request-id` (or one made here), and in sandbox mode an `apns-unique-id`; refusals carry
    /// `{"reason": …}` as every other answer.
    func broadcastRequest(
        bundleID: String, method: String, fields: [(String, String)], payload: [UInt8], streamID: Int,
        certificateTopic: (topic: String, auth: String)?
    ) -> Outcome {
        let sent = fields.first { $0.0 == APNsHeader.requestID }?.1
        let requestID = sent.flatMap { APNsRequestValidator.isCanonicalUUID($0) ? $0 : nil } ?? makeUUID()
        func answer(_ status: Int, reason: String?) -> Outcome {
            core.count {
                $0.byStatus[status, default: 0] += 1
                if let reason { $0.byReason[reason, default: 0] += 1 }
            }
            var headers = [(APNsHeader.requestID, requestID)]
            if core.configuration.sandbox { headers.append((APNsHeader.uniqueID, makeUUID())) }
            return .channel(status: status, headers: headers, body: reason.map { APNsErrorBody(reasonText: $0).encoded() } ?? [])
        }
        func refuse(_ refusal: APNsBroadcastRefusal) -> Outcome { answer(refusal.status, reason: refusal.reason) }

        let request: APNsBroadcastRequest
        switch APNsBroadcast.validate(bundleID: bundleID, method: method, headers: fields, payload: payload) {
        case .failure(let refusal): return refuse(refusal)
        case .success(let r): request = r
        }
        let nowMillis = Int64(Date().timeIntervalSince1970 * 1000)
        let auth: String
        if certificateTopic != nil {
            return refuse(APNsBroadcastRefusal(.topicDisallowed))
        } else {
            guard let authorization = request.authorization else { return refuse(APNsBroadcastRefusal(.missingProviderToken)) }
            switch checkToken(authorization, now: nowMillis / 1000) {
            case .failure(let reason): return refuse(APNsBroadcastRefusal(reason))
            case .success(let a): auth = a
            }
        }
        raiseStreamLimit()
        guard let reached = core.channels.subscribers(app: bundleID, id: request.channelID),
            let policy = core.channels.policy(app: bundleID, id: request.channelID).flatMap(APNsChannelStoragePolicy.init(rawValue:))
        else {
            return refuse(APNsBroadcastRefusal(.channelNotRegistered))
        }
        if let expiration = request.expiration, !APNsBroadcastExpiration.accepts(expiration, on: policy) {
            return refuse(APNsBroadcastRefusal(.badExpirationDate))
        }
        if core.recorder.isEnabled {
            var accepted = AcceptedRequest(
                time: nowMillis, connection: id, stream: streamID, app: bundleID, token: APNsBroadcast.placeholderToken,
                payloadHash: AcceptedRequest.hash(payload), jobID: PayloadFacts.jobID(in: payload), apnsID: requestID,
                collapseID: request.collapseID, pushType: APNsBroadcast.pushType.rawValue, priority: request.priority?.rawValue,
                expiration: request.expiration, auth: auth)
            accepted.broadcast = (request.channelID, reached)
            if core.configuration.recordsPath != nil { accepted.appendLine(to: &pendingLines) }
            if core.configuration.keepRecordsInMemory { pendingRecords.append(accepted.record) }
        }
        core.count {
            $0.broadcasts += 1
            $0.broadcastDevicesReached += reached
        }
        return answer(200, reason: nil)
    }
}
