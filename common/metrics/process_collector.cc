#include "common/metrics/process_collector.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace tessera {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return f;
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) {
    const double cpu = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
                       usage.ru_stime.tv_usec / 1e6;
    out.push_back(Family("tessera_process_cpu_seconds_total", "User and system CPU time of this process.",
                         prometheus::MetricType::Counter, cpu));
  }
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  if (statm >> pages_total >> pages_resident) {
    out.push_back(Family("tessera_process_resident_memory_bytes", "Resident memory of this process.",
                         prometheus::MetricType::Gauge,
                         static_cast<double>(pages_resident) * ::sysconf(_SC_PAGESIZE)));
  }
  return out;
}

}  // namespace tessera
