// apns-bench: the benchmarks behind `ops/bench`. Each prints a markdown table with a baseline measured
// in the same run, and the ratio to it.
//
//   apns-bench encode                          command-2 encoding, payload building (frames/s, allocations)
//   apns-bench gateway --port P [--jobs N]     raw TLS limit of the simulator at P, and the sender with
//                                              1, 4, 8 shards against it
//   apns-bench decode                          job decode + validate vs Foundation's JSONDecoder
//   apns-bench kafka [N]                       KafkaConsumer vs kcat -C on the same topic of N jobs
//   apns-bench redis [N [batch]]               gate + settle vs redis-benchmark -P 64; bytes per dedup record
let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "encode":
    EncodeBenchmarks.run()
case "gateway":
    try await GatewayBenchmark.run(arguments: Array(arguments.dropFirst()))
case "decode":
    JobsBenchmark.run()
case "kafka":
    try await KafkaBenchmark.run(arguments: Array(arguments.dropFirst()))
case "redis":
    try await RedisBenchmark.run(arguments: Array(arguments.dropFirst()))
default:
    print("usage: apns-bench encode | gateway --port P [--jobs N] [--shards 1,4,8] | decode | kafka [N] | redis [N [batch]]")
}
