/// `apns-priority`: Apple, "Sending notification requests to APNs": "10 — send the notification
/// immediately; 5 — send the notification based on power considerations on the user's device;
/// 1 — prioritize the device's power considerations over all other factors".
public enum APNsPriority: Int, Sendable, Hashable, CaseIterable {
    case immediate = 10
    case throttled = 5
    case powerSaving = 1
}

/// One provider API request that met Apple's contract.
public struct APNsRequest: Sendable, Hashable {
    public var token: DeviceToken
    /// `apns-topic`; nil when absent (allowed on a certificate connection: the certificate's topic).
    public var topic: String?
    /// `apns-id` as sent; nil when absent (the server generates one and returns it).
    public var apnsID: String?
    /// `apns-expiration`, UNIX seconds; nil when absent.
    public var expiration: Int64?
    /// `apns-priority`; nil when absent (APNs then uses 10).
    public var priority: APNsPriority?
    public var collapseID: String?
    /// `apns-push-type`; nil when absent (Apple: required for watchOS, recommended elsewhere).
    public var pushType: APNsPushType?
    /// The `authorization` header as sent (`bearer <JWT>`), nil when absent.
    public var authorization: String?

    /// The push type APNs applies: the header's, `alert` when absent.
    public var effectivePushType: APNsPushType { pushType ?? .alert }
    /// The priority APNs applies: the header's, 10 when absent.
    public var effectivePriority: APNsPriority { priority ?? .immediate }
}

/// Why a request broke the contract: the reason and, through it, the HTTP status.
public struct APNsRejection: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: APNsReason
    public init(_ reason: APNsReason) { self.reason = reason }
    public var status: Int { reason.status }
    public var description: String { reason.description }
}

/// Apple's contract for one provider API request, as pure code: the simulator runs it on every
/// request, and a client can run it before sending. No I/O, no allocation beyond the result's strings.
///
/// Checks, in order (the first failure is the answer): `:method` POST (405 MethodNotAllowed); `:path`
/// `/3/device/<hex>`, the token's hex of any size `DeviceToken` takes (an even count of 16…200 digits:
/// Apple, "APNs device tokens are of variable length. Do not hard-code their size"; 64 today), else
/// 404 BadPath, 400 MissingDeviceToken, 400 BadDeviceToken; each `apns-*`
/// header and `authorization` at most once (400 DuplicateHeaders); `apns-push-type` known
/// (InvalidPushType); `apns-topic` well formed and carrying the push type's suffix (BadTopic), present
/// when required (MissingTopic); `apns-id` a UUID (BadMessageId); `apns-priority` 10, 5 or 1
/// (BadPriority); `apns-expiration` whole non-negative seconds (BadExpirationDate); `apns-collapse-id`
/// at most 64 bytes (BadCollapseId); payload present (PayloadEmpty) and within the push type's limit
/// (413 PayloadTooLarge); a background push at priority 5 or 1 with `content-available` and no alert,
/// sound or badge (BadPriority, InvalidPushType); a `liveactivity` push at priority 10 or 5
/// (BadPriority) whose payload follows Apple's rules for its event (`LiveActivityPayload`:
/// InvalidPushType). Authentication is the server's
/// business (403s).
public struct APNsRequestValidator: Sendable {
    public init() {}

    /// `requireTopic`: true on token-based connections ("MissingTopic: The apns-topic header of the
    /// request isn't specified and is required"); a certificate connection may omit it. `headers` is an
    /// array, not `some Sequence`: a public generic is not specialized across modules, and the
    /// simulator runs this for every request it answers.
    public func validate(
        method: String?, path: String?, headers: [(String, String)], payload: [UInt8], requireTopic: Bool
    ) -> Result<APNsRequest, APNsRejection> {
        payload.withUnsafeBytes { validate(method: method, path: path, headers: headers, payload: $0, requireTopic: requireTopic) }
    }

    public func validate(
        method: String?, path: String?, headers: [(String, String)], payload: UnsafeRawBufferPointer,
        requireTopic: Bool
    ) -> Result<APNsRequest, APNsRejection> {
        guard method == "POST" else { return .failure(APNsRejection(.methodNotAllowed)) }
        let token: DeviceToken
        switch Self.token(path: path) {
        case .success(let t): token = t
        case .failure(let rejection): return .failure(rejection)
        }
        guard let h = RequestHeaders(headers) else { return .failure(APNsRejection(.duplicateHeaders)) }

        var givenPushType: APNsPushType?
        if let pushTypeText = h.pushType {
            guard let known = APNsPushType(rawValue: pushTypeText) else { return .failure(APNsRejection(.invalidPushType)) }
            givenPushType = known
        }
        let pushType = givenPushType ?? .alert

        if let topic = h.topic {
            guard Self.isWellFormedTopic(topic) else { return .failure(APNsRejection(.badTopic)) }
            if pushType != .mdm, pushType.bundleID(ofTopic: Substring(topic)) == nil {
                return .failure(APNsRejection(.badTopic))
            }
        } else if requireTopic || pushType.topicSuffix != nil {
            // A suffixed push type cannot borrow the certificate's bare bundle id.
            return .failure(APNsRejection(.missingTopic))
        }

        if let id = h.id, !Self.isUUID(id) { return .failure(APNsRejection(.badMessageId)) }

        var givenPriority: APNsPriority?
        if let priorityText = h.priority {
            guard let number = Int(priorityText), let known = APNsPriority(rawValue: number) else {
                return .failure(APNsRejection(.badPriority))
            }
            givenPriority = known
        }

        var expiration: Int64?
        if let expirationText = h.expiration {
            guard !expirationText.isEmpty, expirationText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let seconds = Int64(expirationText)
            else { return .failure(APNsRejection(.badExpirationDate)) }
            expiration = seconds
        }

        if let collapseID = h.collapseID, collapseID.utf8.count > APNsHeader.maxCollapseIDBytes {
            return .failure(APNsRejection(.badCollapseId))
        }

        if let rejection = Self.payloadRejection(payload, pushType: pushType, priority: givenPriority ?? .immediate) {
            return .failure(rejection)
        }

        return .success(
            APNsRequest(
                token: token, topic: h.topic, apnsID: h.id, expiration: expiration, priority: givenPriority,
                collapseID: h.collapseID, pushType: givenPushType, authorization: h.authorization))
    }

