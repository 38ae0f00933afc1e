#ifndef TESSERA_COMMON_NET_LISTENER_STATS_H_
#define TESSERA_COMMON_NET_LISTENER_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace tessera::net {

// What readiness, the metrics and the logs know of one listening port. Written by its
// accept loop, read from anywhere.
struct ListenerStats {
  std::string name;  // "grpc", "http", "cluster", "metrics", "store".
  std::atomic<int> port{0};
  // False while the listener cannot accept (its socket failed and is being reopened):
  // readiness is off meanwhile.
  std::atomic<bool> accepting{true};
  std::atomic<int64_t> open_connections{0};
  int64_t max_connections = 0;
  // Connections closed at accept: over the port's cap, in the descriptor reserve, or
  // shed while the process was out of descriptors.
  std::atomic<int64_t> refused{0};
};

// Logs refused connections at most once per interval per listener (a flood would otherwise
// write a line per connection), with the count since the last line.
class RefusalLog {
 public:
  void Refused(const ListenerStats& stats, const char* why);

 private:
  std::atomic<int64_t> last_log_ns_{0};
  std::atomic<int64_t> since_last_{0};
};

}  // namespace tessera::net

#endif  // TESSERA_COMMON_NET_LISTENER_STATS_H_
