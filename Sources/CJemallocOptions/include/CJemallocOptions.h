// Nothing to import: the target only contributes `malloc_conf` (options.c) to the executable's link.
