#include "benchmarks/gpu/llama_step.h"

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmarks/gpu/event_timer.h"
#include "benchmarks/gpu/fill_random.h"
#include "common/dtype.h"
#include "kernels/cuda/launchers.h"

namespace tessera::bench {

using kernels::AttentionBatch;
using kernels::KvCacheShape;
using kernels::MatrixView;

int64_t LlamaShape::LayerMatmulParams() const {
  const int64_t per_layer = QkvRows() * hidden + static_cast<int64_t>(q_heads) * head_dim * hidden +
                            2LL * inter * hidden + static_cast<int64_t>(inter) * hidden;
  return per_layer * layers + static_cast<int64_t>(vocab) * hidden;
}

int64_t LlamaShape::StepWeightBytes() const { return LayerMatmulParams() * 2; }

// Device buffers of one step shape.
struct LlamaStepBench::Buffers {
  int batch = 0;
  int tokens = 0;
  int lm_rows = 0;
  const void* lm_input = nullptr;  // Rows of `normed` that lm_head reads.
  AttentionBatch attention;
  KvCacheShape cache_shape;
  int32_t* ids = nullptr;
  int32_t* positions = nullptr;
  int64_t* slots = nullptr;
  float* hidden = nullptr;  // The residual stream: float32.
  // Activations, in the backend's activation dtype (sized as float32, enough for either).
  char* normed = nullptr;
  char* qkv = nullptr;
  char* attn = nullptr;
  char* proj = nullptr;
  char* gate_up = nullptr;
  char* act = nullptr;
  char* mlp = nullptr;
  float* logits = nullptr;  // float32, as the worker's lm_head writes them.
  int32_t* sampled = nullptr;
  std::vector<void*> owned;
};

void* LlamaStepBench::Alloc(size_t bytes) {
  void* p = backend_->Allocate(bytes);
  if (p != nullptr) allocations_.push_back(p);
  return p;
}

LlamaStepBench::~LlamaStepBench() {
  backend_->Synchronize();
  for (void* p : allocations_) backend_->Free(p);
}

absl::StatusOr<std::unique_ptr<LlamaStepBench>> LlamaStepBench::Create(
    kernels::CudaBackend* backend, LlamaShape shape, int64_t max_cache_tokens) {
  std::unique_ptr<LlamaStepBench> bench(new LlamaStepBench(backend, shape));
  const int64_t h = shape.hidden;
  const int64_t block_elems = static_cast<int64_t>(shape.block_size) * shape.kv_heads *
                              shape.head_dim;
  bench->cache_blocks_ = (max_cache_tokens + shape.block_size - 1) / shape.block_size + 1;
  const int64_t weight_bytes = shape.StepWeightBytes() + static_cast<int64_t>(shape.vocab) * h * 2;
  const int64_t kv_elem = static_cast<int64_t>(DTypeSize(shape.kv_dtype));
  const int64_t cache_bytes = bench->cache_blocks_ * block_elems * kv_elem * 2 * shape.layers;
  const size_t free_bytes = backend->FreeMemoryBytes();
  if (static_cast<double>(weight_bytes + cache_bytes) > 0.95 * static_cast<double>(free_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the benchmark model needs ", (weight_bytes + cache_bytes) >> 20, " MiB (weights ",
        weight_bytes >> 20, " MiB, KV cache ", cache_bytes >> 20, " MiB) but the GPU has ",
        free_bytes >> 20, " MiB free; lower --layers or --context"));
  }
  uint64_t seed = 1;
  auto weights = [&](int64_t rows, int64_t cols, float scale) -> void* {
    const size_t n = static_cast<size_t>(rows * cols);
    void* p = bench->Alloc(n * 2);
    if (p != nullptr) FillRandom(p, n, DType::kBF16, scale, seed++, backend->stream());
    return p;
  };
  auto norm = [&]() -> float* {
    auto* p = static_cast<float*>(bench->Alloc(h * 4));
    if (p != nullptr) FillRandom(p, h, DType::kF32, 1.0f, seed++, backend->stream());
    return p;
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(h));
  for (int l = 0; l < shape.layers; ++l) {
    Layer layer;
    layer.qkv = weights(shape.QkvRows(), h, scale);
    layer.o = weights(h, static_cast<int64_t>(shape.q_heads) * shape.head_dim, scale);
    layer.gate_up = weights(2LL * shape.inter, h, scale);
    layer.down = weights(h, shape.inter, 1.0f / std::sqrt(static_cast<float>(shape.inter)));
    layer.input_norm = norm();
    layer.post_norm = norm();
    const size_t cache_elems = static_cast<size_t>(bench->cache_blocks_ * block_elems);
    layer.k_cache = bench->Alloc(cache_elems * kv_elem);
    layer.v_cache = bench->Alloc(cache_elems * kv_elem);
    if (layer.qkv == nullptr || layer.o == nullptr || layer.gate_up == nullptr ||
        layer.down == nullptr || layer.input_norm == nullptr || layer.post_norm == nullptr ||
        layer.k_cache == nullptr || layer.v_cache == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("out of GPU memory at layer ", l));
    }
    // Random rather than zero: the steps before the timed one write only their own slots.
    FillRandom(layer.k_cache, cache_elems, shape.kv_dtype, 1.0f, seed++, backend->stream());
    FillRandom(layer.v_cache, cache_elems, shape.kv_dtype, 1.0f, seed++, backend->stream());
    bench->layers_.push_back(layer);
  }
  bench->embed_ = weights(shape.vocab, h, 1.0f);
  bench->lm_head_ = weights(shape.vocab, h, scale);
  bench->final_norm_ = norm();
  std::vector<float> inv_freq(shape.head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = static_cast<float>(
        1.0 / std::pow(static_cast<double>(shape.rope_theta), 2.0 * i / shape.head_dim));
  }
  bench->inv_freq_ = static_cast<float*>(bench->Alloc(inv_freq.size() * sizeof(float)));
  if (bench->inv_freq_ != nullptr) {
    backend->CopyToDevice(bench->inv_freq_, inv_freq.data(), inv_freq.size() * sizeof(float));
  }
  if (bench->embed_ == nullptr || bench->lm_head_ == nullptr || bench->final_norm_ == nullptr ||
      bench->inv_freq_ == nullptr) {
    return absl::ResourceExhaustedError("out of GPU memory for embedding / lm_head");
  }
  backend->Synchronize();
  if (!backend->status().ok()) return backend->status();
  return bench;
}

