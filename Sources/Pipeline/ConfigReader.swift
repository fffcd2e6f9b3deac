import Foundation
import Yams

/// A configuration file that cannot be used: which file, which key, what was expected there.
public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    public var file: String
    public var key: String
    public var problem: String

    public var description: String { "\(file): \(key.isEmpty ? "(top level)" : key): \(problem)" }
}

/// Reads one YAML mapping with exact errors: every getter names the key's full path, every key that no
/// getter asked for is reported by `finish()` (a typo must not silently fall back to a default).
final class ConfigSection {
    let file: String
    let path: String
    private var entries: [(key: String, node: Node)] = []
    private var used: Set<String> = []

    init(file: String, path: String, node: Node?) throws {
        self.file = file
        self.path = path
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

    static func load(file: String) throws -> ConfigSection {
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
        return try ConfigSection(file: file, path: "", node: node)
    }

    private func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    private func node(_ key: String) -> Node? {
        used.insert(key)
        return entries.first(where: { $0.key == key })?.node
    }

    func has(_ key: String) -> Bool { entries.contains { $0.key == key } }

    private func fail(_ key: String, _ expected: String, _ node: Node?) -> ConfigurationError {
        let found = node.map { n -> String in
            if case .scalar(let s) = n { return "\"\(s.string)\"" }
            if case .sequence = n { return "a list" }
            return "a mapping"
        }
        return ConfigurationError(
            file: file, key: keyPath(key), problem: "expected \(expected)" + (found.map { ", found \($0)" } ?? ""))
    }

    func string(_ key: String) throws -> String? {
        guard let n = node(key) else { return nil }
        guard case .scalar(let s) = n, !s.string.isEmpty else { throw fail(key, "a string", n) }
        return s.string
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
        guard case .scalar(let s) = n, let i = Int(s.string), range.contains(i) else {
            throw fail(key, "a whole number in \(range.lowerBound)…\(range.upperBound == Int.max ? "" : String(range.upperBound))", n)
        }
        return i
    }

    func double(_ key: String, default value: Double, range: ClosedRange<Double> = 0...Double.greatestFiniteMagnitude) throws -> Double {
        guard let n = node(key) else { return value }
        guard case .scalar(let s) = n, let d = Double(s.string), range.contains(d) else {
            let expected = range.upperBound == .greatestFiniteMagnitude
                ? "a number ≥ \(Self.text(range.lowerBound))"
                : "a number in \(Self.text(range.lowerBound))…\(Self.text(range.upperBound))"
            throw fail(key, expected, n)
        }
        return d
    }

    /// `2`, not `2.0`, in messages about whole bounds.
    static func text(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    func bool(_ key: String, default value: Bool) throws -> Bool {
        guard let n = node(key) else { return value }
        guard case .scalar(let s) = n else { throw fail(key, "true or false", n) }
        switch s.string.lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        default: throw fail(key, "true or false", n)
        }
    }

    func strings(_ key: String) throws -> [String]? {
        guard let n = node(key) else { return nil }
        guard case .sequence(let seq) = n else { throw fail(key, "a list of strings", n) }
        return try seq.map { item in
            guard case .scalar(let s) = item, !s.string.isEmpty else { throw fail(key, "a list of strings", item) }
            return s.string
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
            out[ks.string] = vs.string
        }
        return out
    }

    func section(_ key: String) throws -> ConfigSection {
        try ConfigSection(file: file, path: keyPath(key), node: node(key))
    }

    func sections(_ key: String) throws -> [ConfigSection] {
        guard let n = node(key) else { return [] }
        guard case .sequence(let seq) = n else { throw fail(key, "a list", n) }
        return try seq.enumerated().map { i, item in
            try ConfigSection(file: file, path: "\(keyPath(key))[\(i)]", node: item)
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
