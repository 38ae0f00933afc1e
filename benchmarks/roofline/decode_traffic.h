#ifndef TESSERA_BENCHMARKS_ROOFLINE_DECODE_TRAFFIC_H_
#define TESSERA_BENCHMARKS_ROOFLINE_DECODE_TRAFFIC_H_

#include <cstdint>

#include "common/dtype.h"
#include "common/model_config.h"
#include "common/tensor_parallel.h"

namespace tessera::bench {

// Bytes one decode step must move from memory on one tensor-parallel rank, at the least,
// as worker/llama_model.cc runs it: every weight matrix of the rank is read once (GEMV
// weights dominate), the embedding contributes only the rows of the step's tokens unless it
// doubles as the lm_head (tied), and attention reads the whole KV context of every
// sequence (the KV cache is float32). Activations stay in cache and are not counted.
struct DecodeTraffic {
  // qkv, o, and the dense MLPs' gate_up and down; of a mixture-of-experts layer, its router
  // and shared expert.
  uint64_t layer_matrix_bytes = 0;
  // The experts the step's tokens were routed to, as the forward pass chose them (measured,
  // not estimated: with B tokens of top_k each, between top_k and min(B * top_k,
  // num_experts) experts per layer), in their stored type.
  uint64_t routed_expert_bytes = 0;
  uint64_t norm_bytes = 0;          // RMSNorm weights (float32).
  uint64_t lm_head_bytes = 0;       // This rank's vocabulary rows.
  uint64_t embedding_row_bytes = 0; // One row per token of the step.
  uint64_t kv_read_bytes = 0;       // K and V of `context` tokens per sequence, all layers.
  uint64_t kv_write_bytes = 0;      // The step's new K and V.

  uint64_t weight_bytes() const {
    return layer_matrix_bytes + routed_expert_bytes + norm_bytes + lm_head_bytes;
  }
  uint64_t total() const {
    return weight_bytes() + embedding_row_bytes + kv_read_bytes + kv_write_bytes;
  }
};

// One decode token for each of `batch` sequences whose KV cache holds `context` tokens
// after the step; matrices stored as `weight_dtype`; routed_expert_bytes left to the caller.
// `weight_dtype` is the layers' stored type (1 byte for INT8/FP8; their per-row scales are
// under 0.1 % and left out); `kv_dtype` the KV cache's.
DecodeTraffic ComputeDecodeTraffic(const ModelConfig& config, const ShardLayout& layout,
                                   DType weight_dtype, int batch, int context,
                                   DType kv_dtype = DType::kF32);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_ROOFLINE_DECODE_TRAFFIC_H_
