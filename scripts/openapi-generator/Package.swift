// swift-tools-version:6.1
// Builds swift-openapi-generator's command-line tool for scripts/generate-openapi. A package of its own, so the
// generator (OpenAPIKit, Yams, ...) is never part of Fanfare's own build: its output is committed instead.
import PackageDescription

let package = Package(
    name: "FanfareOpenAPIGenerator",
    dependencies: [
        .package(url: "https://github.com/apple/swift-openapi-generator", exact: "1.14.3")
    ]
)
