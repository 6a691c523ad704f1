// Thin C shim over nghttp2 1.52 (Debian 12): only the classic (non-*2) API is available.
#ifndef FANFARE_CNGHTTP2_SHIM_H
#define FANFARE_CNGHTTP2_SHIM_H
#include <nghttp2/nghttp2.h>
#endif
