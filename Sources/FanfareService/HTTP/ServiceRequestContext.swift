import Hummingbird

/// The request context of the service's router.
package struct ServiceRequestContext: RequestContext {
    package var coreContext: CoreRequestContextStorage

    package init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }

    /// The front door limits bodies itself (`--max-body`).
    package var maxUploadSize: Int { .max }
}
