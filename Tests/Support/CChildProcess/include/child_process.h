#ifndef FANFARE_CHILD_PROCESS_H
#define FANFARE_CHILD_PROCESS_H

#include <sys/types.h>

/// Starts `path` with `argv` and `envp` (NULL-terminated) through posix_spawn: in `directory` (or ours when
/// NULL), standard input from /dev/null, standard output and error to the given descriptors (-1: /dev/null),
/// and every other descriptor of ours closed in the child. Returns 0 and the child's pid, or an errno value.
int fanfare_spawn(const char *path, char *const argv[], char *const envp[], const char *directory, int output_fd,
                  int error_fd, pid_t *pid);

#endif
