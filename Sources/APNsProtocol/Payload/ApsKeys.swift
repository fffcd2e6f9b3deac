/// The `aps` keys Apple added after the 2015 tables that `APS` models ("Generating a remote notification",
/// tables "Keys to include in the aps dictionary", "… in the alert dictionary", "… in the sound
/// dictionary"; `content-changed` is WidgetKit's), checked
/// for their types. They stay in `APS.other` / `AlertDictionary.other` and are sent unchanged: reading
/// them into typed fields would change nothing on the wire and grow every payload value.
///
/// A wrong value is a `PayloadError.invalid` naming the key, which the job decoder
/// turns into `invalid-payload` (design §3.2), as for the keys of the older tables.
public enum ApsKeys {
    /// `interruption-level`: "A string that indicates the importance and delivery timing of a
    /// notification. The string values "passive", "active", "time-sensitive", or "critical" correspond to
    /// the UNNotificationInterruptionLevel enumeration cases."
    public static let interruptionLevels: Set<String> = ["passive", "active", "time-sensitive", "critical"]

    /// Checks one `aps` key the 2015 table does not know (`APS.init(json:)` calls it for each). Keys it
    /// does not know either pass unchecked: Apple may add more, and a Live Activity's keys are checked by
    /// `LiveActivityPayload` once the push type is known.
    static func check(apsKey key: String, _ value: JSONValue) throws(PayloadError) {
        let path = "aps.\(key)"
        switch key {
        case "thread-id", "target-content-id", "filter-criteria":
            // "thread-id — An app-specific identifier for grouping related notifications";
            // "target-content-id — The identifier of the window brought forward";
            // "filter-criteria — The criteria the system evaluates to determine if it displays the
            // notification in the current Focus." All three are strings.
            try string(value, path)
        case "mutable-content":
            // "The notification service app extension flag. If the value is 1, the system passes the
            // notification to your notification service app extension before delivery."
            try zeroOrOne(value, path)
        case "interruption-level":
            guard let s = value.stringValue, interruptionLevels.contains(s) else {
                throw .invalid(path: path, expected: "one of \"passive\", \"active\", \"time-sensitive\", \"critical\"")
            }
        case "relevance-score":
            // "Number"; its range depends on the push type (0…1 for a notification, any number for a
            // Live Activity), checked by `checkRanges(_:pushType:)`.
            guard number(value) != nil else { throw .invalid(path: path, expected: "a number") }
        case "content-changed":
            // WidgetKit push: `{"aps": {"content-changed": true}}` tells the system to reload the
            // widget's timelines.
            guard case .bool = value else { throw .invalid(path: path, expected: "true or false") }
        default:
            return
        }
    }

    /// `sound` as a dictionary, for critical alerts: "critical — The critical alert flag. Set to 1 to
    /// enable the critical alert. name — The name of a sound file in your app's main bundle or in the
    /// Library/Sounds folder of your app's container directory. Specify the string "default" to play the
    /// system sound. volume — The volume for the critical alert's sound. Set this to a value between 0
    /// (silent) and 1 (full volume)."
    static func check(soundDictionary members: [(key: String, value: JSONValue)]) throws(PayloadError) {
        for (key, value) in members {
            let path = "aps.sound.\(key)"
            switch key {
            case "critical": try zeroOrOne(value, path)
            case "name": try string(value, path)
            case "volume":
                guard let v = number(value), v >= 0, v <= 1 else { throw .invalid(path: path, expected: "a number from 0 to 1") }
            default: continue
            }
        }
    }

    /// Alert dictionary keys added since Table 3-2 (`AlertDictionary.init(json:)` calls it for the keys it
    /// does not model). Apple's Table 2 ("Keys to include in the alert dictionary"): `subtitle` and
    /// `subtitle-loc-key` ("String"), `subtitle-loc-args` ("Array of strings"). The summary keys
    /// `summary-arg` (a string) and `summary-arg-count` (a whole number), which iOS 12 added for grouped
    /// notifications and Apple's current table no longer lists, are still sent by clients: typed when
    /// present. `title` and `body` as a `{"loc-key", "loc-args"}` dictionary are the Live Activity form
    /// (its alert is localized that way in Apple's examples), accepted here too.
    static func check(alertKey key: String, _ value: JSONValue, path: String) throws(PayloadError) {
        switch key {
        case "subtitle", "subtitle-loc-key", "summary-arg": try string(value, path)
        case "subtitle-loc-args": try strings(value, path)
        case "summary-arg-count":
            guard let n = value.intValue, n >= 0 else { throw .invalid(path: path, expected: "a whole number ≥ 0") }
        default: return
        }
    }

    /// `title` / `body` given as a dictionary: `{"loc-key": "…", "loc-args": ["…"]}` (Live Activity alerts).
    static func check(localizedText members: [(key: String, value: JSONValue)], path: String) throws(PayloadError) {
        var hasKey = false
        for (key, value) in members {
            switch key {
            case "loc-key":
                try string(value, "\(path).loc-key")
                hasKey = true
            case "loc-args": try strings(value, "\(path).loc-args")
            default: continue
            }
        }
        guard hasKey else { throw .invalid(path: path, expected: "a string, or a dictionary with a loc-key string") }
    }

    /// The rules that depend on the push type, run once it is known (the payload is read before).
    /// `relevance-score` is 0…1 for a notification: "The relevance score, a number between 0 and 1, that
    /// the system uses to sort the notifications from your app. […] If your remote notification updates a
    /// Live Activity, you can set any Double value; for example, 25, 50, 75, or 100." So it is not
    /// checked here for `.liveactivity`.
    public static func checkRanges(_ payload: Payload, pushType: APNsPushType?) throws(PayloadError) {
        guard pushType != .liveactivity, !payload.aps.other.isEmpty else { return }
        for o in payload.aps.other where o.key == "relevance-score" {
            guard let v = number(o.value), v >= 0, v <= 1 else {
                throw .invalid(path: "aps.relevance-score", expected: "a number from 0 to 1")
            }
        }
    }

    // MARK: helpers

    static func number(_ value: JSONValue) -> Double? {
        if case .number(let n) = value { return Double(n) }
        return nil
    }

    static func string(_ value: JSONValue, _ path: String) throws(PayloadError) {
        guard value.stringValue != nil else { throw .invalid(path: path, expected: "a string") }
    }

    static func strings(_ value: JSONValue, _ path: String) throws(PayloadError) {
        guard let a = value.arrayValue, a.allSatisfy({ $0.stringValue != nil }) else {
            throw .invalid(path: path, expected: "an array of strings")
        }
    }

    static func zeroOrOne(_ value: JSONValue, _ path: String) throws(PayloadError) {
        guard let n = value.intValue, n == 0 || n == 1 else { throw .invalid(path: path, expected: "the number 1 (or 0)") }
    }
}
