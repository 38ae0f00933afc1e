#include "common/net/listener_stats.h"

#include <chrono>
#include <string>

#include "common/logging.h"

namespace tessera::net {

void RefusalLog::Refused(const ListenerStats& stats, const char* why) {
  constexpr int64_t kIntervalNs = int64_t{10} * 1000 * 1000 * 1000;
  const int64_t count = since_last_.fetch_add(1) + 1;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_log_ns_.load();
  if (last != 0 && now - last < kIntervalNs) return;
  if (!last_log_ns_.compare_exchange_strong(last, now)) return;
  since_last_.fetch_sub(count);
  Log(LogLevel::kWarning, "listener", "refusing connections",
      {{"listener", stats.name},
       {"port", int64_t{stats.port.load()}},
       {"reason", std::string(why)},
       {"refused_since_last_line", count},
       {"open_connections", stats.open_connections.load()},
       {"max_connections", stats.max_connections}});
}

}  // namespace tessera::net
