#pragma once

/// Makes jemalloc return freed pages to the system after `milliseconds` instead of its default ten
/// seconds (`dirty_decay_ms`, for the arenas there are and those made later). Does nothing and returns
/// -1 when the process does not run on jemalloc, or when MALLOC_CONF names `dirty_decay_ms` (the
/// operator's choice wins); 0 when it was set.
int apns_jemalloc_set_dirty_decay_ms(long milliseconds);
