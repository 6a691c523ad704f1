// posix_spawn with the glibc extensions Swift's Glibc module does not import (they need _GNU_SOURCE):
// addchdir_np for the working directory and addclosefrom_np so the child inherits none of the test
// process's sockets, rings or files (a listener kept open by a child would outlive the test that closed it).
#define _GNU_SOURCE
#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

int fanfare_spawn(const char *path, char *const argv[], char *const envp[], const char *directory, int output_fd,
                  int error_fd, pid_t *pid) {
    posix_spawn_file_actions_t actions;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (result == 0) {
        result = output_fd >= 0 ? posix_spawn_file_actions_adddup2(&actions, output_fd, 1)
                                : posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    }
    if (result == 0) {
        result = error_fd >= 0 ? posix_spawn_file_actions_adddup2(&actions, error_fd, 2)
                               : posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    }
    if (result == 0 && directory != NULL) result = posix_spawn_file_actions_addchdir_np(&actions, directory);
    if (result == 0) result = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    // The child starts with no signal blocked and the usual signals at their defaults: test threads may block
    // SIGTERM or ignore SIGPIPE, and a child would inherit both (nghttpd ignoring SIGTERM, say).
    posix_spawnattr_t attributes;
    if (result == 0) result = posix_spawnattr_init(&attributes);
    if (result != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return result;
    }
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    int reset[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
    for (unsigned i = 0; i < sizeof(reset) / sizeof(reset[0]); i++) sigaddset(&defaults, reset[i]);
    result = posix_spawnattr_setsigmask(&attributes, &none);
    if (result == 0) result = posix_spawnattr_setsigdefault(&attributes, &defaults);
    if (result == 0) result = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (result == 0) result = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
}
