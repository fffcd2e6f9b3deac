// hiredis 0.14 from Debian's libhiredis-dev (pkg-config: hiredis). Only its RESP reply parser is used
// (`redisReader`); the connections are SwiftNIO channels, which is how Redis gets TLS (hiredis 0.14 has none).
#include <hiredis/hiredis.h>
