#include "coordinator/scheduler/sequence.h"

namespace tessera::sched {

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kEos: return "eos";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

}  // namespace tessera::sched
