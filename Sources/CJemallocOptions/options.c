// jemalloc's options, compiled into the executable: jemalloc reads the global `malloc_conf` at its
// first allocation (MALLOC_CONF in the environment still overrides it).
//
// narenas:1 — one arena instead of four per core. A job's objects are allocated on one thread and
// freed on another, so with several arenas each keeps its own partly used pages: `run`'s peak RSS over
// a 1M-job campaign fell from 172-180 to 142-146 MiB with one arena, at the same CPU per job (the
// threads still allocate from their own caches; the arena's lock is taken only to refill or flush them).
#include "CJemallocOptions.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

const char *malloc_conf = "narenas:1";

// jemalloc's control interface; weak, so a process without jemalloc (a test binary) links and skips it.
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));

// `run` calls this when an app uses the binary transport (RunCommand says why).
int apns_jemalloc_set_dirty_decay_ms(long milliseconds) {
    if (mallctl == NULL) return -1;
    const char *conf = getenv("MALLOC_CONF");
    if (conf != NULL && strstr(conf, "dirty_decay_ms") != NULL) return -1;
    ssize_t value = (ssize_t)milliseconds;
    // Arenas made from now on, then the one there is (narenas:1: arena 0).
    if (mallctl("arenas.dirty_decay_ms", NULL, NULL, &value, sizeof value) != 0) return -1;
    if (mallctl("arena.0.dirty_decay_ms", NULL, NULL, &value, sizeof value) != 0) return -1;
    return 0;
}
