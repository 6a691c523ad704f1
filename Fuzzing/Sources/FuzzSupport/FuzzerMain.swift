import CLibFuzzer

#if canImport(Glibc)
import Glibc
#endif

/// One seed input, written to the corpus by `--write-seeds`.
public struct Seed {
    public var name: String
    public var bytes: [UInt8]

    public init(_ name: String, _ bytes: [UInt8]) {
        self.name = name
        self.bytes = bytes
    }
}

/// The body of every target's `main`. `<target> --write-seeds DIR` writes `seeds()` into DIR (what the
/// committed corpus was made from); anything else is libFuzzer's command line (`-help=1` lists it).
public func runFuzzer(
    _ testOneInput: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32, seeds: () -> [Seed]
) -> Never {
    let arguments = CommandLine.arguments
    if arguments.count == 3 && arguments[1] == "--write-seeds" {
        exit(writeSeeds(seeds(), to: arguments[2]) ? 0 : 1)
    }
    // libFuzzer saves every crash itself; the Swift runtime's backtracer (set up before main, from the
    // environment) would hold the process for many seconds first. Start again without it.
    if getenv("SWIFT_BACKTRACE") == nil {
        setenv("SWIFT_BACKTRACE", "enable=no", 1)
        execv("/proc/self/exe", CommandLine.unsafeArgv)
    }
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv, testOneInput))
}

private func writeSeeds(_ seeds: [Seed], to directory: String) -> Bool {
    mkdir(directory, 0o755)
    for seed in seeds {
        let path = directory + "/" + seed.name
        guard let file = fopen(path, "wb") else {
            print("cannot write \(path): \(String(cString: strerror(errno)))")
            return false
        }
        let written = seed.bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, file) }
        fclose(file)
        guard written == seed.bytes.count else { return false }
    }
    print("wrote \(seeds.count) seeds to \(directory)")
    return true
}
