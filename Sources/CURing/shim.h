// Thin C shim over liburing: macros and enum-built constants that Swift cannot import.
#ifndef FANFARE_CURING_SHIM_H
#define FANFARE_CURING_SHIM_H
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>

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
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static inline int capns_errno(void) { return errno; }

#endif
