/// A notification payload: the `aps` dictionary (Apple's "The Notification Payload", Table 3-1) plus custom top-level keys.
///
/// Build one in code, or read one from a job's JSON with `Payload(json:)`; `PayloadEncoder` turns it
/// into the compact bytes that go on the wire, checking the size limit.
public struct Payload: Sendable, Hashable {
    public var aps: APS
    /// Keys outside the Apple-reserved `aps` namespace, in order. "Custom values must use the JSON
    /// structured and primitive types."
    public var custom: [CustomKey]

    public struct CustomKey: Sendable, Hashable {
        public var key: String
        public var value: JSONValue
        public init(_ key: String, _ value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    public init(aps: APS = APS(), custom: [CustomKey] = []) {
        self.aps = aps
        self.custom = custom
    }

    /// True when `aps` holds only `content-available`: a silent notification, which must not be sent
    /// with priority 10 (item 5: "It is an error to use this priority for a push that contains only
    /// the content-available key").
    public var isContentAvailableOnly: Bool {
        aps.contentAvailable && aps.alert == nil && aps.badge == nil && aps.sound == nil && aps.category == nil
            && aps.other.isEmpty
    }

    /// Checks the payload can go with `priority`.
    public func validate(priority: Priority) throws(PayloadError) {
        if priority == .immediate && isContentAvailableOnly { throw .priority10WithContentAvailableOnly }
    }
}

/// The `aps` dictionary: every key of Table 3-1.
public struct APS: Sendable, Hashable {
    /// "If this property is included, the system displays a standard alert."
    public var alert: Alert?
    /// "The number to display as the badge of the app icon." 0 removes the badge.
    public var badge: Int?
    /// A sound file name in the app bundle, or "default".
    public var sound: String?
    /// Sent as `"content-available":1` when true: a silent, background-fetch notification.
    public var contentAvailable: Bool
    /// The identifier of a notification category with custom actions.
    public var category: String?
    /// `aps` keys that Table 3-1 does not list (added by later iOS versions), passed through unchanged.
    public var other: [Payload.CustomKey]

    public init(
        alert: Alert? = nil, badge: Int? = nil, sound: String? = nil, contentAvailable: Bool = false,
        category: String? = nil, other: [Payload.CustomKey] = []
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.contentAvailable = contentAvailable
        self.category = category
        self.other = other
    }
}

/// The `alert` property: "You may specify a string as the value of alert or a dictionary as its value."
public enum Alert: Sendable, Hashable {
    case text(String)
    case dictionary(AlertDictionary)

    /// The message text: the string, or the dictionary's `body`.
    public var body: String? {
        switch self {
        case .text(let s): s
        case .dictionary(let d): d.body
        }
    }
}

/// A value that may be absent (the enclosing optional), JSON `null`, or a value. Table 3-2 gives
/// `null` a meaning for three keys: e.g. `"action-loc-key": null` shows an alert with one button.
public enum Nullable<Value: Sendable & Hashable>: Sendable, Hashable {
    case null
    case value(Value)
}

/// The child properties of `alert` (Table 3-2).
public struct AlertDictionary: Sendable, Hashable {
    public var title: String?
    public var body: String?
    public var titleLocKey: Nullable<String>?
    public var titleLocArgs: Nullable<[String]>?
    public var actionLocKey: Nullable<String>?
    public var locKey: String?
    public var locArgs: [String]?
    public var launchImage: String?
    /// Alert keys that Table 3-2 does not list, passed through unchanged.
    public var other: [Payload.CustomKey]

    public init(
        title: String? = nil, body: String? = nil, titleLocKey: Nullable<String>? = nil,
        titleLocArgs: Nullable<[String]>? = nil, actionLocKey: Nullable<String>? = nil, locKey: String? = nil,
        locArgs: [String]? = nil, launchImage: String? = nil, other: [Payload.CustomKey] = []
    ) {
        self.title = title
        self.body = body
        self.titleLocKey = titleLocKey
        self.titleLocArgs = titleLocArgs
        self.actionLocKey = actionLocKey
        self.locKey = locKey
        self.locArgs = locArgs
        self.launchImage = launchImage
        self.other = other
    }

    /// True when the dictionary says nothing but `body`: the spec says to send a plain string then
    /// ("Don't specify a dictionary as the value of alert if the dictionary only has the body property").
    public var isBodyOnly: Bool {
        body != nil && title == nil && titleLocKey == nil && titleLocArgs == nil && actionLocKey == nil
            && locKey == nil && locArgs == nil && launchImage == nil && other.isEmpty
    }
}

/// Why a payload cannot be sent.
public enum PayloadError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The encoded payload is larger than the limit of the format it will be sent in.
    case tooLarge(size: Int, limit: Int)
    /// Priority 10 with an `aps` that holds only `content-available`.
    case priority10WithContentAvailableOnly
    /// The JSON is not a payload: the path of the offending key and what was expected there.
    case invalid(path: String, expected: String)

    public var description: String {
        switch self {
        case .tooLarge(let size, let limit): "payload is \(size) bytes, over the limit of \(limit)"
        case .priority10WithContentAvailableOnly:
            "priority 10 is invalid for a payload whose aps holds only content-available (use priority 5)"
        case .invalid(let path, let expected): "payload \(path): expected \(expected)"
        }
    }
}