void LlamaStepBench::RunStep(const Buffers& b, Part part) {
  const bool all = part == Part::kAll;
  const bool gemms = all || part == Part::kGemms;
  const bool attention = all || part == Part::kAttention;
  const LlamaShape& s = shape_;
  const int t = b.tokens;
  const int64_t h = s.hidden;
  const int qkv_rows = static_cast<int>(s.QkvRows());
  const int q_width = s.q_heads * s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  kernels::CudaBackend& be = *backend_;
  const size_t act_bytes = DTypeSize(be.activation_dtype());
  if (all) be.EmbeddingGather(b.ids, t, MatrixView{embed_, DType::kBF16, s.vocab, h}, 0, b.hidden);
  for (int l = 0; l < s.layers; ++l) {
    const Layer& w = layers_[l];
    if (all) {
      if (l == 0) {
        be.RmsNorm(b.hidden, w.input_norm, t, s.hidden, 1e-5f, b.normed);
      } else {
        be.AddRmsNorm(b.hidden, b.mlp, w.input_norm, t, s.hidden, 1e-5f, b.normed);
      }
    }
    if (gemms) be.Gemm(b.normed, t, MatrixView{w.qkv, DType::kBF16, qkv_rows, h}, b.qkv);
    if (all) {
      be.Rope(b.qkv, t, qkv_rows, b.positions, s.q_heads, s.kv_heads, s.head_dim, inv_freq_,
              1.0f);
      be.WriteKvCache(b.qkv + q_width * act_bytes,
                      b.qkv + (q_width + s.kv_heads * s.head_dim) * act_bytes, qkv_rows, b.slots,
                      t, b.cache_shape, w.k_cache, w.v_cache);
    }
    if (attention) {
      be.PagedAttention(b.qkv, qkv_rows, b.attention, w.k_cache, w.v_cache, b.cache_shape,
                        s.q_heads, scale, b.attn);
    }
    if (gemms) be.Gemm(b.attn, t, MatrixView{w.o, DType::kBF16, h, q_width}, b.proj);
    if (all) be.AddRmsNorm(b.hidden, b.proj, w.post_norm, t, s.hidden, 1e-5f, b.normed);
    if (gemms) be.Gemm(b.normed, t, MatrixView{w.gate_up, DType::kBF16, 2LL * s.inter, h}, b.gate_up);
    if (all) be.SiluMul(b.gate_up, t, s.inter, b.act);
    if (gemms) be.Gemm(b.act, t, MatrixView{w.down, DType::kBF16, h, s.inter}, b.mlp);
  }
  if (all) be.AddRmsNorm(b.hidden, b.mlp, final_norm_, t, s.hidden, 1e-5f, b.normed);
  if (gemms) {
    be.Gemm(b.lm_input, b.lm_rows, MatrixView{lm_head_, DType::kBF16, s.vocab, h}, b.logits,
            DType::kF32);
  }
  if (all) {
    std::string error;
    if (!kernels::gpu::LaunchArgmax(b.logits, b.lm_rows, s.vocab, b.sampled, nullptr,
                                    be.stream(), &error)) {
      std::fprintf(stderr, "argmax: %s\n", error.c_str());
    }
  }
}

