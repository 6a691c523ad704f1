// libFuzzer's entry point for programs that have their own main (LLVM 12+): SwiftPM links every executable
// through its module's `<name>_main`, so the targets call the driver from `@main` instead of using
// libFuzzer's `main`.
#ifndef FANFARE_LIBFUZZER_DRIVER_H
#define FANFARE_LIBFUZZER_DRIVER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*testOneInput)(const uint8_t *data, size_t size));

#endif
