import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#elseif canImport(Musl)
import Musl
#endif

/// Private key files (an app's certificate key, an HTTP/2 token's `.p8`) that group or others may read:
/// a warning at start, naming the file and the fix. Not an error: the process runs as the
/// file allows, and some deployments (a secret mounted read-only by a group) choose it knowingly.
public enum KeyFilePermissions {
    public struct Loose: Equatable, Sendable {
        /// The pipeline file's key (`apps[0].key`, `apps[1].token.key`).
        public var key: String
        public var path: String
        /// The permission bits, octal (`644`).
        public var mode: String
    }

    /// The configuration's key files whose mode (of the file a link points to) lets group or others
    /// read, write or run them. Files that cannot be read are left to the start-up's own errors.
    public static func loose(_ c: PipelineConfiguration) -> [Loose] {
        var out: [Loose] = []
        for (i, app) in c.apps.enumerated() {
            for (key, path) in app.credentialFiles where key != "certificate" {
                var info = stat()
                guard stat(path, &info) == 0 else { continue }
                let bits = UInt32(info.st_mode) & 0o777
                if bits & 0o077 != 0 { out.append(Loose(key: "apps[\(i)].\(key)", path: path, mode: String(bits, radix: 8))) }
            }
        }
        return out
    }

    /// Logs one warning per loose key file.
    public static func warn(_ c: PipelineConfiguration, logger: Logger) {
        for l in loose(c) {
            logger.warning(
                "a private key file is readable by group or others",
                metadata: ["file": "\(l.path)", "key": "\(l.key)", "mode": "\(l.mode)", "fix": "chmod 600 \(l.path)"])
        }
    }
}
