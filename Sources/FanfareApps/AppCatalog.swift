import FanfareStorage

/// The apps a deployment sends for (`fanfare serve --apps FILE`, docs/service.md "Apps"), checked as a whole:
/// ids and bundle ids unique, exactly one default, every app able to sign in at least one environment.
public struct AppCatalog: Sendable, CustomStringConvertible {
    /// In the file's order.
    public let apps: [AppDefinition]
    /// Where the apps came from (a file's path, or "the command-line flags").
    public let source: String

    /// Checks the set; `source` names it in errors.
    public init(apps: [AppDefinition], source: String) throws(AppCatalogError) {
        func fail(_ field: String?, _ problem: String) -> AppCatalogError {
            AppCatalogError(source: source, field: field, problem: problem)
        }
        guard !apps.isEmpty else { throw fail("apps", "lists no app; give at least one") }
        var ids: Set<String> = []
        var bundles: [String: String] = [:]
        for (index, app) in apps.enumerated() {
            let field = "apps[\(index)]"
            guard AppDefinition.isValidID(app.id) else {
                throw fail(
                    "\(field).id",
                    "'\(app.id.prefix(80))' must be 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit")
            }
            guard ids.insert(app.id).inserted else { throw fail("\(field).id", "'\(app.id)' is used twice") }
            if let other = bundles.updateValue(app.id, forKey: app.bundleID) {
                throw fail("\(field).bundle_id", "\(app.bundleID) is also app '\(other)''s bundle id")
            }
            guard !app.environments.isEmpty else {
                throw fail(
                    "\(field).keys",
                    "no key may sign for \(app.bundleID) in any environment (check each key's environments and topics)")
            }
        }
        let defaults = apps.filter(\.isDefault)
        if defaults.count > 1 {
            throw fail("apps", "\(defaults.map(\.id).joined(separator: ", ")) are all marked default; mark one")
        }
        if defaults.isEmpty && apps.count > 1 {
            throw fail("apps", "several apps and none is marked \"default\": true (today's /v1/... routes serve it)")
        }
        var checked = apps
        if defaults.isEmpty { checked[0].isDefault = true }
        self.apps = checked
        self.source = source
    }

    /// The app today's routes serve.
    public var defaultApp: AppDefinition {
        guard let app = apps.first(where: \.isDefault) else { preconditionFailure("a catalog always has a default") }
        return app
    }

    public subscript(id: String) -> AppDefinition? { apps.first { $0.id == id } }

    public var description: String { apps.map(\.description).joined(separator: "; ") }
}
