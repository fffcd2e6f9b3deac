import APNsProtocol

/// The rules a job's payload and priority must follow for its push type, beside
/// `JobDecoder.validate` so that that function only calls them.
extension JobDecoder {
    /// Checked once the push type and the priority are known (the payload was read before them):
    ///
    /// - `relevance-score` 0…1 unless a Live Activity (`ApsKeys.checkRanges`) — `invalid-payload`;
    /// - `liveactivity`: the payload as Apple documents its event (`LiveActivityPayload`) —
    ///   `invalid-live-activity`; to a device, priority 10 or 5 — `invalid-priority`: "Set the value for
    ///   the apns-priority header field to 5 or 10" ("Starting and updating Live Activities with
    ///   ActivityKit push notifications", "Construct the ActivityKit remote push notification payload");
    ///   as a broadcast (`broadcast`), 10, 5 or 1: "Specify 1 to prioritize the device's power
    ///   considerations over all other factors for delivery, and prevent awakening the device" ("Sending
    ///   broadcast push notification requests to APNs", `APNsBroadcast.priorities`);
    /// - `location`: priority 10 or 5 — `invalid-priority` ("If the location query requires an immediate
    ///   response from the Location Push Service Extension, set notification apns-priority to 10;
    ///   otherwise, use 5"; 1 would "prevent awakening the device" the query is for);
    /// - priority 1 for a payload that shows nothing (content-available only): such a push is a
    ///   background push: "Always use priority 5. Using priority 10 is an error" — `invalid-priority`.
    ///
    /// An `alert` may use 1: Apple's "If the notification requires immediate action from the user, set
    /// notification priority to 10; otherwise use 5" is advice, and 1 ("prioritize the device's power
    /// considerations over all other factors for delivery, and prevent awakening the device") is the
    /// choice for an alert that can wait.
    static func checkPushTypeRules(
        _ payload: Payload, pushType: APNsPushType?, priority: Priority, broadcast: Bool = false
    ) throws(JobError) {
        do throws(PayloadError) {
            try ApsKeys.checkRanges(payload, pushType: pushType)
        } catch {
            throw JobError(.invalidPayload, describe(error, prefix: "payload."))
        }
        if pushType == .liveactivity {
            do throws(LiveActivityPayload.Invalid) {
                try LiveActivityPayload.validate(payload)
            } catch {
                throw JobError(.invalidLiveActivity, "a Live Activity (push_type \"liveactivity\") \(error.description)")
            }
            if priority == .powerFirst && !broadcast {
                throw JobError(.invalidPriority, "a Live Activity push to a device must have priority 10 or 5, got 1")
            }
        }
        if pushType == .location && priority == .powerFirst {
            throw JobError(.invalidPriority, "a location push must have priority 10 or 5, got 1")
        }
        if priority == .powerFirst && payload.isContentAvailableOnly {
            throw JobError(
                .invalidPriority,
                "priority 1 is invalid for a payload whose aps holds only content-available (a background push): send it with \"priority\": 5"
            )
        }
    }
}
