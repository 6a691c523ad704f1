/// Which registrations a removal may touch: one app in one environment (an engine's own), every environment of
/// one bundle id (an app's API routes), or every app. A deployment serves several apps from one registry, so an
/// app's routes and its engines' maintenance must never reach another app's tokens.
public struct RegistryScope: Sendable, Equatable, CustomStringConvertible {
    /// nil: every app.
    public var bundleID: String?
    /// nil: every environment (of `bundleID`'s app, or of every app).
    public var environment: APNsEnvironment?

    public init(bundleID: String?, environment: APNsEnvironment?) {
        self.bundleID = bundleID
        self.environment = environment
    }

    public static let everything = RegistryScope(bundleID: nil, environment: nil)

    public static func app(_ bundleID: String, _ environment: APNsEnvironment) -> RegistryScope {
        RegistryScope(bundleID: bundleID, environment: environment)
    }

    public static func bundle(_ bundleID: String) -> RegistryScope {
        RegistryScope(bundleID: bundleID, environment: nil)
    }

    public var isEverything: Bool { bundleID == nil && environment == nil }

    public func contains(bundleID: String, environment: APNsEnvironment) -> Bool {
        (self.bundleID == nil || self.bundleID == bundleID)
            && (self.environment == nil || self.environment == environment)
    }

    public var description: String {
        switch (bundleID, environment) {
        case (nil, nil): return "every app"
        case (let bundle?, nil): return bundle
        case (nil, let environment?): return "every app (\(environment))"
        case (let bundle?, let environment?): return "\(bundle) (\(environment))"
        }
    }
}
