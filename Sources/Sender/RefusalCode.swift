import APNsProtocol

/// The code of a refusal as counters name it (`rejected:<code>` in Redis, the `code` label of
/// `apns_gateway_refusals_total`), and the bound on the gateway's own text where it is kept whole.
///
/// A gateway chooses the text of its answer: a broken or hostile one (or a proxy in the way) could send
/// a new reason per request, each a Redis field and a Prometheus series of its own, up to kilobytes
/// long. So only what Apple documents, and the pipeline's own codes, are counted by name; anything else
/// is counted as ``other``, and the text itself goes, bounded by ``maxTextBytes``, to the dead letter
/// (`gateway-reason`) and the outcome message (`code`), where it is one value among the job's.
public enum RefusalCode {
    /// The counter name of a code outside ``known``.
    public static let other = "other"
    /// The longest gateway text kept in a dead letter's `gateway-reason` or an outcome's `code`.
    public static let maxTextBytes = 256

    /// The codes counted by name: Apple's reasons for the provider API (`APNsReason`) and for broadcasts
    /// (`APNsChannelReason`); the HTTP statuses Apple documents, for an answer without a reason; the
    /// binary interface's statuses of Table 5-1; and the codes this pipeline gives (a give-up, an expiry,
    /// a broadcast the binary interface cannot carry).
    public static let known: Set<String> = {
        var codes = Set(APNsReason.allCases.map(\.rawValue))
        codes.formUnion(APNsChannelReason.allCases.map(\.rawValue))
        codes.formUnion(Set(APNsReason.allCases.map(\.status)).union(APNsChannelReason.allCases.map(\.status)).map(String.init))
        codes.formUnion(ErrorStatus.table51.map { String($0.rawValue) })
        codes.formUnion([RetryBudget.gaveUpReason, RetryBudget.expiredReason, BinaryTransport.noBroadcast])
        return codes
    }()

    /// `code` when counted by name, else ``other``.
    public static func label(_ code: String) -> String {
        known.contains(code) ? code : other
    }

    /// `text` within ``maxTextBytes`` of UTF-8: cut at a character boundary, ending in `…` when cut.
    public static func bounded(_ text: String) -> String {
        text.boundedUTF8(maxTextBytes)
    }
}

extension String {
    /// This text within `maxBytes` of UTF-8 (at least 4): cut at a character boundary, ending in `…`
    /// (3 bytes) when cut.
    public func boundedUTF8(_ maxBytes: Int) -> String {
        guard utf8.count > maxBytes else { return self }
        var out = ""
        var bytes = 0
        for character in self {
            let size = character.utf8.count
            if bytes + size > maxBytes - 3 { break }
            out.append(character)
            bytes += size
        }
        return out + "…"
    }
}