absl::StatusOr<StepTiming> LlamaStepBench::Time(int batch, int context, int new_tokens,
                                                int warmup, int iters) {
  const LlamaShape& s = shape_;
  if (new_tokens != 1 && batch != 1) {
    return absl::InvalidArgumentError("steps are decode (1 new token) or a single prefill");
  }
  const int blocks_per_seq = (context + s.block_size - 1) / s.block_size;
  if (static_cast<int64_t>(batch) * blocks_per_seq + 1 > cache_blocks_) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " x context ", context,
                                                   " exceeds the allocated KV cache"));
  }
  Buffers b;
  b.batch = batch;
  b.tokens = batch * new_tokens;
  b.lm_rows = batch;
  std::vector<int32_t> ids(b.tokens), positions(b.tokens), query_start(batch + 1),
      context_lens(batch, context), tables(static_cast<size_t>(batch) * blocks_per_seq);
  std::vector<int64_t> slots(b.tokens);
  for (int seq = 0; seq < batch; ++seq) {
    query_start[seq] = seq * new_tokens;
    for (int j = 0; j < blocks_per_seq; ++j) {
      tables[static_cast<size_t>(seq) * blocks_per_seq + j] = 1 + seq * blocks_per_seq + j;
    }
    for (int j = 0; j < new_tokens; ++j) {
      const int token = seq * new_tokens + j;
      const int pos = context - new_tokens + j;
      ids[token] = (token * 7919) % s.vocab;
      positions[token] = pos;
      slots[token] = static_cast<int64_t>(tables[static_cast<size_t>(seq) * blocks_per_seq +
                                                 pos / s.block_size]) * s.block_size +
                     pos % s.block_size;
    }
  }
  query_start[batch] = b.tokens;

  std::vector<void*> owned;
  auto upload = [&](const auto& v) {
    const size_t bytes = v.size() * sizeof(v[0]);
    void* p = backend_->Allocate(bytes);
    if (p != nullptr) backend_->CopyToDevice(p, v.data(), bytes);
    owned.push_back(p);
    return p;
  };
  auto scratch = [&](int64_t floats) {
    void* p = backend_->Allocate(static_cast<size_t>(floats) * 4);
    owned.push_back(p);
    return static_cast<float*>(p);
  };
  auto activations = [&](int64_t elements) { return reinterpret_cast<char*>(scratch(elements)); };
  b.ids = static_cast<int32_t*>(upload(ids));
  b.positions = static_cast<int32_t*>(upload(positions));
  b.slots = static_cast<int64_t*>(upload(slots));
  b.attention.num_seqs = batch;
  b.attention.num_tokens = b.tokens;
  b.attention.query_start = static_cast<int32_t*>(upload(query_start));
  b.attention.context_lens = static_cast<int32_t*>(upload(context_lens));
  b.attention.block_tables = static_cast<int32_t*>(upload(tables));
  b.attention.max_blocks_per_seq = blocks_per_seq;
  b.attention.slot_mapping = b.slots;
  b.cache_shape.num_blocks = static_cast<int>(cache_blocks_);
  b.cache_shape.block_size = s.block_size;
  b.cache_shape.num_kv_heads = s.kv_heads;
  b.cache_shape.head_dim = s.head_dim;
  b.cache_shape.dtype = s.kv_dtype;
  // As the worker does once per step: a backend that schedules attention on the host (the
  // sm_90 prefill) plans from host copies of the metadata.
  {
    AttentionBatch host = b.attention;
    host.query_start = query_start.data();
    host.context_lens = context_lens.data();
    host.block_tables = tables.data();
    host.slot_mapping = slots.data();
    backend_->PlanAttention(host, b.cache_shape, s.q_heads);
  }
  const int64_t t = b.tokens;
  b.hidden = scratch(t * s.hidden);
  b.normed = activations(t * s.hidden);
  b.qkv = activations(t * s.QkvRows());
  b.attn = activations(t * s.q_heads * s.head_dim);
  b.proj = activations(t * s.hidden);
  b.gate_up = activations(t * 2 * s.inter);
  b.act = activations(t * s.inter);
  b.mlp = activations(t * s.hidden);
  b.logits = scratch(static_cast<int64_t>(batch) * s.vocab);
  b.sampled = reinterpret_cast<int32_t*>(scratch(batch));
  const size_t act_bytes = DTypeSize(backend_->activation_dtype());
  b.lm_input = new_tokens == 1 ? b.normed : b.normed + (t - 1) * s.hidden * act_bytes;
  auto release = [&]() {
    backend_->Synchronize();
    for (void* p : owned) backend_->Free(p);
  };
  for (void* p : owned) {
    if (p == nullptr) {
      release();
      return absl::ResourceExhaustedError(
          absl::StrCat("out of GPU memory for step buffers (batch ", batch, ", tokens ", t, ")"));
    }
  }

  StepTiming timing;
  for (auto [part, ms] : {std::pair{Part::kAll, &timing.step_ms},
                          std::pair{Part::kGemms, &timing.gemm_only_ms},
                          std::pair{Part::kAttention, &timing.attention_ms}}) {
    absl::StatusOr<double> t =
        EventTimeMs(backend_->stream(), warmup, iters, [&] { RunStep(b, part); });
    if (!t.ok()) {
      release();
      return t.status();
    }
    *ms = *t;
  }
  release();
  if (!backend_->status().ok()) return backend_->status();
  return timing;
}

}  // namespace tessera::bench
