import ArgumentParser
import FanfareClient

/// How many APNs connections a worker keeps: the autoscaler by default (within --min-connections and
/// --max-connections), or a fixed --connections count. Shared by `load`, `demo` and `serve`.
public struct ConnectionCountOptions: ParsableArguments {
    @Option(help: "A fixed number of connections per worker (turns the autoscaler off).")
    var connections: Int?

    @Option(help: "Autoscaler: connections per worker it keeps at least (and opens at start).")
    var minConnections = ConnectionAutoscaling.standard.minimumConnections

    @Option(help: "Autoscaler: connections per worker it opens at most.")
    var maxConnections = ConnectionAutoscaling.standard.maximumConnections

    @Flag(help: "No autoscaler: keep --connections (default 4) per worker.")
    var noAutoscale = false

    /// The count when the autoscaler is off and no --connections is given (the count before it existed).
    static let fixedDefault = 4

    /// Sets `connectionsPerWorker` or `autoscaling` on `client`; checks the counts with the flags' names.
    public init() {}

    public func apply(to client: inout ClientConfiguration, streams: Int) throws(UsageError) {
        typealias Limits = ClientConfiguration.Limits
        let range = 1...Limits.connectionsPerWorker
        if let connections, !range.contains(connections) {
            throw UsageError("--connections \(connections) must be \(range.lowerBound)...\(range.upperBound)")
        }
        guard range.contains(minConnections) else {
            throw UsageError("--min-connections \(minConnections) must be \(range.lowerBound)...\(range.upperBound)")
        }
        guard range.contains(maxConnections), maxConnections >= minConnections else {
            throw UsageError(
                "--max-connections \(maxConnections) must be \(minConnections)...\(range.upperBound) (at least --min-connections)"
            )
        }
        if connections != nil || noAutoscale {
            let fixed = connections ?? Self.fixedDefault
            guard fixed * streams <= Limits.streamsPerWorker else {
                throw UsageError(
                    "--connections \(fixed) × --streams \(streams) exceeds \(Limits.streamsPerWorker) streams per thread"
                )
            }
            client.connectionsPerWorker = fixed
            client.autoscaling = nil
        } else {
            guard maxConnections * streams <= Limits.streamsPerWorker else {
                throw UsageError(
                    "--max-connections \(maxConnections) × --streams \(streams) exceeds \(Limits.streamsPerWorker) streams per thread"
                )
            }
            var autoscaling = ConnectionAutoscaling.standard
            autoscaling.minimumConnections = minConnections
            autoscaling.maximumConnections = maxConnections
            client.autoscaling = autoscaling
        }
    }
}
