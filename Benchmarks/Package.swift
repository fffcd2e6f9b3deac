// swift-tools-version: 6.1
import PackageDescription

// Benchmarks live in a package of their own so that `swift test` (and CI) never builds them or their
// allocation counter. `ops/bench` builds this in release mode and runs it with the malloc interposer
// preloaded, so every figure comes with allocations per operation.
let package = Package(
    name: "apns-pipeline-benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "apns-pipeline", path: ".."),
        .package(url: "https://github.com/ordo-one/malloc-interposer.git", from: "1.6.1"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
    ],
    targets: [
        .executableTarget(
            name: "apns-bench",
            dependencies: [
                .product(name: "APNsProtocol", package: "apns-pipeline"),
                .product(name: "APNsTransport", package: "apns-pipeline"),
                .product(name: "GatewaySimulator", package: "apns-pipeline"),
                .product(name: "Sender", package: "apns-pipeline"),
                .product(name: "Jobs", package: "apns-pipeline"),
                .product(name: "Kafka", package: "apns-pipeline"),
                .product(name: "Redis", package: "apns-pipeline"),
                .product(name: "ProcessSupport", package: "apns-pipeline"),
                .product(name: "MallocInterposerSwift", package: "malloc-interposer"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // CPU per answer header block, NIOHPACK's decoder beside ours; a product of its own, so that it
        // builds only what it measures (`ops/bench hpack`).
        .executableTarget(
            name: "hpack-bench",
            dependencies: [
                .product(name: "APNsProtocol", package: "apns-pipeline"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]
        ),
    ]
)
