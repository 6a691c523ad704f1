import ArgumentParser

@main
struct Fanfare: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanfare",
        abstract: "Send iOS Live Activity pushes through APNs over io_uring + TLS + HTTP/2, and simulate APNs.",
        subcommands: [PushCommand.self, SimulateCommand.self, LoadCommand.self, KeygenCommand.self, TokenCommand.self, DemoCommand.self]
    )
}
