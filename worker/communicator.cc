#include "worker/communicator.h"

#include <cstring>

namespace tessera {

absl::Status SingleRankCommunicator::AllGather(const float* send, size_t count, float* recv) {
  if (send != recv) std::memcpy(recv, send, count * sizeof(float));
  return absl::OkStatus();
}

}  // namespace tessera
