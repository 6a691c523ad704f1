import ArgumentParser
import FanfareClient
import FanfareCore

/// `fanfare channel`: APNs broadcast channel management (create, read, list, delete).
public struct ChannelCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "channel",
        abstract: "Manage APNs broadcast channels (iOS 18+): create, read, list, delete.",
        discussion: """
            Talks to APNs' channel management host (api-manage-broadcast[.sandbox].push.apple.com, port 2196 in \
            production, 2195 with --sandbox), or to --endpoint host:port (a simulator's management port), with \
            the connection and authentication flags of `fanfare push`. Exit codes: 0 done, 1 rejected by APNs \
            (the reason and what to do are printed), 2 no answer (connection or timeout), 64 bad flags or files.
            """,
        subcommands: [Create.self, Read.self, List.self, Delete.self]
    )

    public init() {}

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a channel and print its id (only the id, on stdout).")

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var call: CallOptions

        @Option(
            help:
                "message-storage-policy: 0 (no message stored; publishes need --expiration 0) or 1 (the most recent message is stored)."
        )
        var storagePolicy: Int

        func validate() throws {
            guard ChannelStoragePolicy(rawValue: storagePolicy) != nil else {
                throw ValidationError("--storage-policy \(storagePolicy) must be 0 or 1")
            }
        }

        func run() async throws {
            let reply = try await call.perform(
                .create(ChannelStoragePolicy(rawValue: storagePolicy) ?? .noMessageStored), connection)
            guard let channel = reply.createdChannel else { throw ExitCode(2) }
            print(channel)
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a channel's storage policy and push type.")

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var call: CallOptions
        @Option(help: "The channel's id (base64, as `channel create` printed it).")
        var channelId: String

        func run() async throws {
            let channel = try parseChannel(channelId)
            let reply = try await call.perform(.read(channel), connection)
            guard let info = reply.info else { throw ExitCode(2) }
            print("message-storage-policy: \(info.storagePolicy.rawValue)")
            print("push-type: \(info.pushType)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the id of every channel of the app, one per line.")

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var call: CallOptions

        func run() async throws {
            let reply = try await call.perform(.list, connection)
            for channel in reply.channels { print(channel) }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a channel (APNs never reuses its id).")

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var call: CallOptions
        @Option(help: "The channel's id (base64).")
        var channelId: String

        func run() async throws {
            let channel = try parseChannel(channelId)
            _ = try await call.perform(.delete(channel), connection)
        }
    }

    /// Flags every channel call has.
    struct CallOptions: ParsableArguments {
        @Option(help: "apns-request-id to send (a UUID); generated when omitted. Printed with every error.")
        var requestId: String?

        @Flag(help: "Print the apns-request-id of the answer on stderr.")
        var showRequestId = false

        /// Runs one call; on failure prints the status, reason, request id and what to do, and exits 1 or 2.
        func perform(
            _ operation: ChannelManagementOperation, _ connection: ConnectionOptions
        ) async throws -> ChannelManagementReply {
            let manager: BroadcastChannelManager
            var requestID: PushIdentifier?
            do {
                if let requestId {
                    guard let parsed = PushIdentifier(requestId) else {
                        throw UsageError("--request-id '\(requestId)' is not a UUID (8-4-4-4-12 hex)")
                    }
                    requestID = parsed
                }
                manager = try BroadcastChannelManager(configuration: connection.makeChannelManagementConfiguration())
            } catch {
                printError("\(error)")
                throw ExitCode(64)
            }
            defer { manager.shutdown() }
            do {
                let reply = try await manager.perform(operation, requestID: requestID)
                if showRequestId { printError("apns-request-id: \(reply.requestID)") }
                return reply
            } catch {
                printError(error.description)
                printError("what to do: \(PushCommand.advice(for: error.action))")
                if case .rejected = error.kind { throw ExitCode(1) }
                throw ExitCode(2)
            }
        }
    }
}

/// A channel id from a flag (plain base64, or its %-encoded path-safe form).
func parseChannel(_ text: String, flag: String = "--channel-id") throws -> BroadcastChannelID {
    do {
        return try BroadcastChannelID(pathSafe: text)
    } catch {
        printError("\(flag) '\(PrintableText.escaping(text, limit: 120))': \(error)")
        throw ExitCode(64)
    }
}
