import APNsProtocol
import ArgumentParser

/// `apns-pipeline token HEX`: checks and normalises a device token (handy when reading logs and DLQs).
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Check a device token: 64 hex characters, case-insensitive; prints it normalised."
    )

    @Argument(help: "The device token in hex.")
    var hex: String

    func run() throws {
        do {
            let token = try DeviceToken(hex: hex)
            print(token.hex)
        } catch {
            throw ValidationError("\(error)")
        }
    }
}
