#include "common/net/listener_collector.h"

#include <dirent.h>

#include <functional>
#include <string>

#include "common/net/fd_budget.h"

namespace tessera::net {
namespace {

prometheus::MetricFamily PerListener(const char* name, const char* help, prometheus::MetricType type,
                                     const std::vector<const ListenerStats*>& listeners,
                                     const std::function<double(const ListenerStats&)>& value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  for (const ListenerStats* l : listeners) {
    prometheus::ClientMetric m;
    m.label.push_back({"listener", l->name});
    if (type == prometheus::MetricType::Counter) {
      m.counter.value = value(*l);
    } else {
      m.gauge.value = value(*l);
    }
    f.metric.push_back(std::move(m));
  }
  return f;
}

prometheus::MetricFamily Gauge(const char* name, const char* help, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric m;
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
  return f;
}

int OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // The directory's own descriptor.
}

}  // namespace

std::vector<prometheus::MetricFamily> ListenerCollector::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(PerListener("tessera_listener_open_connections", "Connections open on the port.", MetricType::Gauge,
                            listeners_, [](const ListenerStats& l) { return double(l.open_connections.load()); }));
  out.push_back(PerListener("tessera_listener_max_connections", "The port's connection cap in force.",
                            MetricType::Gauge, listeners_,
                            [](const ListenerStats& l) { return double(l.max_connections); }));
  out.push_back(PerListener("tessera_listener_refused_connections_total",
                            "Connections closed at accept: over the cap, in the descriptor reserve, or shed while "
                            "the process was out of descriptors.",
                            MetricType::Counter, listeners_,
                            [](const ListenerStats& l) { return double(l.refused.load()); }));
  out.push_back(PerListener("tessera_listener_accepting", "1 while the port accepts connections.", MetricType::Gauge,
                            listeners_, [](const ListenerStats& l) { return l.accepting.load() ? 1.0 : 0.0; }));
  out.push_back(Gauge("tessera_process_open_fds", "File descriptors open in this process.", OpenFds()));
  out.push_back(Gauge("tessera_process_fd_limit", "RLIMIT_NOFILE of this process.", CurrentFdBudget().limit));
  out.push_back(Gauge("tessera_process_fd_reserve", "Descriptors connections never take (--fd-reserve).",
                      CurrentFdBudget().reserve));
  return out;
}

}  // namespace tessera::net
