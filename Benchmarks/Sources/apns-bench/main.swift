// apns-bench: the benchmarks behind `ops/bench`. Each prints a markdown table with a baseline measured
// in the same run, and the ratio to it.
//
//   apns-bench encode                          command-2 encoding, payload building (frames/s, allocations)
//   apns-bench gateway --port P [--jobs N]     raw TLS limit of the simulator at P, and the sender with
//                                              1, 4, 8 shards against it
let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "encode":
    EncodeBenchmarks.run()
case "gateway":
    try await GatewayBenchmark.run(arguments: Array(arguments.dropFirst()))
default:
    print("usage: apns-bench encode | gateway --port P [--jobs N] [--shards 1,4,8]")
}
