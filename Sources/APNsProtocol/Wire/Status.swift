/// The status byte of an error-response packet (Apple's "The Binary Interface and Notification Format", Table 5-1 "Codes in error-response packet").
///
/// A struct over the raw byte rather than a closed enum: a gateway may send a code the table does not
/// list (there is no 9, for instance), and that must be kept and reported, never crash the reader.
public struct ErrorStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// 0: No errors encountered.
    public static let noErrors = ErrorStatus(rawValue: 0)
    /// 1: Processing error.
    public static let processingError = ErrorStatus(rawValue: 1)
    /// 2: Missing device token.
    public static let missingDeviceToken = ErrorStatus(rawValue: 2)
    /// 3: Missing topic.
    public static let missingTopic = ErrorStatus(rawValue: 3)
    /// 4: Missing payload.
    public static let missingPayload = ErrorStatus(rawValue: 4)
    /// 5: Invalid token size.
    public static let invalidTokenSize = ErrorStatus(rawValue: 5)
    /// 6: Invalid topic size.
    public static let invalidTopicSize = ErrorStatus(rawValue: 6)
    /// 7: Invalid payload size.
    public static let invalidPayloadSize = ErrorStatus(rawValue: 7)
    /// 8: Invalid token.
    public static let invalidToken = ErrorStatus(rawValue: 8)
    /// 10: Shutdown. The identifier names the last notification that was successfully processed.
    public static let shutdown = ErrorStatus(rawValue: 10)
    /// 255: None (unknown).
    public static let unknown = ErrorStatus(rawValue: 255)

    /// Every code of Table 5-1, in table order.
    public static let table51: [ErrorStatus] = [
        .noErrors, .processingError, .missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize,
        .invalidTopicSize, .invalidPayloadSize, .invalidToken, .shutdown, .unknown,
    ]

    /// True when Table 5-1 lists this code.
    public var isListed: Bool { Self.table51.contains(self) }

    /// The description Table 5-1 gives, or `unlisted status N`.
    public var summary: String {
        switch rawValue {
        case 0: "No errors encountered"
        case 1: "Processing error"
        case 2: "Missing device token"
        case 3: "Missing topic"
        case 4: "Missing payload"
        case 5: "Invalid token size"
        case 6: "Invalid topic size"
        case 7: "Invalid payload size"
        case 8: "Invalid token"
        case 10: "Shutdown"
        case 255: "None (unknown)"
        default: "Unlisted status \(rawValue)"
        }
    }

    public var description: String { "\(rawValue) (\(summary))" }
}
