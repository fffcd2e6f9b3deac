extension PipelineConfiguration {
    /// Fewest characters `metrics.auth_token` may have: a short token can be guessed over the network
    /// (16 hex characters are 64 bits; `openssl rand -hex 32` gives 64 characters).
    public static let metricsAuthTokenMinimumLength = 16

    /// Checks `metrics.auth_token` (or `metrics.control_token`: `key`). It travels as `Authorization:
    /// Bearer <token>`, so it must be an RFC 6750 `b64token` (`1*( ALPHA / DIGIT / "-" / "." / "_" / "~" /
    /// "+" / "/" ) *"="`): anything else could not be sent by a scraper or a browser as written. The
    /// errors never quote the value (it is a secret).
    static func checkedMetricsAuthToken(_ token: String, file: String, key: String = "metrics.auth_token") throws -> String {
        guard !token.isEmpty else {
            throw ConfigurationError(
                file: file, key: key, problem: "expected a token (e.g. `${file:/run/secrets/ops-token}`), found an empty value")
        }
        let body = token.utf8.reversed().drop { $0 == UInt8(ascii: "=") }
        let allowed = body.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"), UInt8(ascii: "/"): true
            default: false
            }
        }
        guard allowed, !body.isEmpty else {
            throw ConfigurationError(
                file: file, key: key,
                problem: "expected a bearer token of the characters A-Z a-z 0-9 - . _ ~ + / (then = only at the end), "
                    + "found a value with a space, a line break or another character (e.g. `openssl rand -hex 32` makes a good one)")
        }
        guard token.utf8.count >= metricsAuthTokenMinimumLength else {
            throw ConfigurationError(
                file: file, key: key,
                problem: "expected a token of at least \(metricsAuthTokenMinimumLength) characters, found \(token.utf8.count) "
                    + "(e.g. `openssl rand -hex 32`)")
        }
        return token
    }

    /// Checks `metrics.control_token`: as the read token, and another value (the point of it is that
    /// reading the metrics does not allow stopping a campaign).
    static func checkedMetricsControlToken(_ token: String, readToken: String?, file: String) throws -> String {
        let key = "metrics.control_token"
        let checked = try checkedMetricsAuthToken(token, file: file, key: key)
        guard checked != readToken else {
            throw ConfigurationError(
                file: file, key: key,
                problem: "expected a token of its own, found the value of metrics.auth_token (whoever reads the metrics could then "
                    + "pause or cancel campaigns; e.g. `openssl rand -hex 32` for another)")
        }
        return checked
    }
}
