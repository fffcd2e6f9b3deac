/// What `apns-pipeline --version` prints: the release's version and the commit it was built from.
///
/// `ops/package` writes `BuildInfo.generated.swift` beside this file (git-ignored) with the real values and
/// builds with `-Xswiftc -DAPNS_BUILD_INFO`; a plain `swift build` of a fresh clone has neither, and says
/// so instead of inventing a version.
#if APNS_BUILD_INFO
// buildVersion and buildCommit come from BuildInfo.generated.swift.
#else
let buildVersion = "0.0.0-dev"
let buildCommit = "unknown"
#endif

/// The `--version` line: "0.3.0 (commit 1a2b3c4d5e6f)".
let versionLine = "\(buildVersion) (commit \(buildCommit))"
