// hiredis 0.14 from Debian's libhiredis-dev (pkg-config: hiredis). No TLS in this version.
#include <hiredis/hiredis.h>
