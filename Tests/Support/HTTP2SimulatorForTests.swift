import APNsTransport
import HTTP2Simulator

extension HTTP2Simulator {
    /// A started HTTP/2 simulator on a free port with the test certificates, records kept in memory
    /// and, with `tokens`, the test token key trusted (team `TestCertificates.tokenTeamID`). The test
    /// suites of the simulator, the sender, the pipeline and the operations surface all start it so.
    public static func startedForTests(
        faults: HTTP2FaultScript = HTTP2FaultScript(), tokens: Bool = true,
        configure: (inout HTTP2SimulatorConfiguration) -> Void = { _ in }
    ) async throws -> HTTP2Simulator {
        var config = HTTP2SimulatorConfiguration(tls: .testCertificates(in: TestCertificates.directory))
        config.faults = faults
        config.keepRecordsInMemory = true
        if tokens {
            let key = try ProviderTokenVerifier.publicKey(fromFile: TestCertificates.tokenPublicKeyPath)
            config.tokenKeys = [TestCertificates.tokenKeyID: .init(teamID: TestCertificates.tokenTeamID, publicKey: key)]
        }
        configure(&config)
        let simulator = try HTTP2Simulator(configuration: config)
        try await simulator.start()
        return simulator
    }
}
