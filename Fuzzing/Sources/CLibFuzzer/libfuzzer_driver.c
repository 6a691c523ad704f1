// Header-only module: SwiftPM needs one source file per C target. The definition comes from libFuzzer
// (linked by -sanitize=fuzzer).
#include "libfuzzer_driver.h"
