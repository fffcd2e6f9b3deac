import Foundation
import MallocInterposerSwift

/// One measured run: wall time, operations, bytes, allocations (when the interposer is preloaded).
struct Measurement {
    var name: String
    var operations: Int
    var bytes: Int
    var seconds: Double
    var allocations: Int?

    var perSecond: Double { Double(operations) / seconds }
    var megabytesPerSecond: Double { Double(bytes) / seconds / 1_000_000 }
    var allocationsPerOperation: Double? { allocations.map { Double($0) / Double(operations) } }
}

enum Measure {
    /// True when libMallocInterposerSwift is preloaded (ops/bench does it); otherwise allocations are
    /// reported as "n/a" rather than a wrong zero.
    static let countsAllocations: Bool = {
        ProcessInfo.processInfo.environment["LD_PRELOAD"]?.contains("MallocInterposer") == true
    }()

    /// Runs `body` once to warm up, then measures a second run.
    static func run(_ name: String, operations: Int, bytes: Int, _ body: () -> Void) -> Measurement {
        body()
        if countsAllocations {
            MallocInterposerSwift.initialize()
            MallocInterposerSwift.hook()
        }
        let start = DispatchTime.now().uptimeNanoseconds
        body()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        var allocations: Int?
        if countsAllocations {
            MallocInterposerSwift.unhook()
            allocations = Int(MallocInterposerSwift.getStatistics().mallocCount)
            MallocInterposerSwift.reset()
        }
        return Measurement(name: name, operations: operations, bytes: bytes, seconds: seconds, allocations: allocations)
    }

    static func table(_ title: String, _ rows: [Measurement], baseline: Measurement, unit: String) {
        print("\n## \(title)")
        print("| case | \(unit)/s | MB/s | allocs/\(unit) | vs baseline |")
        print("|---|---:|---:|---:|---:|")
        for m in [baseline] + rows {
            let allocs = m.allocationsPerOperation.map { String(format: "%.2f", $0) } ?? "n/a"
            let ratio = m.perSecond / baseline.perSecond
            print(
                "| \(m.name) | \(Int(m.perSecond).formatted()) | \(String(format: "%.0f", m.megabytesPerSecond)) | \(allocs) | \(String(format: "%.2f×", ratio)) |"
            )
        }
    }
}
