// nghttp2 1.52 (Debian 12) as the fuzzers' reference HPACK: no library target of Fanfare links it any more,
// so the fuzz package declares it itself (the main package's CNghttp2 serves its tests).
#ifndef FANFARE_CNGHTTP2_REFERENCE_SHIM_H
#define FANFARE_CNGHTTP2_REFERENCE_SHIM_H
#include <nghttp2/nghttp2.h>
#endif
