import Foundation
import Yams

/// A configuration file that cannot be used: which file, which key, what was expected there.
public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    public var file: String
    public var key: String
    public var problem: String

    public var description: String { "\(file): \(key.isEmpty ? "(top level)" : key): \(problem)" }
}

/// `${NAME}` and `${file:/path}` in the scalar values of a pipeline file, so a production file can be
/// committed without its secrets (README "The pipeline"): `${NAME}` is the environment variable NAME,
/// `${file:/path}` the contents of a file (one trailing line break dropped: files written by `echo` or a
/// Kubernetes secret read the same), `$${` a literal `${`. Any other `$` is itself. A variable that is
/// not set, or a file that cannot be read, is an error naming the file and the key. Every value put in
/// is remembered (``secrets``) so that log lines can be redacted (``RedactingLogHandler``).
final class Substitution {
    let environment: [String: String]
    private(set) var secrets: [String] = []

    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// `raw` with its references replaced; `fail` makes the error for a problem (naming file and key).
    func apply(_ raw: String, fail: (String) -> ConfigurationError) throws -> String {
        guard raw.contains("${") else { return raw }
        var out = ""
        var rest = Substring(raw)
        while let dollar = rest.firstIndex(of: "$") {
            out += rest[..<dollar]
            rest = rest[dollar...]
            if rest.hasPrefix("$${") {
                out += "${"
                rest = rest.dropFirst(3)
            } else if rest.hasPrefix("${") {
                guard let close = rest.firstIndex(of: "}") else {
                    throw fail("unterminated `${` (write `$${` for a literal `${`)")
                }
                let reference = String(rest[rest.index(rest.startIndex, offsetBy: 2)..<close])
                let value = try resolve(reference, fail: fail)
                if !value.isEmpty { secrets.append(value) }
                out += value
                rest = rest[rest.index(after: close)...]
            } else {
                out += "$"
                rest = rest.dropFirst()
            }
        }
        return out + rest
    }

    private func resolve(_ reference: String, fail: (String) -> ConfigurationError) throws -> String {
        if reference.hasPrefix("file:") {
            let path = String(reference.dropFirst("file:".count))
            guard !path.isEmpty else { throw fail("`${file:}` names no file") }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw fail("cannot read the file \(path) (named by `${file:\(path)}`)")
            }
            guard var text = String(data: data, encoding: .utf8) else { throw fail("the file \(path) is not UTF-8 text") }
            if text.hasSuffix("\r\n") { text.removeLast(2) } else if text.hasSuffix("\n") { text.removeLast() }
            return text
        }
        let isLetter = { (c: Unicode.Scalar) in ("A"..."Z").contains(c) || ("a"..."z").contains(c) || c == "_" }
        let name = reference.unicodeScalars
        guard let first = name.first, isLetter(first), name.allSatisfy({ isLetter($0) || ("0"..."9").contains($0) }) else {
            throw fail(
                "`${\(reference)}` is neither an environment variable name (letters, digits, _) nor `file:/path` (write `$${` for a literal `${`)"
            )
        }
        guard let value = environment[reference] else { throw fail("environment variable \(reference) is not set") }
        return value
    }
}

/// Reads one YAML mapping with exact errors: every getter names the key's full path, every key that no
/// getter asked for is reported by `finish()` (a typo must not silently fall back to a default).
/// Scalar values go through ``Substitution`` first.
final class ConfigSection {
    let file: String
    let path: String
    let substitution: Substitution
    private var entries: [(key: String, node: Node)] = []
    private var used: Set<String> = []

    init(file: String, path: String, node: Node?, substitution: Substitution) throws {
        self.file = file
        self.path = path
        self.substitution = substitution
        guard let node else { return }
        guard case .mapping(let mapping) = node else {
            throw ConfigurationError(file: file, key: path, problem: "expected a mapping of keys to values")
        }
        for (k, v) in mapping {
            guard case .scalar(let s) = k else {
                throw ConfigurationError(file: file, key: path, problem: "keys must be plain strings")
            }
            entries.append((s.string, v))
        }
    }

    static func load(file: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ConfigSection {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw ConfigurationError(file: file, key: "", problem: "cannot read the file (\(error.localizedDescription))")
        }
        let node: Node?
        do {
            node = try Yams.compose(yaml: text)
        } catch {
            throw ConfigurationError(file: file, key: "", problem: "not valid YAML: \(error)")
        }
        return try ConfigSection(file: file, path: "", node: node, substitution: Substitution(environment: environment))
    }

    /// The text of a scalar node after substitution (nil for a list or a mapping).
    private func scalar(_ node: Node, key: String) throws -> String? {
        guard case .scalar(let s) = node else { return nil }
        return try substitution.apply(s.string) { ConfigurationError(file: file, key: keyPath(key), problem: $0) }
    }

    private func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    private func node(_ key: String) -> Node? {
        used.insert(key)
        return entries.first(where: { $0.key == key })?.node
    }

    func has(_ key: String) -> Bool { entries.contains { $0.key == key } }

