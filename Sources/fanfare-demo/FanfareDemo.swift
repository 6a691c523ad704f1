import ArgumentParser
import FanfareCommands

@main
enum FanfareDemoMain {
    static func main() { CommandProcess.run(FanfareDemo.self) }
}

/// `fanfare` without the service and PostgreSQL (no `serve`, `import`, `waves`): what `scripts/demo` builds,
/// since its release build skips SwiftNIO, Hummingbird, postgres-nio and swift-crypto (minutes instead of
/// about half an hour on two cores). The demo is the default subcommand.
struct FanfareDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanfare-demo",
        abstract: "The Fanfare demo and the commands that need no service: `fanfare` without serve, import and waves.",
        subcommands: [
            DemoCommand.self, PushCommand.self, ChannelCommand.self, SimulateCommand.self, LoadCommand.self,
            KeygenCommand.self,
            TokenCommand.self,
        ],
        defaultSubcommand: DemoCommand.self
    )
}