    /// The device token of `:path` (`/3/device/<hex>`): a path that is not that is BadPath, no token
    /// MissingDeviceToken, a token `DeviceToken` does not take BadDeviceToken.
    private static func token(path: String?) -> Result<DeviceToken, APNsRejection> {
        guard let path, path.utf8.starts(with: APNsHeader.devicePathPrefix.utf8) else { return .failure(APNsRejection(.badPath)) }
        let hex = path.utf8.dropFirst(APNsHeader.devicePathPrefix.utf8.count)
        guard !hex.isEmpty else { return .failure(APNsRejection(.missingDeviceToken)) }
        guard !hex.contains(UInt8(ascii: "/")) else { return .failure(APNsRejection(.badPath)) }
        let parsed = hex.withContiguousStorageIfAvailable { try? DeviceToken(hexBytes: UnsafeRawBufferPointer($0)) }
        guard let token = parsed ?? (try? DeviceToken(hex: Substring(hex))) else {
            return .failure(APNsRejection(.badDeviceToken))
        }
        return .success(token)
    }

    /// The headers the contract reads, each as sent. Collected in one pass, since the simulator runs
    /// this for every request; a bit per header tells a duplicate.
    private struct RequestHeaders {
        var authorization: String?
        var id: String?
        var topic: String?
        var pushType: String?
        var priority: String?
        var expiration: String?
        var collapseID: String?

        /// nil when one of them is given twice (DuplicateHeaders).
        init?(_ headers: [(String, String)]) {
            var seen: UInt8 = 0
            var duplicate = false
            func once(_ bit: UInt8, _ slot: inout String?, _ value: String) {
                if seen & bit != 0 { duplicate = true }
                seen |= bit
                slot = value
            }
            for (name, value) in headers {
                switch name {
                case APNsHeader.authorization: once(1 << 0, &authorization, value)
                case APNsHeader.id: once(1 << 1, &id, value)
                case APNsHeader.topic: once(1 << 2, &topic, value)
                case APNsHeader.pushType: once(1 << 3, &pushType, value)
                case APNsHeader.priority: once(1 << 4, &priority, value)
                case APNsHeader.expiration: once(1 << 5, &expiration, value)
                case APNsHeader.collapseID: once(1 << 6, &collapseID, value)
                default: break
                }
            }
            if duplicate { return nil }
        }
    }

    /// What is wrong with the payload for its push type and priority (nil: nothing): its size, and the
    /// rules of background and Live Activity pushes, the only ones whose JSON is parsed here.
    private static func payloadRejection(
        _ payload: UnsafeRawBufferPointer, pushType: APNsPushType, priority: APNsPriority
    ) -> APNsRejection? {
        guard !payload.isEmpty else { return APNsRejection(.payloadEmpty) }
        guard payload.count <= pushType.maxPayloadBytes else { return APNsRejection(.payloadTooLarge) }

        if pushType == .background {
            // Apple: for background notifications "you must set the value of apns-priority to 5"
            // (absent means 10, so it must be given), and the aps dictionary holds content-available
            // alone: "Don't include the alert, badge, or sound keys". Parsed only for this push type.
            guard priority != .immediate else { return APNsRejection(.badPriority) }
            guard let aps = (try? JSONParser.parse(payload))?["aps"], aps["content-available"] != nil,
                aps["alert"] == nil, aps["sound"] == nil, aps["badge"] == nil
            else { return APNsRejection(.invalidPushType) }
        }

        if pushType == .liveactivity {
            // "Set the value for the apns-priority header field to 5 or 10" (the same article).
            guard priority != .powerSaving else { return APNsRejection(.badPriority) }
            // Apple's per-event payload rules ("Starting and updating Live Activities with ActivityKit
            // push notifications": LiveActivityPayload). Apple documents no reason string for a Live
            // Activity payload that breaks them; the simulator answers InvalidPushType, as for a
            // background push whose payload does not fit its type. Parsed only for this push type.
            guard let json = try? JSONParser.parse(payload), let read = try? Payload(json: json),
                (try? LiveActivityPayload.validate(read)) != nil
            else { return APNsRejection(.invalidPushType) }
        }
        return nil
    }

    /// A bundle id (with suffix): printable ASCII, no spaces, 1…255 bytes.
    static func isWellFormedTopic(_ topic: String) -> Bool {
        let bytes = topic.utf8
        return !bytes.isEmpty && bytes.count <= 255 && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// 8-4-4-4-12 hex digits, either case (Apple: "a canonical UUID that's 32 lowercase hexadecimal
    /// digits, displayed in five groups separated by hyphens"; upper case is accepted as APNs does).
    public static func isCanonicalUUID(_ s: String) -> Bool { isUUID(s) }

    /// 8-4-4-4-12 hex digits, either case.
    public static func isUUID(_ s: String) -> Bool {
        var count = 0
        for (i, c) in s.utf8.enumerated() {
            count += 1
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard c == UInt8(ascii: "-") else { return false }
            } else {
                let lower = c | 0x20
                guard (c >= 0x30 && c <= 0x39) || (lower >= 0x61 && lower <= 0x66) else { return false }
            }
        }
        return count == 36
    }
}
