// swift-tools-version: 6.1
import PackageDescription

// Swift 6 language mode everywhere (the tools version sets it); warnings are treated as work to do,
// not noise: `ops/test` builds with -warnings-as-errors.
let package = Package(
    name: "apns-pipeline",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "apns-pipeline", targets: ["apns-pipeline"]),
        .library(name: "APNsProtocol", targets: ["APNsProtocol"]),
        .library(name: "APNsTransport", targets: ["APNsTransport"]),
        .library(name: "GatewaySimulator", targets: ["GatewaySimulator"]),
        .library(name: "HTTP2Simulator", targets: ["HTTP2Simulator"]),
        .library(name: "Sender", targets: ["Sender"]),
        .library(name: "Kafka", targets: ["Kafka"]),
        .library(name: "Jobs", targets: ["Jobs"]),
        .library(name: "RedisClient", targets: ["RedisClient"]),
        .library(name: "Redis", targets: ["Redis"]),
        // For the benchmark package: the helpers that start throw-away servers, shared with the tests.
        .library(name: "ProcessSupport", targets: ["ProcessSupport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-async-algorithms.git", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        // NIOHTTP1ProxyConnectHandler: the CONNECT exchange of an HTTPS proxy (`HTTPSProxy`, issue 31).
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // Pure protocol code: wire formats, device tokens, payloads. Standard library only, no I/O,
        // so it can be fuzzed with `swiftc -sanitize=fuzzer` and reasoned about in isolation.
        .target(name: "APNsProtocol"),

        // `Duration` in the units the C libraries and our logs use: one home for what the standard
        // library lacks, shared by every module that talks to librdkafka, hiredis or a log (and the
        // sender, whose settings are `Duration`s).
        .target(name: "TimeUnits"),

        // What the TLS ends (simulator, sender, feedback poller) share: encoders writing into NIO's
        // ByteBuffer, the app topic read from a provider certificate, provider tokens (ES256 JWTs with
        // swift-crypto).
        .target(
            name: "APNsTransport",
            dependencies: [
                "APNsProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // The binary gateway + feedback service simulator (SwiftNIO + swift-nio-ssl).
        .target(
            name: "GatewaySimulator",
            dependencies: [
                "APNsProtocol",
                "APNsTransport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // The HTTP/2 provider API simulator (SwiftNIO + swift-nio-http2 + swift-nio-ssl, ALPN h2).
        .target(
            name: "HTTP2Simulator",
            dependencies: [
                "APNsProtocol",
                "APNsTransport",
                "GatewaySimulator",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // The sender: per-app transports behind one seam. Binary: pools of TLS gateway connections,
        // batching, replay, drain proof. HTTP/2: connections driven at the frame level (swift-nio-http2).
        .target(
            name: "Sender",
            dependencies: [
                "APNsProtocol",
                "APNsTransport",
                "TimeUnits",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // librdkafka through a system-library target; `Kafka` is the one Swift type family that calls it.
        .systemLibrary(
            name: "CRdKafka",
            // No `pkgConfig:` here: rdkafka.pc adds -D_FILE_OFFSET_BITS=64, which SwiftPM refuses with a
            // warning on every build. The headers are in /usr/include/librdkafka, found without it.
            providers: [.apt(["librdkafka-dev"])]
        ),
        .target(
            name: "Kafka",
            dependencies: [
                "CRdKafka",
                "TimeUnits",
                .product(name: "Logging", package: "swift-log"),
                // `KafkaConsumer` and `KafkaProducer` are `Service`s: their `run()` polls.
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // hiredis through a system-library target: the RESP reply parser (`redisReader`) of `RedisClient`,
        // whose connections are SwiftNIO channels (plain TCP or swift-nio-ssl TLS) on the event loops.
        .systemLibrary(
            name: "CHiredis",
            // No `pkgConfig:`: hiredis.pc adds -D_FILE_OFFSET_BITS=64 too (see CRdKafka).
            providers: [.apt(["libhiredis-dev"])]
        ),
        // A generic Redis client, no pipeline knowledge: one server or a cluster, RESP, scripts (EVALSHA),
        // `redis://`/`rediss://` URLs and TLS.
        .target(
            name: "RedisClient",
            dependencies: [
                "CHiredis",
                "TimeUnits",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                // SHA-1 names a Lua script the way Redis does (EVALSHA); nothing security-related.
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The pipeline's state in Redis (design §4): the stores by role and their scripts, over
        // `RedisClient` (which it re-exports).
        .target(
            name: "Redis",
            dependencies: [
                "RedisClient",
                "TimeUnits",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // Wall-clock rules in the recipient's zone (quiet hours, delivery at a local time): pure, Foundation
        // only (TimeZone's ICU data, no tzdata files read).
        .target(name: "LocalTime"),

        // Jobs as producers publish them (`docs/design.md §3`): decoding and validation, pure.
        .target(name: "Jobs", dependencies: ["APNsProtocol", "LocalTime"]),

        // The feedback poller: per app, reads the feedback service over TLS and writes suppressions to Redis.
        .target(
            name: "Feedback",
            dependencies: [
                "APNsProtocol",
                "APNsTransport",
                "Redis",
                "TimeUnits",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // The assembled pipeline, a folder per feature: the runner, stages, configuration, campaign control, dead
        // letters, outcomes, metrics.
        .target(
            name: "Pipeline",
            dependencies: [
                "APNsProtocol",
                "APNsTransport",
                "Feedback",
                "Jobs",
                "LocalTime",
                "Kafka",
                "Redis",
                "Sender",
                "TimeUnits",
                .product(name: "Yams", package: "Yams"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                // HMAC of the jobs released at their pacing slot (`ReleaseSignature`).
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),

        // What the commands beside `run` use and the tests reach too: campaign publishing (the audience
        // and template files, a job per recipient, `--at`, the status `campaign status` reports) and
        // `send`'s line decoder. A library rather than the executable's own files, so the test binary
        // never links the executable (and its jemalloc).
        .target(
            name: "Tools",
            dependencies: ["APNsProtocol", "Jobs", "LocalTime", "Pipeline", "Redis", "Sender"]
        ),

        // The operations surface: one HTTP server (SwiftNIO HTTP/1) for Prometheus metrics
        // (swift-prometheus), the health endpoints and the live dashboard over the Redis contract.
        .target(
            name: "Operations",
            dependencies: [
                "Pipeline",
                "Redis",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        .executableTarget(
            name: "apns-pipeline",
            dependencies: [
                "APNsProtocol",
                "Feedback",
                "GatewaySimulator",
                "HTTP2Simulator",
                "Jobs",
                "Pipeline",
                "Operations",
                "Sender",
                "Kafka",
                "Redis",
                "TimeUnits",
                "Tools",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                "CJemallocOptions",
            ],
            // jemalloc (Debian's libjemalloc) instead of glibc's malloc, for the whole process — Swift's
            // runtime allocates through it too. The pipeline allocates a job's objects on one thread
            // (decoding, the gate) and frees them on another (the event loop, the settler); glibc
            // serves such frees through its arenas' locked bins (`_int_malloc`, `unlink_chunk`,
            // `malloc_consolidate`: ~13 % of `run`'s CPU in a profile), jemalloc through per-thread
            // caches. README "Benchmarks" has the A/B runs.
            linkerSettings: [.linkedLibrary("jemalloc", .when(platforms: [.linux]))]
        ),

        // jemalloc's options for the executable (`malloc_conf`: one arena; dirty pages returned sooner for binary apps).
        .target(name: "CJemallocOptions"),

        // Helpers the test targets share: a throw-away redis-server, the test certificates, a small
        // HTTP/2 client over TLS (for the HTTP/2 simulator's tests and the HTTP/2 sender's), the HTTP/2
        // simulator started with the test certificates and token key, the mock Kafka cluster's consumer
        // settings and waits (KafkaTestSupport).
        .target(
            name: "TestSupport",
            dependencies: [
                "ProcessSupport",
                "Redis",
                "Kafka",
                "APNsTransport",
                "HTTP2Simulator",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Tests/Support"
        ),

        .testTarget(
            name: "APNsProtocolTests",
            dependencies: [
                "APNsProtocol",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        .testTarget(
            name: "SenderTests",
            dependencies: [
                "TestSupport",
                "ProcessSupport",
                "Sender",
                .product(name: "Crypto", package: "swift-crypto"),
                "GatewaySimulator",
                "HTTP2Simulator",
                "APNsProtocol",
                "APNsTransport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "PipelineTests",
            dependencies: [
                "TestSupport",
                "Pipeline",
                "Tools",
                "Feedback",
                "Jobs",
                "GatewaySimulator",
                "HTTP2Simulator",
                "Kafka",
                "Redis",
                "Sender",
                "APNsProtocol",
                "APNsTransport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "OperationsTests",
            dependencies: [
                "TestSupport",
                "Operations",
                "Pipeline",
                "Tools",
                "Sender",
                "HTTP2Simulator",
                "GatewaySimulator",
                "Kafka",
                "Redis",
                "APNsProtocol",
                "APNsTransport",
                "ProcessSupport",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "KafkaTests",
            dependencies: [
                "TestSupport",
                "Kafka",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(name: "LocalTimeTests", dependencies: ["LocalTime"]),
        .testTarget(
            name: "JobsTests",
            // Pipeline: `DeadLetter` (the ingest test dead-letters malformed jobs as the pipeline does).
            dependencies: ["TestSupport", "Jobs", "APNsProtocol", "Kafka", "Pipeline"],
            // Apple's documented example payloads (issue 31), read by TodaysPayloadTests.
            resources: [.copy("Fixtures/Apple")]
        ),
        .testTarget(
            name: "FeedbackTests",
            dependencies: [
                "TestSupport",
                "Feedback",
                "GatewaySimulator",
                "Redis",
                "APNsProtocol",
                "APNsTransport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "RedisTests",
            dependencies: ["TestSupport", "Redis", "RedisClient"]
        ),
        .testTarget(
            name: "APNsTransportTests",
            dependencies: [
                "TestSupport",
                "APNsTransport",
                "APNsProtocol",
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "HTTP2SimulatorTests",
            dependencies: [
                "TestSupport",
                "HTTP2Simulator",
                "GatewaySimulator",
                "APNsProtocol",
                "APNsTransport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .testTarget(
            name: "GatewaySimulatorTests",
            dependencies: [
                "TestSupport",
                "GatewaySimulator",
                "APNsProtocol",
                "APNsTransport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),

        // Free port, executable lookup, a child process killed for sure: Foundation only, so both the
        // tests (through TestSupport) and the benchmark package use it.
        .target(name: "ProcessSupport", path: "Tests/ProcessSupport"),
    ]
)
