// apns-bench: the benchmarks behind `ops/bench`. Each prints a markdown table with a baseline measured
// in the same run, and the ratio to it.
//
//   apns-bench encode     command-2 encoding and payload building (frames/s, MB/s, allocations)
//   apns-bench raw-tls    the gateway simulator's accept rate for pre-encoded frames over TLS
let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "encode":
    EncodeBenchmarks.run()
case "raw-tls":
    try await RawTLSBenchmark.run(arguments: Array(arguments.dropFirst()))
default:
    print("usage: apns-bench encode | raw-tls [frames]")
}
