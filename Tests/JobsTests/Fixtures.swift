import APNsProtocol
import Jobs

/// Job messages for the tests: a valid job whose keys can be replaced, removed or added as raw JSON text.
enum Fixtures {
    static let now: UInt32 = 1_767_000_000
    static let tokenHex = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
    static let token = try! DeviceToken(hex: tokenHex)

    static let basePayload = #"{"aps":{"alert":"Spring sale: 20% off","badge":1,"sound":"default"},"acme":1}"#

    /// The keys of the valid job, in order, as raw JSON text.
    static let base: [(String, String)] = [
        ("id", #""spring-sale:000001""#),
        ("app", #""com.example.shop""#),
        ("token", "\"\(tokenHex)\""),
        ("payload", basePayload),
    ]

    /// `changes`: key → raw JSON text (replaces, or appends a new key), or nil to remove the key.
    static func job(_ changes: [String: String?] = [:], order extra: [String] = []) -> [UInt8] {
        var members: [(String, String)] = []
        for (key, value) in base {
            if let change = changes[key] {
                if let change { members.append((key, change)) }
            } else {
                members.append((key, value))
            }
        }
        let known = Set(base.map(\.0))
        for key in (extra + changes.keys.sorted()) where !known.contains(key) && !members.contains(where: { $0.0 == key }) {
            if let value = changes[key] ?? nil { members.append((key, value)) }
        }
        return Array(("{" + members.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}").utf8)
    }

    static func json(_ s: String) -> [UInt8] { Array(s.utf8) }
    static func string(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }
    static func quoted(_ s: String) -> String { "\"\(s)\"" }
}
