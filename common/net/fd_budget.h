#ifndef TESSERA_COMMON_NET_FD_BUDGET_H_
#define TESSERA_COMMON_NET_FD_BUDGET_H_

#include <cstdint>

namespace tessera::net {

// The process's file descriptors, split between connections and everything else.
// Connections may only take descriptors below `limit - reserve`: the rest stays for model
// files, channels to the workers, logs and TLS reloads, so a flood of connections is shed at
// accept instead of failing an open() elsewhere or wedging a listener (gRPC 1.51's own
// listener stops for good on EMFILE).
struct FdBudget {
  int limit = 0;    // RLIMIT_NOFILE's soft limit, after raising it to the hard one.
  int reserve = 0;  // Descriptors connections never take.
  int connections() const { return limit > reserve ? limit - reserve : 0; }
};

// Raises the soft RLIMIT_NOFILE to the hard limit (as Go's runtime does: the soft 1024 of
// many distributions is a select() relic) and sets the reserve: `reserve` > 0 as given
// (at most half the limit), 0: max(64, limit / 8). Call once at start, before any listener.
FdBudget ConfigureFdBudget(int64_t reserve);

// The budget ConfigureFdBudget set (limit from getrlimit and no reserve before that).
FdBudget CurrentFdBudget();

// Whether `fd`, just returned by accept, lies in the reserve. The kernel hands out the
// lowest free descriptor, so an accepted fd >= limit - reserve means every lower one is
// taken: closing it at once keeps the reserve free at the cost of one comparison.
bool InFdReserve(int fd);

// Sheds one pending connection of a listener when the process is out of descriptors
// (accept failed with EMFILE/ENFILE): frees a spare descriptor held for this, accepts and
// closes the connection (its client sees a close rather than hanging in the backlog), and
// takes the spare back. Without it the pending connection keeps the listening socket
// readable and the accept loop spins. Returns whether a connection was shed.
bool ShedOnePendingConnection(int listen_fd);

// Whether errno (or an error code's value) says the process or the system is out of
// descriptors.
bool IsOutOfDescriptors(int error);

}  // namespace tessera::net

#endif  // TESSERA_COMMON_NET_FD_BUDGET_H_
