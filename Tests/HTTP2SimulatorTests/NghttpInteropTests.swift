import APNsTransport
import Foundation
import HTTP2Simulator
import ProcessSupport
import TestSupport
import Testing

/// A client that is not ours: `nghttp` (Debian `nghttp2-client`) with a JWT from the test key is
/// accepted and recorded. Skipped (loudly) when nghttp is not installed, a failure when CI is set.
@Suite(.serialized) struct NghttpInteropTests {
    static let nghttp = ["/usr/bin/nghttp", "/usr/local/bin/nghttp"].first { FileManager.default.isExecutableFile(atPath: $0) }
    static let ci = ProcessInfo.processInfo.environment["CI"] != nil

    @Test(
        .enabled(
            if: nghttp != nil || ci,
            "nghttp is not installed (Debian package nghttp2-client, ops/setup installs it): interop test skipped; set CI=1 to make this a failure"
        ))
    func nghttpWithAJWTFromTheTestKeyIsAcceptedAndRecorded() async throws {
        let nghttp = try #require(Self.nghttp, "nghttp is not installed but CI is set: install Debian's nghttp2-client (ops/setup)")
        let f = try await H2Fixture()
        let payloadFile = FileManager.default.temporaryDirectory.appendingPathComponent("nghttp-\(UUID().uuidString).json")
        try Data(H2Fixture.payload).write(to: payloadFile)
        defer { try? FileManager.default.removeItem(at: payloadFile) }

        let p = Process()
        p.executableURL = URL(fileURLWithPath: nghttp)
        // -d sends the file as the body of a POST; nghttp does not check the server's certificate.
        p.arguments = [
            "-n", "-s", "-d", payloadFile.path,
            "-H", "apns-topic: \(H2Fixture.shop)", "-H", "apns-push-type: alert",
            "-H", "apns-id: 0A1B2C3D-0000-4000-8000-00000000000F",
            "-H", "authorization: \(try f.bearer())",
            "https://127.0.0.1:\(f.simulator.port)/3/device/\(H2Fixture.token)",
        ]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try startChild(p)
        // Off the cooperative pool (ChildProcessWaits.swift): the simulator nghttp talks to answers there too.
        let (status, output) = await outputAndExit(of: p, reading: out.fileHandleForReading)
        let text = String(decoding: output, as: UTF8.self)
        #expect(status == 0, "nghttp: \(text)")

        let records = f.simulator.records
        try #require(records.count == 1, "nghttp output: \(text)")
        #expect(records[0].apnsID.uppercased() == "0A1B2C3D-0000-4000-8000-00000000000F")
        #expect(records[0].auth == "token:\(TestCertificates.tokenTeamID)/\(TestCertificates.tokenKeyID)")
        #expect(records[0].token == H2Fixture.token && records[0].jobID == "job-1")
        #expect(f.simulator.totals.accepted == 1)
        try await f.shutdown()
    }

    /// Issue 31 with a foreign client: a Live Activity update on its suffixed topic and an alert at
    /// priority 1 are accepted by a sandbox-mode simulator, whose answers carry `apns-unique-id`.
    @Test(.enabled(if: nghttp != nil || ci, "nghttp is not installed (Debian package nghttp2-client): interop test skipped"))
    func nghttpSendsALiveActivityAndPriorityOneToTheSandbox() async throws {
        let nghttp = try #require(Self.nghttp, "nghttp is not installed but CI is set: install Debian's nghttp2-client (ops/setup)")
        let f = try await H2Fixture { $0.sandbox = true }
        let update = Array(#"{"aps":{"event":"update","timestamp":1767000000,"content-state":{"home":1}},"jid":"la-1"}"#.utf8)
        func send(_ payload: [UInt8], _ headers: [String]) async throws -> (status: Int32, output: String) {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("nghttp-\(UUID().uuidString).json")
            try Data(payload).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            let p = Process()
            p.executableURL = URL(fileURLWithPath: nghttp)
            p.arguments =
                ["-n", "-v", "-d", file.path, "-H", "authorization: \(try f.bearer())"]
                + headers.flatMap { ["-H", $0] } + ["https://127.0.0.1:\(f.simulator.port)/3/device/\(H2Fixture.token)"]
            let out = Pipe()
            p.standardOutput = out
            p.standardError = out
            try startChild(p)
            let (status, output) = await outputAndExit(of: p, reading: out.fileHandleForReading)
            return (status, String(decoding: output, as: UTF8.self))
        }
        let la = try await send(
            update, ["apns-topic: \(H2Fixture.shop).push-type.liveactivity", "apns-push-type: liveactivity", "apns-priority: 5"])
        #expect(la.status == 0, "nghttp: \(la.output)")
        #expect(la.output.contains("apns-unique-id:"), "\(la.output)")
        let low = try await send(H2Fixture.payload, ["apns-topic: \(H2Fixture.shop)", "apns-priority: 1"])
        #expect(low.status == 0 && low.output.contains(":status: 200"), "nghttp: \(low.output)")
        let records = f.simulator.records
        #expect(records.map(\.jobID) == ["la-1", "job-1"])
        #expect(records.map(\.pushType) == ["liveactivity", nil])
        #expect(records.map(\.priority) == [5, 1])
        try await f.shutdown()
    }
}
