#ifndef TESSERA_WORKER_MODEL_WEIGHTS_H_
#define TESSERA_WORKER_MODEL_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint.h"
#include "common/model_config.h"
#include "common/quantization.h"
#include "common/tensor_parallel.h"
#include "kernels/backend.h"
#include "worker/device_buffer.h"

namespace tessera {

// A weight matrix in backend memory.
struct DeviceMatrix {
  DeviceBuffer buffer;
  // Float scales of quantized dtypes (view.scales points here); empty where the layout
  // keeps them inside `buffer`.
  DeviceBuffer scales;
  kernels::MatrixView view;
};

// One decoder layer's weights as this rank holds them. q/k/v and gate/up are fused at load
// time (column-parallel, so their slices stack) to run one GEMM each.
struct LayerWeights {
  DeviceMatrix qkv;      // [(q_heads + 2 * kv_heads) * head_dim, hidden]
  DeviceMatrix o;        // [hidden, q_heads * head_dim]   row-parallel
  DeviceMatrix gate_up;  // [2 * intermediate, hidden]
  DeviceMatrix down;     // [hidden, intermediate]          row-parallel
  DeviceBuffer input_norm;  // [hidden] float
  DeviceBuffer post_norm;   // [hidden] float
  // [(q_heads + 2 * kv_heads) * head_dim] float, this rank's q/k/v bias slices fused like
  // the qkv rows; empty without biases (Llama, Mistral).
  DeviceBuffer qkv_bias;
  // [hidden] float, whole on every rank (added once, after the all-reduce); empty without.
  DeviceBuffer o_bias;
  // Qwen3: [head_dim] float each, the same for every head (so whole on every rank); empty
  // without.
  DeviceBuffer q_norm, k_norm;

  // A mixture-of-experts layer (ModelConfig::IsMoeLayer) holds these instead of
  // gate_up/down: the router [num_experts, hidden], whole on every rank, in the
  // checkpoint's dtype (as vLLM, never quantized: routing decisions are the most sensitive
  // numbers of the layer); the experts this rank holds (ShardLayout::experts), each cut to
  // ShardLayout::expert_intermediate; and Qwen2-MoE's shared expert with its gate [1, hidden].
  DeviceMatrix router;
  int first_expert = 0;
  int expert_intermediate = 0;
  std::vector<DeviceMatrix> expert_gate_up;  // [2 * expert_intermediate, hidden] each
  std::vector<DeviceMatrix> expert_down;     // [hidden, expert_intermediate] each
  std::vector<kernels::MatrixView> expert_gate_up_views, expert_down_views;
  DeviceMatrix shared_gate_up, shared_down, shared_gate;

  bool is_moe() const { return router.view.data != nullptr; }
  bool has_shared_expert() const { return shared_gate.view.data != nullptr; }
  kernels::ExpertWeights experts() const {
    return {first_expert, static_cast<int>(expert_gate_up.size()), expert_intermediate,
            expert_gate_up_views.data(), expert_down_views.data()};
  }
};

struct ModelWeights {
  DeviceMatrix embed;    // [vocab shard, hidden]
  DeviceMatrix lm_head;  // [vocab shard, hidden]; unused when tied (embed serves both).
  bool tied = false;
  DeviceBuffer final_norm;  // [hidden] float
  std::vector<LayerWeights> layers;
  uint64_t bytes = 0;  // Backend bytes held by the weights.

  const kernels::MatrixView& lm_head_view() const { return tied ? embed.view : lm_head.view; }
};

// Called after each tensor with (tensors done, tensors total, bytes so far).
using LoadProgress = std::function<void(int, int, uint64_t)>;

// Loads this rank's slice of every weight: the bytes of other ranks' slices are never read.
// Matrices keep the checkpoint's dtype, except that with `quantization` the linear layers
// (qkv, o, gate_up, down, every expert's) become int8 (scales per 32 columns, packed in the backend's
// Int8WeightLayout) or FP8 (per-row scales); embedding and lm_head stay
// in the checkpoint's dtype (as in vLLM: they hold few of the bytes a decode step reads
// per layer, and the logits are the most sensitive). Norm weights become float.
// Pre-quantized checkpoints (config.json's quantization_config) load their linear layers
// as stored: GPTQ/AWQ as kU4, FP8 as kF8E4M3 with per-row scales (worker/fp8_checkpoint.h);
// `quantization` other than kNone on such a checkpoint is INVALID_ARGUMENT.
absl::StatusOr<ModelWeights> LoadModelWeights(const Checkpoint& checkpoint,
                                              const ModelConfig& config,
                                              const ShardLayout& layout,
                                              kernels::Backend* backend,
                                              const LoadProgress& progress = nullptr,
                                              WeightQuantization quantization =
                                                  WeightQuantization::kNone);

}  // namespace tessera

#endif  // TESSERA_WORKER_MODEL_WEIGHTS_H_
