import Foundation
import NIOCore

/// A gateway address.
public struct GatewayAddress: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `host:port`.
    public init?(_ text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]) else { return nil }
        self.init(host: String(text[..<colon]), port: port)
    }

    public var description: String { "\(host):\(port)" }

    public static let production = GatewayAddress(host: "gateway.push.apple.com", port: 2195)
}

/// Exponential back-off with full jitter and a cap (Apple's "Best Practices for Managing Connections": "APNs treats rapid connection and
/// disconnection as a denial-of-service attack").
public struct ReconnectPolicy: Sendable {
    /// The wait before the first retry (attempt 0), before jitter.
    public var initialDelay: Duration {
        get { Duration(initial) }
        set { initial = TimeAmount(newValue) }
    }
    /// No wait is longer.
    public var maximumDelay: Duration {
        get { Duration(maximum) }
        set { maximum = TimeAmount(newValue) }
    }
    public var multiplier = 2.0
    /// Fraction of the delay drawn at random (0…1).
    public var jitter = 0.5
    /// Connection attempts per second allowed to one gateway address, over all shards of the process.
    public var attemptsPerSecondPerGateway = 20.0
    /// The two delays in the event loop's unit, as every reconnect and every retry (`RetryBudget`) reads them.
    private var initial = TimeAmount.milliseconds(50)
    private var maximum = TimeAmount.seconds(30)

    public init() {}

    /// Delay before attempt `n` (0 = the first retry after a failure).
    public func delay(attempt n: Int, random: inout some RandomNumberGenerator) -> TimeAmount {
        let cap = Double(maximum.nanoseconds)
        let base = min(cap, Double(initial.nanoseconds) * Foundation.pow(multiplier, Double(min(n, 40))))
        let jittered = base * (1 - jitter) + base * jitter * Double.random(in: 0...1, using: &random)
        return .nanoseconds(Int64(min(cap, jittered)))
    }
}
