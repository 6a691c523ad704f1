import ArgumentParser
import FanfareCommands

@main
enum FanfareMain {
    static func main() { CommandProcess.run(Fanfare.self) }
}

/// Every subcommand: those of FanfareCommands and the ones that need the service or PostgreSQL (`serve`,
/// `import`, `waves`), which `fanfare-demo` leaves out to build in a few minutes.
struct Fanfare: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanfare",
        abstract: "Send iOS Live Activity pushes through APNs over io_uring + TLS + HTTP/2, and simulate APNs.",
        subcommands: [
            PushCommand.self, ChannelCommand.self, SimulateCommand.self, LoadCommand.self, KeygenCommand.self,
            TokenCommand.self, ImportCommand.self,
            DemoCommand.self, ServeCommand.self, WavesCommand.self,
        ]
    )
}
