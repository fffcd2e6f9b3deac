// librdkafka from Debian's librdkafka-dev (pkg-config: rdkafka). The mock cluster header gives
// kafka-dev, the tests and the demo a real Kafka protocol endpoint on loopback TCP.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
