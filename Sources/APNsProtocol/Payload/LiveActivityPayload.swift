/// Apple's rules for the payload of a Live Activity push (`apns-push-type: liveactivity`), per event, as
/// pure code: the job decoder runs it on every `push_type: liveactivity` job (dead letter
/// `invalid-live-activity`), and the HTTP/2 simulator on every `liveactivity` request it answers.
///
/// Apple, "Generating a remote notification", table "Keys to include in the aps dictionary": `timestamp`
/// (Number) "The UNIX timestamp that marks the time when you send the remote notification that updates or
/// ends a Live Activity"; `event` (String) "To start the Live Activity, use start. To update the Live
/// Activity, use update. To end the Live Activity, use end"; `content-state` (Dictionary) "The updated or
/// final content for a Live Activity. The content of this dictionary must match the data you describe
/// with your custom ActivityAttributes implementation"; `stale-date` and `dismissal-date` (Number, UNIX
/// timestamps); `attributes-type` (String) "A string you use when you start a Live Activity with a remote
/// push notification. It must match the name of the structure that describes the dynamic data";
/// `attributes` (Dictionary) "The dictionary that contains data you pass to a Live Activity that you
/// start with a remote push notification"; `relevance-score` (Number: "If your remote notification
/// updates a Live Activity, you can set any Double value"). "Starting and updating Live Activities with
/// ActivityKit push notifications": "Set the timestamp to the current time in seconds since 1970"; "If you
/// end a Live Activity, include the final content state"; "Set the fields for the content-state key to
/// match your custom ContentState type"; a start "comes with the following requirements: Set the value of
/// the event field to start. Include an alert in the JSON payload. Include the attributes-type and
/// attributes keys"; iOS 18 adds `"input-push-token": 1` ("to start a Live Activity and receive a new
/// push token") and `input-push-channel` ("with the appropriate channel ID"); an update may carry an
/// `alert` ("To alert a person about a critical Live Activity update, optionally provide an alert").
///
/// Types are checked; a key that does not belong to the event is accepted and left to the device, as
/// Apple does not say APNs refuses it.
public enum LiveActivityPayload {
    public enum Event: String, Sendable, CaseIterable {
        case start, update, end
    }

    /// Why a Live Activity payload is refused: the key (`aps.<key>`) and what was expected there.
    public struct Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        public var path: String
        public var expected: String
        public var description: String { "payload \(path): expected \(expected)" }
    }

    /// Checks `payload` (already read by `Payload(json:)`, so `aps.alert` has the alert's types) and
    /// returns its event.
    @discardableResult
    public static func validate(_ payload: Payload) throws(Invalid) -> Event {
        var eventValue: JSONValue?
        var timestamp: JSONValue?
        var contentState: JSONValue?
        var attributesType: JSONValue?
        var attributes: JSONValue?
        for o in payload.aps.other {
            let value = o.value
            switch o.key {
            case "event": eventValue = value
            case "timestamp": timestamp = value
            case "content-state": contentState = value
            case "attributes-type": attributesType = value
            case "attributes": attributes = value
            case "stale-date", "dismissal-date":
                try epochSeconds(value, "aps.\(o.key)")
            case "relevance-score":
                guard ApsKeys.number(value) != nil else { throw Invalid(path: "aps.relevance-score", expected: "a number") }
            case "input-push-token":
                // Apple's push-to-start example: `"input-push-token": 1`.
                guard value.intValue == 1 else { throw Invalid(path: "aps.input-push-token", expected: "the number 1") }
            case "input-push-channel":
                guard let s = value.stringValue, !s.isEmpty else {
                    throw Invalid(path: "aps.input-push-channel", expected: "a channel id (a non-empty base64 string)")
                }
            default: continue
            }
        }
        guard let eventValue else { throw Invalid(path: "aps.event", expected: "\"start\", \"update\" or \"end\" (it is missing)") }
        guard let text = eventValue.stringValue, let known = Event(rawValue: text) else {
            throw Invalid(path: "aps.event", expected: "\"start\", \"update\" or \"end\"")
        }
        guard let timestamp else {
            throw Invalid(path: "aps.timestamp", expected: "the time the data was generated, in epoch seconds (it is missing)")
        }
        try epochSeconds(timestamp, "aps.timestamp")
        guard let contentState else {
            throw Invalid(path: "aps.content-state", expected: "the activity's content state, an object (it is missing)")
        }
        guard contentState.objectValue != nil else {
            throw Invalid(path: "aps.content-state", expected: "an object (the activity's ContentState)")
        }
        if known == .start {
            guard let attributesType else {
                throw Invalid(
                    path: "aps.attributes-type",
                    expected: "the name of the app's ActivityAttributes type, required to start (it is missing)")
            }
            guard let name = attributesType.stringValue, !name.isEmpty else {
                throw Invalid(path: "aps.attributes-type", expected: "a non-empty string (the ActivityAttributes type)")
            }
            guard let attributes else {
                throw Invalid(path: "aps.attributes", expected: "the activity's attributes, an object, required to start (it is missing)")
            }
            guard attributes.objectValue != nil else {
                throw Invalid(path: "aps.attributes", expected: "an object (the activity's attributes)")
            }
            guard payload.aps.alert != nil else {
                throw Invalid(path: "aps.alert", expected: "an alert, required to start a Live Activity (it is missing)")
            }
        }
        return known
    }

    /// A UNIX time in whole seconds (ActivityKit's dates in a push are seconds since 1970).
    static func epochSeconds(_ value: JSONValue, _ path: String) throws(Invalid) {
        guard let n = value.intValue, n >= 0 else { throw Invalid(path: path, expected: "a whole number of epoch seconds") }
    }
}
