#ifndef TESSERA_WORKER_GGUF_WEIGHTS_H_
#define TESSERA_WORKER_GGUF_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "worker/gptq_checkpoint.h"

// GGUF block types served as the file stores them: Q8_0 as group-wise int8 weights and
// Q4_0 / Q4_1 / Q4_K as group-wise int4 weights, both in groups of 32 columns (see
// common/gguf_quants.h). Other types are read as floats through Checkpoint::ReadSlice.
namespace tessera {

enum class GgufNative { kNone, kInt8, kInt4 };

// How the slice `cols` of tensor `name` can be served: kNone when the checkpoint is not
// GGUF, the type has no native form, or the slice does not start and end on a 32-column
// group.
GgufNative GgufNativeFormat(const Checkpoint& checkpoint, const std::string& name, Range cols);

// Rows and columns of a Q8_0 tensor: codes [rows, cols] and scales [rows, cols / 32].
struct Int8Slice {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int8_t> codes;
  std::vector<float> scales;
};
absl::StatusOr<Int8Slice> ReadGgufInt8(const Checkpoint& checkpoint, const std::string& name,
                                       Range rows, Range cols);

// Rows and columns of a Q4_0 / Q4_1 / Q4_K tensor in groups of 32. FAILED_PRECONDITION
// when a group has a zero scale but an offset (then the caller reads floats instead).
absl::StatusOr<Int4Matrix> ReadGgufInt4(const Checkpoint& checkpoint, const std::string& name,
                                        Range rows, Range cols);

}  // namespace tessera

#endif  // TESSERA_WORKER_GGUF_WEIGHTS_H_
