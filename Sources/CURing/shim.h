// Thin C shim over liburing: macros and enum-built constants that Swift cannot import.
#ifndef FANFARE_CURING_SHIM_H
#define FANFARE_CURING_SHIM_H
// liburing.h defines _GNU_SOURCE/_XOPEN_SOURCE before including glibc headers. Parsed that way inside this
// module, types such as fd_set differ from the copies in Swift's Glibc and every other C module, and clang
// refuses to import both. So include the glibc headers first, in their default mode; liburing's later
// defines then find them already parsed. (cpu_set_t is defined by <sched.h> in every mode.)
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/eventfd.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <inttypes.h>
#include <time.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>
#include <pthread.h>
#include <liburing.h>

// Declared by glibc only under _GNU_SOURCE.
extern int pthread_setaffinity_np(pthread_t thread, size_t cpusetsize, const cpu_set_t *cpuset);

static const unsigned char capns_IOSQE_IO_LINK = IOSQE_IO_LINK;
static const unsigned char capns_IOSQE_FIXED_FILE = IOSQE_FIXED_FILE;
static const unsigned char capns_IOSQE_BUFFER_SELECT = IOSQE_BUFFER_SELECT;
static const unsigned char capns_IOSQE_ASYNC = IOSQE_ASYNC;

static inline void capns_sqe_set_flags(struct io_uring_sqe *sqe, unsigned char flags) {
    sqe->flags |= flags;
}

/// Pins the calling thread to one CPU; returns 0 or an errno.
static inline int capns_pin_current_thread(int cpu) {
    cpu_set_t set;
    __CPU_ZERO_S(sizeof(set), &set);
    __CPU_SET_S(cpu, sizeof(set), &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static inline int capns_errno(void) { return errno; }

/// Line-buffered stdout even into a pipe or file (Swift 6 cannot touch the C global `stdout` itself).
static inline void capns_line_buffer_stdout(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

#endif
