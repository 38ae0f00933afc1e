#include "common/net/fd_budget.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>

namespace tessera::net {
namespace {

std::atomic<int> g_limit{0};
std::atomic<int> g_reserve{0};

std::mutex g_spare_mu;
int g_spare_fd = -1;  // Guarded by g_spare_mu.

int SoftLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 30));
}

void TakeSpareLocked() {
  if (g_spare_fd < 0) g_spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace

FdBudget ConfigureFdBudget(int64_t reserve) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &raised);
  }
  const int limit = SoftLimit();
  const int chosen = reserve > 0 ? static_cast<int>(std::min<int64_t>(reserve, limit / 2))
                                 : std::max(64, limit / 8);
  g_limit = limit;
  g_reserve = std::min(chosen, limit / 2);
  std::lock_guard<std::mutex> lock(g_spare_mu);
  TakeSpareLocked();
  return CurrentFdBudget();
}

FdBudget CurrentFdBudget() {
  FdBudget b;
  b.limit = g_limit.load();
  if (b.limit == 0) b.limit = SoftLimit();
  b.reserve = g_reserve.load();
  return b;
}

bool InFdReserve(int fd) {
  const int reserve = g_reserve.load(std::memory_order_relaxed);
  return reserve > 0 && fd >= g_limit.load(std::memory_order_relaxed) - reserve;
}

bool IsOutOfDescriptors(int error) { return error == EMFILE || error == ENFILE; }

bool ShedOnePendingConnection(int listen_fd) {
  std::lock_guard<std::mutex> lock(g_spare_mu);
  if (g_spare_fd >= 0) {
    ::close(g_spare_fd);
    g_spare_fd = -1;
  }
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  TakeSpareLocked();
  return fd >= 0;
}

}  // namespace tessera::net
