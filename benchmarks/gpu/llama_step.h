#ifndef TESSERA_BENCHMARKS_GPU_LLAMA_STEP_H_
#define TESSERA_BENCHMARKS_GPU_LLAMA_STEP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_backend.h"

// A Llama-shaped layer stack with random BF16 weights on one GPU, driven through the CUDA
// backend exactly as a forward pass would (embedding, per layer norm / QKV / RoPE / KV write /
// paged attention / O / norm / gate_up / SiLU-mul / down, final norm, lm_head, argmax).
namespace tessera::bench {

struct LlamaShape {
  int hidden = 4096;
  int inter = 14336;
  int q_heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int layers = 32;
  int vocab = 128256;
  int block_size = 16;
  float rope_theta = 500000.0f;
  // The KV cache's element type: BF16, what the worker picks for BF16 checkpoints (and
  // what the tensor-core prefill attention reads), or F32.
  DType kv_dtype = DType::kBF16;

  int64_t QkvRows() const { return static_cast<int64_t>(q_heads + 2 * kv_heads) * head_dim; }
  // Weight bytes one token's forward streams: every layer matrix plus lm_head (BF16).
  int64_t StepWeightBytes() const;
  // Matmul parameters one token touches (layers + lm_head).
  int64_t LayerMatmulParams() const;
};

struct StepTiming {
  double step_ms = 0;       // Whole forward step.
  double gemm_only_ms = 0;  // The same step's GEMMs alone.
  double attention_ms = 0;  // The same step's attention calls alone.
};

class LlamaStepBench {
 public:
  // Allocates weights for `shape` and per-layer KV caches holding `max_cache_tokens`; a
  // clear error when the GPU lacks the memory.
  static absl::StatusOr<std::unique_ptr<LlamaStepBench>> Create(kernels::CudaBackend* backend,
                                                                LlamaShape shape,
                                                                int64_t max_cache_tokens);
  ~LlamaStepBench();

  // `batch` sequences each computing `new_tokens` tokens on top of `context - new_tokens`
  // cached ones (decode: new_tokens 1; prefill: batch 1, new_tokens == context).
  // lm_head runs on each sequence's last token only.
  absl::StatusOr<StepTiming> Time(int batch, int context, int new_tokens, int warmup,
                                  int iters);

  // Runs later steps on `backend`, another backend on the same device (the weights and
  // caches are plain device memory): the same model under another activation dtype.
  // Set the creating backend back before destroying this (it frees the memory).
  void set_backend(kernels::CudaBackend* backend) { backend_ = backend; }

 private:
  LlamaStepBench(kernels::CudaBackend* backend, LlamaShape shape)
      : backend_(backend), shape_(shape) {}
  void* Alloc(size_t bytes);
  struct Buffers;
  enum class Part { kAll, kGemms, kAttention };
  void RunStep(const Buffers& b, Part part);

  kernels::CudaBackend* backend_;
  LlamaShape shape_;
  std::vector<void*> allocations_;
  int64_t cache_blocks_ = 0;
  struct Layer {
    void* qkv;
    void* o;
    void* gate_up;
    void* down;
    float* input_norm;
    float* post_norm;
    void* k_cache;
    void* v_cache;
  };
  std::vector<Layer> layers_;
  void* embed_ = nullptr;
  void* lm_head_ = nullptr;
  float* final_norm_ = nullptr;
  float* inv_freq_ = nullptr;  // [head_dim / 2] plain (unscaled) RoPE frequencies.
};

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_GPU_LLAMA_STEP_H_
