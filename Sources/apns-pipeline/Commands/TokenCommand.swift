import APNsProtocol
import ArgumentParser
import Foundation

/// `apns-pipeline token HEX`: checks and normalises a device token (handy when reading logs and DLQs).
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract:
            "Check a device token: an even count of 16…200 hex digits (64 for a 32-byte token), case-insensitive; prints it normalised.",
        discussion:
            "Apple: \"APNs device tokens are of variable length. Do not hard-code their size.\" Only a 32-byte token can go to a binary app."
    )

    @Argument(help: "The device token in hex.")
    var hex: String

    func run() throws {
        do {
            let token = try DeviceToken(hex: hex)
            print(token.hex)
            if !token.fitsBinaryInterface {
                FileHandle.standardError.write(
                    Data("note: \(token.byteCount) bytes: HTTP/2 apps only (the binary interface takes 32-byte tokens)\n".utf8))
            }
        } catch {
            throw ValidationError("\(error)")
        }
    }
}
