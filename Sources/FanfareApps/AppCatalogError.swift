/// Why an apps file cannot be used. Names the file and the field; never contains key material.
public struct AppCatalogError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The apps file (or what stood for it, e.g. "the single-app flags").
    public var source: String
    /// Where in the file, e.g. `apps[1].keys[0].environments` (nil: the file as a whole).
    public var field: String?
    public var problem: String

    public init(source: String, field: String? = nil, problem: String) {
        self.source = source
        self.field = field
        self.problem = problem
    }

    public var description: String {
        if let field { return "apps file \(source): \(field): \(problem)" }
        return "apps file \(source): \(problem)"
    }
}
