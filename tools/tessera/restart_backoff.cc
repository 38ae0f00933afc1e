#include "tools/tessera/restart_backoff.h"

#include <algorithm>

namespace tessera::cli {

RestartBackoff::Duration RestartBackoff::NextDelay(Duration uptime) {
  if (uptime >= stable_) next_ = initial_;
  const Duration delay = next_;
  next_ = std::min(next_ * 2, max_);
  return delay;
}

}  // namespace tessera::cli
