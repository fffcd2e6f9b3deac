/// The bundle ids jobs may name: the pipeline file's apps (`docs/design.md §3.2`).
///
/// A job for any other app is refused by the decoder (`no-certificate-for-app`) before it reaches Redis,
/// so an app name read from a message never becomes a key name, a cached key table or a metric label:
/// those hold configured apps only, whatever producers write. The decoder resolves a name to the
/// configured String instance, so jobs share one copy per app.
public struct KnownApps: Sendable, Equatable {
    /// Distinct names, in the order given.
    public let names: [String]

    public init(_ names: some Sequence<String>) {
        var seen = Set<String>()
        self.names = names.filter { seen.insert($0).inserted }
    }

    public func contains(_ name: String) -> Bool { find(name) != nil }

    /// The configured name equal to `name`, nil when it is not one.
    public func find(_ name: String) -> String? {
        names.first { $0 == name }
    }

    /// The configured name spelled by `bytes` (UTF-8, e.g. a JSON string's contents without escapes),
    /// nil when it is not one. Compares bytes: nothing is allocated for a name that is not configured.
    public func find(_ bytes: UnsafeRawBufferPointer) -> String? {
        for known in names {
            var name = known
            let same = name.withUTF8 { u in
                u.count == bytes.count && (u.count == 0 || memcmp(u.baseAddress!, bytes.baseAddress!, u.count) == 0)
            }
            if same { return known }
        }
        return nil
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#elseif canImport(Musl)
import Musl
#endif
