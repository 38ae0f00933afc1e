#include "worker/service/kv_memory_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

// Block ids travel as uint32 and the coordinator keeps metadata per block; no device
// needs anywhere near this many.
constexpr uint64_t kMaxBlocks = uint64_t{1} << 20;

// On a device with its own memory the backend allocates more than the workspace while it
// runs: scratch grown on demand (activations converted to the weights' dtype, int8/int4
// weights widened for large batches, split-attention partials, sampling), cuBLASLt's
// workspace, the memory of captured graphs, and the allocator's rounding. None of it is
// known before the first steps; an allocation that fails mid-step fails requests, while a
// margin too large only costs KV blocks. So: 2 % of the device (1.6 GB of an 80 GB one),
// at least 512 MiB. The CPU backend's scratch is small and the host's memory is shared
// with everything else on it anyway: no margin there.
constexpr uint64_t kDeviceMarginFloor = uint64_t{512} << 20;
constexpr uint64_t kDeviceMarginDivisor = 50;

constexpr char kFlag[] = "--gpu-memory-utilization";

std::string GiB(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
}

// Shares rounded so that the suggestion works: up for a floor, down for a ceiling.
std::string ShareAtLeast(double share) {
  return absl::StrFormat("%.2f", std::min(1.0, std::ceil(share * 100) / 100));
}
std::string ShareAtMost(double share) {
  return absl::StrFormat("%.2f", std::floor(share * 100) / 100);
}

uint64_t Capped(uint64_t blocks, uint64_t max_blocks) {
  if (max_blocks > 0) blocks = std::min(blocks, max_blocks);
  return std::min(blocks, kMaxBlocks);
}

absl::StatusOr<uint64_t> PlanFromUtilization(const KvMemoryInputs& in) {
  const double u = in.gpu_memory_utilization;
  if (!(u > 0 && u <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(kFlag, " must be in (0, 1], got ", u));
  }
  if (in.device_total_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFlag, " is a share of the device's total memory, which this backend does not report; "
        "size the KV cache with --kv-memory-fraction or --kv-memory-mb"));
  }
  const uint64_t total = in.device_total_bytes;
  const auto budget = static_cast<uint64_t>(u * static_cast<double>(total));
  // Free memory was measured with the weights in: this worker can never have more than
  // that plus the weights. The reserve and the KV pool are still to be allocated.
  const uint64_t reachable = in.device_free_bytes + in.weight_bytes;
  if (budget > reachable) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kFlag, " ", u, " asks for ", GiB(budget), " of the device's ", GiB(total),
        ", but this worker can have at most ", GiB(reachable), ": ", GiB(in.device_free_bytes),
        " free now plus its ", GiB(in.weight_bytes),
        " of weights; other processes hold the rest. Lower it to at most ",
        ShareAtMost(static_cast<double>(reachable) / total), " or free the device"));
  }
  // Block 0 is the coordinator's and never holds tokens; two blocks is its floor.
  const uint64_t min_blocks = std::max<uint64_t>(2, in.blocks_per_sequence + 1);
  const uint64_t fixed = in.weight_bytes + in.activation_reserve_bytes;
  const uint64_t needed = fixed + min_blocks * in.bytes_per_block;
  const std::string sequence =
      in.blocks_per_sequence > 0
          ? absl::StrCat("one sequence of the full context (", in.blocks_per_sequence,
                         " KV blocks, plus block 0)")
          : absl::StrCat("the smallest KV cache (", min_blocks, " blocks)");
  const std::string smallest = absl::StrCat(
      "; it must be at least ", ShareAtLeast(static_cast<double>(needed) / total),
      in.blocks_per_sequence > 0 ? " (or shorten the context with --max-model-len)" : "");
  if (budget < fixed) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFlag, " ", u, " gives this worker ", GiB(budget), " of the device's ", GiB(total),
        ", less than its ", GiB(in.weight_bytes), " of weights and ",
        GiB(in.activation_reserve_bytes), " activation reserve alone; ", sequence, " needs ",
        GiB(min_blocks * in.bytes_per_block), " more", smallest));
  }
  const uint64_t blocks = (budget - fixed) / in.bytes_per_block;
  if (blocks < min_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFlag, " ", u, " gives this worker ", GiB(budget), " of the device's ", GiB(total),
        ", which leaves ", GiB(budget - fixed), " (", blocks, " blocks) for the KV cache after ",
        GiB(in.weight_bytes), " of weights and ", GiB(in.activation_reserve_bytes),
        " activation reserve; ", sequence, " needs ", GiB(min_blocks * in.bytes_per_block),
        smallest));
  }
  return Capped(blocks, in.max_blocks);
}

}  // namespace

absl::StatusOr<uint64_t> PlanKvBlocks(const KvMemoryInputs& in) {
  if (in.bytes_per_block == 0) {
    return absl::InternalError("a KV block of 0 bytes: the model has no KV heads on this rank");
  }
  if (in.kv_memory_bytes > 0) return Capped(in.kv_memory_bytes / in.bytes_per_block, in.max_blocks);
  if (in.gpu_memory_utilization != 0) return PlanFromUtilization(in);
  const double fraction = in.kv_memory_fraction > 0 ? in.kv_memory_fraction : 0.5;
  return Capped(static_cast<uint64_t>(static_cast<double>(in.device_free_bytes) * fraction /
                                      static_cast<double>(in.bytes_per_block)),
                in.max_blocks);
}

uint64_t ActivationReserveBytes(uint64_t workspace_bytes, bool device_memory,
                                uint64_t device_total_bytes) {
  if (!device_memory) return workspace_bytes;
  return workspace_bytes +
         std::max(kDeviceMarginFloor, device_total_bytes / kDeviceMarginDivisor);
}

}  // namespace tessera
