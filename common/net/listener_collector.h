#ifndef TESSERA_COMMON_NET_LISTENER_COLLECTOR_H_
#define TESSERA_COMMON_NET_LISTENER_COLLECTOR_H_

#include <vector>

#include "common/net/listener_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace tessera::net {

// The listeners' counts at scrape time, labelled listener="grpc|http|cluster":
//   tessera_listener_open_connections, tessera_listener_max_connections (gauges),
//   tessera_listener_refused_connections_total (counter), tessera_listener_accepting (0/1),
// plus tessera_process_open_fds and tessera_process_fd_limit, the budget they share.
class ListenerCollector : public prometheus::Collectable {
 public:
  // The listeners must outlive the collector's scrapes.
  explicit ListenerCollector(std::vector<const ListenerStats*> listeners) : listeners_(std::move(listeners)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::vector<const ListenerStats*> listeners_;
};

}  // namespace tessera::net

#endif  // TESSERA_COMMON_NET_LISTENER_COLLECTOR_H_
