#ifndef TESSERA_TOOLS_TESSERA_COORDINATOR_LIMIT_FLAGS_H_
#define TESSERA_TOOLS_TESSERA_COORDINATOR_LIMIT_FLAGS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/flag_set.h"

namespace tessera::cli {

// One of the coordinator's admission, connection, drain and memory limits that `tessera
// serve` accepts under the same name and passes on.
struct ForwardedFlag {
  const char* name;  // Without the leading dashes.
  bool is_int;       // Else any string; the coordinator checks the value either way.
  const char* what;  // For --help.
};

inline constexpr std::array<ForwardedFlag, 17> kCoordinatorLimitFlags = {{
    {"max-queued-requests", true, "requests waiting per replica at most"},
    {"max-queued-tokens", true, "prompt tokens waiting per replica at most"},
    {"max-concurrent-streams", true, "Generate and GenerateStream calls served at once"},
    {"max-undelivered-tokens", true, "tokens a stream may have waiting for a client that does not read"},
    {"max-input-bytes", true, "largest prompt text accepted, in bytes"},
    {"max-pending-workers", true, "registered workers waiting for a group at most"},
    {"drain-timeout-seconds", true, "how long running requests may finish on SIGTERM"},
    {"max-connections", true, "open connections of the public APIs at most"},
    {"cluster-max-connections", true, "open connections of the cluster port at most"},
    {"handshake-timeout-seconds", true, "time a new connection has to finish its TLS handshake"},
    {"header-timeout-seconds", true, "time a client has to send its request headers"},
    {"idle-timeout-seconds", true, "time an idle connection is kept"},
    {"min-request-bytes-per-second", true, "slowest upload rate of a request body tolerated"},
    {"fd-reserve", true, "file descriptors kept free for the process itself"},
    {"max-inflight-input-bytes", true, "request bytes held in memory at once at most"},
    {"chat-special-tokens", false, "how special tokens in chat messages are read: parse or plain"},
    {"gpu-memory-utilization", false,
     "share of each worker's device memory, in (0, 1], for weights, activations and KV cache together"},
}};

// The values given to serve for kCoordinatorLimitFlags. Each is passed on only when given,
// so serve imposes no defaults of its own: the coordinator's stay in force, whatever they
// become.
class CoordinatorLimitFlags {
 public:
  // Adds --NAME for every entry of kCoordinatorLimitFlags.
  void Register(FlagSet& flags);
  // Integer flags hold integers (checked here so a typo fails before anything starts).
  absl::Status Validate() const;
  // `--name=value` for every flag given.
  std::vector<std::string> Args() const;
  // The value of a given integer flag, or nullopt.
  std::optional<int64_t> IntValue(const std::string& name) const;

 private:
  std::array<std::string, kCoordinatorLimitFlags.size()> values_;  // Empty: not given.
};

}  // namespace tessera::cli

#endif  // TESSERA_TOOLS_TESSERA_COORDINATOR_LIMIT_FLAGS_H_
