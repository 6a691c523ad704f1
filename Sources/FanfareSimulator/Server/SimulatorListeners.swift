import FanfareIO

/// The sockets one simulator listens on: each environment's push port (a SO_REUSEPORT socket per worker thread) and
/// channel-management port. Opened together: when one cannot be opened, those already open are closed.
struct SimulatorListeners {
    /// One port: its sockets (one per worker) and where it is (the real port when port 0 was asked for).
    struct Port {
        var environment: SimulatorConfiguration.Environment
        var descriptors: [Int32]
        var address: SocketAddress
    }

    private(set) var push: [Port] = []
    private(set) var management: [Port] = []

    /// The main listener plays `environment`; the sandbox ones, when asked for, play sandbox.
    init(_ options: APNsSimulator.Options, environment: SimulatorConfiguration.Environment) throws {
        do {
            push.append(try Self.openPush(options.listen, environment: environment, threads: options.threads))
            if let sandbox = options.sandboxListen {
                push.append(try Self.openPush(sandbox, environment: .sandbox, threads: options.threads))
            }
            if let address = options.managementListen {
                management.append(try Self.openManagement(address, environment: environment))
            }
            if let address = options.sandboxManagementListen {
                management.append(try Self.openManagement(address, environment: .sandbox))
            }
        } catch {
            for port in push + management {
                for descriptor in port.descriptors { Sockets.close(descriptor) }
            }
            throw error
        }
    }

    /// The push port of `environment`, if there is one.
    func pushAddress(_ environment: SimulatorConfiguration.Environment) -> SocketAddress? {
        push.first { $0.environment == environment }?.address
    }

    func managementAddress(_ environment: SimulatorConfiguration.Environment) -> SocketAddress? {
        management.first { $0.environment == environment }?.address
    }

    /// The first socket picks the port (possibly 0 → a free one); the others join it with SO_REUSEPORT.
    private static func openPush(
        _ address: SocketAddress, environment: SimulatorConfiguration.Environment, threads: Int
    ) throws -> Port {
        let first = try Sockets.listen(on: address, backlog: 4096, reusePort: true)
        var descriptors = [first.fd]
        do {
            for _ in 1..<threads {
                descriptors.append(try Sockets.listen(on: first.boundAddress, backlog: 4096, reusePort: true).fd)
            }
        } catch {
            for descriptor in descriptors { Sockets.close(descriptor) }
            throw error
        }
        return Port(environment: environment, descriptors: descriptors, address: first.boundAddress)
    }

    /// One thread serves a management port: channel management is rare.
    private static func openManagement(
        _ address: SocketAddress, environment: SimulatorConfiguration.Environment
    ) throws -> Port {
        let socket = try Sockets.listen(on: address, backlog: 256, reusePort: false)
        return Port(environment: environment, descriptors: [socket.fd], address: socket.boundAddress)
    }
}
