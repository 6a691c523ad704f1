import FanfareApps
import FanfareIO
import FanfareSimulator

/// `fanfare simulate --apps FILE` and the sandbox listener: the apps file, the addresses of both environments' ports,
/// and what the simulator prints about them.
extension SimulateCommand {
    /// Where each port listens: a flag, else the apps file's endpoint, else the default (a sandbox port by default
    /// only with --apps).
    struct ListenAddresses {
        var push: SocketAddress
        var sandbox: SocketAddress?
        var management: SocketAddress?
        var sandboxManagement: SocketAddress?
    }

    /// The apps file (--apps), checked; nil without one. The single app's flags cannot go with it.
    func loadApps() throws -> AppCatalog? {
        guard let apps else { return nil }
        let singleAppFlags = [
            ("--bundle-id", bundleIdOption != nil), ("--team-id", teamIdOption != nil),
            ("--key-id", keyIdOption != nil),
            ("--jwt-key", jwtKey != nil), ("--key-environment", !keyEnvironment.isEmpty),
            ("--key-topics", !keyTopics.isEmpty),
        ].filter(\.1).map(\.0)
        guard singleAppFlags.isEmpty else {
            throw UsageError(
                "--apps lists the apps and their keys: drop \(singleAppFlags.joined(separator: ", ")) (one app's flags)"
            )
        }
        do {
            return try AppCatalog.load(path: apps)
        } catch {
            throw UsageError("--apps: \(error)")
        }
    }

    func listenAddresses(_ catalog: AppCatalog?) throws -> ListenAddresses {
        var endpoints: SimulatedEndpoints?
        if let catalog {
            do { endpoints = try SimulatedEndpoints(catalog) } catch { throw UsageError("--apps: \(error)") }
        }
        func fromFile(_ endpoint: AppEndpoint?, _ what: String) throws -> SocketAddress? {
            guard let endpoint else { return nil }
            do {
                return try parseListenAddress(endpoint.description)
            } catch {
                throw UsageError("--apps: cannot listen on the \(what) endpoint \(endpoint): \(error)")
            }
        }
        let push =
            try listen.map(parseListenAddress) ?? fromFile(endpoints?.push[.production], "production")
            ?? parseListenAddress("127.0.0.1:2197")
        var sandboxAddress = try sandboxListen.map(parseListenAddress) ?? fromFile(endpoints?.push[.sandbox], "sandbox")
        if sandboxAddress == nil && catalog != nil { sandboxAddress = try parseListenAddress("127.0.0.1:2198") }
        if sandbox && sandboxAddress != nil {
            throw UsageError(
                "--sandbox makes the one listener play sandbox; --sandbox-listen and --apps serve sandbox beside production: drop --sandbox"
            )
        }
        var addresses = ListenAddresses(push: push, sandbox: sandboxAddress)
        addresses.management =
            try managementPort.map { try Self.port($0, on: push, flag: "--management-port") }
            ?? fromFile(endpoints?.management[.production], "production channel-management")
        if let sandboxManagementPort {
            guard let sandboxAddress else {
                throw UsageError("--sandbox-management-port needs a sandbox listener (--sandbox-listen or --apps)")
            }
            addresses.sandboxManagement = try Self.port(
                sandboxManagementPort, on: sandboxAddress, flag: "--sandbox-management-port")
        } else if sandboxAddress != nil {
            addresses.sandboxManagement = try fromFile(endpoints?.management[.sandbox], "sandbox channel-management")
        }
        return addresses
    }

    private static func port(_ port: Int, on address: SocketAddress, flag: String) throws -> SocketAddress {
        guard port >= 0 && port <= 65535 else { throw UsageError("\(flag) must be in 0...65535") }
        return try SocketAddress(ip: address.host, port: UInt16(port))
    }

    /// Each port on a line of its own (tests and scripts read the port from the line's end), then the apps.
    func printWhereItListens(_ simulator: APNsSimulator) {
        print("simulating APNs on https://\(simulator.boundAddress)")
        if let sandbox = simulator.sandboxAddress { print("simulating APNs sandbox on https://\(sandbox)") }
        if let management = simulator.managementAddress { print("channel management on https://\(management)") }
        if let management = simulator.sandboxManagementAddress {
            print("sandbox channel management on https://\(management)")
        }
        for app in simulator.configuration.apps {
            let keys = app.keys.map { key in
                var text =
                    "\(key.keyID) (team \(key.teamID), \(key.scope.environment?.rawValue ?? "production+sandbox")"
                if let topics = key.scope.topics { text += ", topics \(topics.sorted().joined(separator: ","))" }
                return text + ")"
            }
            print("app \(app.bundleID) (team \(app.teamID)): keys \(keys.joined(separator: ", "))")
        }
        if let prefix = simulator.configuration.sandboxTokenPrefix {
            print("sandbox tokens: those starting with \(prefix.lowercased()); the others are production tokens")
        }
    }
}
