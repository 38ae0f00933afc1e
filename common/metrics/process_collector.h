#ifndef TESSERA_COMMON_METRICS_PROCESS_COLLECTOR_H_
#define TESSERA_COMMON_METRICS_PROCESS_COLLECTOR_H_

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace tessera {

// Process-level metrics read at scrape time from getrusage and /proc/self/statm:
// tessera_process_cpu_seconds_total (user + system; on CPU workers this is the device
// utilisation measure) and tessera_process_resident_memory_bytes.
class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_METRICS_PROCESS_COLLECTOR_H_
