/*
 * A slow disk's WAL flush, for the write benchmarks: every fdatasync and fsync of the process takes
 * SLOWSYNC_US microseconds more (bench/RESULTS.md, "Commit groups gathered while the previous ones
 * commit"). Set for the whole bench, it is meant for PostgreSQL's WAL flushes.
 *
 *   gcc -shared -fPIC -O2 -o /tmp/slow-fsync.so bench/slow-fsync.c -ldl
 *   SLOWSYNC_US=2000 LD_PRELOAD=/tmp/slow-fsync.so BENCH_ONLY='^production: PATCH' npm run bench
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void wait_extra(void) {
  const char *text = getenv("SLOWSYNC_US");
  long us = text ? atol(text) : 0;
  if (us > 0) {
    struct timespec pause = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&pause, NULL);
  }
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  wait_extra();
  return real(fd);
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  wait_extra();
  return real(fd);
}
