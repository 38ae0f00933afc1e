#ifndef TESSERA_WORKER_INT4_WEIGHTS_H_
#define TESSERA_WORKER_INT4_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "kernels/backend.h"
#include "worker/gptq_checkpoint.h"
#include "worker/model_weights.h"

// Puts GPTQ/AWQ linear layers into backend memory as kU4 matrices, fusing column-parallel
// slices (q/k/v, gate/up) like the float loader does.
namespace tessera {

// One layer's slice: `prefix` is the module name ("model.layers.0.self_attn.q_proj"),
// [out_features, in_features] the float weight's shape.
struct Int4Part {
  std::string prefix;
  int64_t out_features = 0;
  int64_t in_features = 0;
  Range rows;
  Range cols;
};

// The module name of a "<module>.weight" tensor name ("" when it does not end that way).
std::string ModuleOfWeight(const std::string& weight_name);

// Stacks the row slices of `parts` (same columns and group size) into one kU4 matrix:
// one allocation holding the packed codes, then the scales, then the zeros.
absl::StatusOr<DeviceMatrix> LoadInt4Matrix(const Checkpoint& checkpoint,
                                            const Int4QuantConfig& config,
                                            const std::vector<Int4Part>& parts,
                                            kernels::Backend* backend);

// Puts row slices (same columns and group size) into backend memory as one kU4 matrix in
// the backend's layout: LoadInt4Matrix's second half, shared with GGUF's 4-bit blocks.
absl::StatusOr<DeviceMatrix> UploadInt4Matrix(const std::vector<Int4Matrix>& slices,
                                              kernels::Backend* backend, const std::string& name);

}  // namespace tessera

#endif  // TESSERA_WORKER_INT4_WEIGHTS_H_
