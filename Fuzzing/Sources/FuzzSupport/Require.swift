/// A property of the code under test does not hold: trap, so libFuzzer saves the input as a crash.
@inline(__always)
public func require(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID,
    line: UInt = #line
) {
    if !condition() { fatalError("property violated: \(message())", file: file, line: line) }
}