    private func fail(_ key: String, _ expected: String, _ node: Node?) -> ConfigurationError {
        let found = node.map { n -> String in
            // The text as written: a substituted value may be a secret, its reference is not.
            if case .scalar(let s) = n {
                return "\"\(s.string)\"" + (s.string.contains("${") ? " (as written: the value put in is not shown)" : "")
            }
            if case .sequence = n { return "a list" }
            return "a mapping"
        }
        return ConfigurationError(
            file: file, key: keyPath(key), problem: "expected \(expected)" + (found.map { ", found \($0)" } ?? ""))
    }

    func string(_ key: String) throws -> String? {
        guard let n = node(key) else { return nil }
        guard let s = try scalar(n, key: key), !s.isEmpty else { throw fail(key, "a string", n) }
        return s
    }

    func string(_ key: String, default value: String) throws -> String { try string(key) ?? value }

    func requiredString(_ key: String, _ what: String) throws -> String {
        guard let s = try string(key) else {
            throw ConfigurationError(file: file, key: keyPath(key), problem: "missing: \(what)")
        }
        return s
    }

    func int(_ key: String, default value: Int, range: ClosedRange<Int> = 0...Int.max) throws -> Int {
        guard let n = node(key) else { return value }
        guard let s = try scalar(n, key: key), let i = Int(s), range.contains(i) else {
            throw fail(key, "a whole number in \(range.lowerBound)…\(range.upperBound == Int.max ? "" : String(range.upperBound))", n)
        }
        return i
    }

    func double(_ key: String, default value: Double, range: ClosedRange<Double> = 0...Double.greatestFiniteMagnitude) throws -> Double {
        guard let n = node(key) else { return value }
        guard let s = try scalar(n, key: key), let d = Double(s), range.contains(d) else {
            let expected =
                range.upperBound == .greatestFiniteMagnitude
                ? "a number ≥ \(Self.text(range.lowerBound))"
                : "a number in \(Self.text(range.lowerBound))…\(Self.text(range.upperBound))"
            throw fail(key, expected, n)
        }
        return d
    }

    /// A time given in milliseconds (a `…_ms` key), within `range`; `value` when the key is absent.
    func milliseconds(_ key: String, default value: Duration, range: ClosedRange<Double>) throws -> Duration {
        guard has(key) else { return value }
        return .milliseconds(try double(key, default: 0, range: range))
    }

    /// A time given in seconds (a `…_s` key), within `range`; `value` when the key is absent.
    func seconds(_ key: String, default value: Duration, range: ClosedRange<Double>) throws -> Duration {
        guard has(key) else { return value }
        return .seconds(try double(key, default: 0, range: range))
    }

    /// `2`, not `2.0`, in messages about whole bounds.
    static func text(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    func bool(_ key: String, default value: Bool) throws -> Bool {
        guard let n = node(key) else { return value }
        guard let s = try scalar(n, key: key) else { throw fail(key, "true or false", n) }
        switch s.lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        default: throw fail(key, "true or false", n)
        }
    }

    func strings(_ key: String) throws -> [String]? {
        guard let n = node(key) else { return nil }
        guard case .sequence(let seq) = n else { throw fail(key, "a list of strings", n) }
        return try seq.map { item in
            guard let s = try scalar(item, key: key), !s.isEmpty else { throw fail(key, "a list of strings", item) }
            return s
        }
    }

    /// A mapping of strings to strings (e.g. librdkafka properties, passed through unchanged).
    func stringMap(_ key: String) throws -> [String: String] {
        guard let n = node(key) else { return [:] }
        guard case .mapping(let m) = n else { throw fail(key, "a mapping of property names to values", n) }
        var out: [String: String] = [:]
        for (k, v) in m {
            guard case .scalar(let ks) = k, case .scalar(let vs) = v else {
                throw fail(key, "a mapping of property names to string values", n)
            }
            // Errors name the property: `kafka.properties.sasl.password: environment variable … is not set`.
            out[ks.string] = try substitution.apply(vs.string) {
                ConfigurationError(file: file, key: "\(keyPath(key)).\(ks.string)", problem: $0)
            }
        }
        return out
    }

    func section(_ key: String) throws -> ConfigSection {
        try ConfigSection(file: file, path: keyPath(key), node: node(key), substitution: substitution)
    }

    func sections(_ key: String) throws -> [ConfigSection] {
        guard let n = node(key) else { return [] }
        guard case .sequence(let seq) = n else { throw fail(key, "a list", n) }
        return try seq.enumerated().map { i, item in
            try ConfigSection(file: file, path: "\(keyPath(key))[\(i)]", node: item, substitution: substitution)
        }
    }

    /// Fails on keys nobody asked for: they are typos or belong elsewhere.
    func finish() throws {
        let unknown = entries.map(\.key).filter { !used.contains($0) }
        if !unknown.isEmpty {
            let known = used.sorted().joined(separator: ", ")
            throw ConfigurationError(
                file: file, key: unknown.map(keyPath).joined(separator: ", "),
                problem: "unknown key\(unknown.count > 1 ? "s" : "") (known here: \(known))")
        }
    }
}
