import ArgumentParser
import FanfareTLS
import Foundation

/// `fanfare token`: print a provider JWT, e.g. for `h2load -H "authorization: bearer $(fanfare token ...)"`.
public struct TokenCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a provider authentication token (JWT, ES256) signed with a .p8 key."
    )

    @Option(help: "The provider key (.p8).")
    var authKey: String

    @Option(help: "The 10-character key ID.")
    var keyId: String

    @Option(help: "The 10-character team ID.")
    var teamId: String

    @Flag(help: "Print the whole header value: 'bearer <jwt>'.")
    var bearer = false

    public init() {}

    public func run() throws {
        do {
            let signer = try ProviderTokenSigner(privateKeyPEMFile: authKey, keyID: keyId, teamID: teamId)
            let token = try signer.mint(issuedAt: Int64(Date().timeIntervalSince1970))
            print(bearer ? token.authorizationHeaderValue : token.jwt)
        } catch {
            printError("\(error)")
            throw ExitCode(64)
        }
    }
}
