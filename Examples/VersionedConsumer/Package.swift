// swift-tools-version:6.1
// An application that depends on Fanfare the way another team would: by URL and version. It is also a check
// (scripts/check-versioned-dependency, run by the README's test command): SwiftPM refuses a versioned
// dependency whose library targets use unsafe build flags, so this package only builds while Fanfare's
// library targets have none.
import PackageDescription
import Foundation

// Where Fanfare comes from. The check points this at a tagged clone (file://…); an application writes its
// repository URL here instead.
let fanfareURL = ProcessInfo.processInfo.environment["FANFARE_PACKAGE_URL"] ?? "https://github.com/fanfare-push/fanfare"

let package = Package(
    name: "VersionedConsumer",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: fanfareURL, from: "0.1.0")
    ],
    targets: [
        .executableTarget(
            name: "VersionedConsumer",
            dependencies: [
                .product(name: "FanfareClient", package: "fanfare"),
                .product(name: "FanfareFanout", package: "fanfare"),
                .product(name: "FanfareStorage", package: "fanfare"),
                .product(name: "FanfareSQLite", package: "fanfare"),
                .product(name: "FanfareTLS", package: "fanfare"),
                .product(name: "FanfareCore", package: "fanfare"),
                .product(name: "FanfareIO", package: "fanfare"),
                .product(name: "FanfareSimulator", package: "fanfare"),
            ]
        )
    ]
)
