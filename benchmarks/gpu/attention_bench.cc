#include "benchmarks/gpu/attention_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "benchmarks/gpu/event_timer.h"
#include "benchmarks/gpu/fill_random.h"
#include "kernels/cuda/launchers.h"
#ifdef TESSERA_HAVE_CUDNN_ATTENTION
#include "kernels/cuda/cudnn_attention.h"
#endif

namespace tessera::bench {
namespace {

using Json = nlohmann::json;
using kernels::AttentionBatch;
using kernels::CudaBackend;
using kernels::KvCacheShape;

constexpr int kQHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kBlockSize = 16;

// One step's inputs on the device, with host copies of the metadata (for PlanAttention).
struct Problem {
  KvCacheShape shape;
  int num_seqs = 0;
  int num_tokens = 0;
  int max_blocks = 0;
  int q_stride = (kQHeads + 2 * kKvHeads) * kHeadDim;  // Queries lead fused qkv rows.
  std::vector<int32_t> query_start, context_lens, tables;
  std::vector<void*> owned;
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  void* out = nullptr;
  int32_t* d_query_start = nullptr;
  int32_t* d_context_lens = nullptr;
  int32_t* d_tables = nullptr;

  AttentionBatch Host() const {
    AttentionBatch b;
    b.num_seqs = num_seqs;
    b.num_tokens = num_tokens;
    b.query_start = query_start.data();
    b.context_lens = context_lens.data();
    b.block_tables = tables.data();
    b.max_blocks_per_seq = max_blocks;
    b.num_decode_seqs = num_tokens == num_seqs ? num_seqs : 0;
    return b;
  }
  AttentionBatch Device() const {
    AttentionBatch b = Host();
    b.query_start = d_query_start;
    b.context_lens = d_context_lens;
    b.block_tables = d_tables;
    return b;
  }
  size_t out_elements() const { return static_cast<size_t>(num_tokens) * kQHeads * kHeadDim; }
};

void Release(CudaBackend& be, Problem& p) {
  be.Synchronize();
  for (void* ptr : p.owned) be.Free(ptr);
  p.owned.clear();
}

// Bytes a problem allocates; a point is skipped when this exceeds 40 % of the free memory
// (the backend's own scratch and the other candidates' workspaces need the rest).
size_t ProblemBytes(int batch, int new_tokens, int context) {
  const size_t blocks = static_cast<size_t>(batch) * ((context + kBlockSize - 1) / kBlockSize) + 1;
  const size_t cache = blocks * kBlockSize * kKvHeads * kHeadDim * 2 * 2;
  const size_t tokens = static_cast<size_t>(batch) * new_tokens;
  return cache + tokens * ((kQHeads + 2 * kKvHeads) + kQHeads) * kHeadDim * 2;
}

// `batch` sequences of `new_tokens` new tokens each, `context` tokens in the cache after the
// step, their blocks dealt from a shuffled pool as a long-running server's are.
absl::StatusOr<Problem> MakeProblem(CudaBackend& be, int batch, int new_tokens, int context,
                                    uint64_t seed) {
  Problem p;
  p.num_seqs = batch;
  p.num_tokens = batch * new_tokens;
  p.max_blocks = (context + kBlockSize - 1) / kBlockSize;
  p.shape = KvCacheShape{batch * p.max_blocks + 1, kBlockSize, kKvHeads, kHeadDim,
                         DType::kBF16};
  std::vector<int32_t> pool(p.shape.num_blocks - 1);
  std::iota(pool.begin(), pool.end(), 1);
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  p.tables = std::move(pool);
  p.query_start.resize(batch + 1);
  for (int s = 0; s <= batch; ++s) p.query_start[s] = s * new_tokens;
  p.context_lens.assign(batch, context);

  auto alloc = [&](size_t bytes) {
    void* ptr = be.Allocate(bytes);
    p.owned.push_back(ptr);
    return ptr;
  };
  auto upload = [&](const std::vector<int32_t>& host) {
    void* ptr = alloc(host.size() * sizeof(int32_t));
    if (ptr != nullptr) be.CopyToDevice(ptr, host.data(), host.size() * sizeof(int32_t));
    return static_cast<int32_t*>(ptr);
  };
  p.q = alloc(static_cast<size_t>(p.num_tokens) * p.q_stride * 2);
  p.k = alloc(p.shape.bytes());
  p.v = alloc(p.shape.bytes());
  p.out = alloc(p.out_elements() * 2);
  p.d_query_start = upload(p.query_start);
  p.d_context_lens = upload(p.context_lens);
  p.d_tables = upload(p.tables);
  for (void* ptr : p.owned) {
    if (ptr == nullptr) {
      Release(be, p);
      return absl::ResourceExhaustedError(absl::StrCat("out of GPU memory for batch ", batch,
                                                       " x context ", context));
    }
  }
  const bool filled =
      FillRandom(p.q, static_cast<size_t>(p.num_tokens) * p.q_stride, DType::kBF16, 1.0f,
                 seed + 1, be.stream()) &&
      FillRandom(p.k, p.shape.elements(), DType::kBF16, 1.0f, seed + 2, be.stream()) &&
      FillRandom(p.v, p.shape.elements(), DType::kBF16, 1.0f, seed + 3, be.stream());
  if (!filled) {
    Release(be, p);
    return absl::InternalError("filling the attention inputs failed");
  }
  return p;
}

// Milliseconds per call, after one warm-up call; the candidate's (or the backend's) first
// error fails the point, and no call runs after it.
template <typename F>
absl::StatusOr<double> TimeMs(CudaBackend& be, int iters, F body) {
  absl::Status first;
  absl::StatusOr<double> ms = EventTimeMs(be.stream(), 1, iters, [&] {
    if (first.ok()) first = body();
  });
  if (!first.ok()) return first;
  if (!ms.ok()) return ms.status();
  if (!be.status().ok()) return be.status();
  return *ms;
}

std::vector<float> OutputOf(CudaBackend& be, const Problem& p) {
  std::vector<uint16_t> bits(p.out_elements());
  be.CopyToHost(bits.data(), p.out, bits.size() * 2);
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToF32(bits[i]);
  return out;
}

// The largest |a - b| / (|b| + rms(b)): candidates are checked against the first one on the
// same inputs, so a fast kernel that computes something else shows here, not as a speed-up.
double RelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double sq = 0;
  for (float x : b) sq += static_cast<double>(x) * x;
  const double rms = std::sqrt(sq / std::max<size_t>(b.size(), 1));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (std::abs(b[i]) + rms));
  }
  return worst;
}

struct Candidate {
  std::string name;
  // Empty when the candidate can run; else why not (recorded, not an error).
  std::string unavailable;
  std::function<absl::Status()> run;
};

Json TimeCandidates(CudaBackend& be, const Problem& p, std::vector<Candidate> candidates,
                    int iters, double work, const char* unit, double ceiling) {
  Json row = Json::object();
  std::vector<float> reference;
  std::string reference_name;
  for (Candidate& c : candidates) {
    if (!c.unavailable.empty()) {
      row[c.name] = {{"skipped", c.unavailable}};
      std::printf("  %-18s skipped: %s\n", c.name.c_str(), c.unavailable.c_str());
      continue;
    }
    absl::StatusOr<double> ms = TimeMs(be, iters, c.run);
    if (!ms.ok()) {
      row[c.name] = {{"error", std::string(ms.status().message())}};
      std::printf("  %-18s error: %s\n", c.name.c_str(), std::string(ms.status().message()).c_str());
      continue;
    }
    const double rate = work / (*ms * 1e-3);
    Json entry = {{"ms", *ms}, {unit, rate}};
    if (ceiling > 0) entry["fraction_of_copy_bw"] = rate / ceiling;
    std::vector<float> out = OutputOf(be, p);
    if (reference.empty()) {
      reference = std::move(out);
      reference_name = c.name;
    } else {
      entry["max_rel_diff_vs_" + reference_name] = RelativeDiff(out, reference);
    }
    row[c.name] = entry;
    const std::string of_copy =
        ceiling > 0 ? absl::StrCat(" (", static_cast<int>(100 * rate / ceiling), "% of copy)")
                    : "";
    std::printf("  %-18s %9.3f ms  %8.2f %s%s\n", c.name.c_str(), *ms, rate / 1e12,
                ceiling > 0 ? "TB/s" : "TFLOP/s", of_copy.c_str());
  }
  return row;
}

// Device scratch owned by a candidate's closure, freed with it.
std::shared_ptr<void> Scratch(CudaBackend& be, size_t bytes) {
  if (bytes == 0) return nullptr;
  return std::shared_ptr<void>(be.Allocate(bytes), [&be](void* ptr) {
    be.Synchronize();
    be.Free(ptr);
  });
}

// The split-K kernel before the planner (kernels/cuda/attention_kernels.cu, kV1): partitions
// sized from the block-table width and a fixed 264-block target, 4-byte loads.
void AddLegacyDecodeCandidate(CudaBackend& be, const Problem& p, const AttentionBatch& batch,
                              float scale, std::vector<Candidate>* out) {
  using kernels::gpu::SplitKernelVersion;
  const size_t bytes = kernels::gpu::AttentionSplitWorkspaceBytes(
      batch, p.shape, kQHeads, 0, 0, SplitKernelVersion::kV1);
  std::shared_ptr<void> workspace = Scratch(be, bytes);
  if (bytes > 0 && workspace.get() == nullptr) {
    out->push_back({"split_k_v1", "out of memory for its partials", nullptr});
    return;
  }
  out->push_back({"split_k_v1", "", [&be, &p, batch, scale, workspace, bytes]() -> absl::Status {
                    std::string error;
                    if (!kernels::gpu::LaunchPagedAttentionSplit(
                            p.q, p.q_stride, batch, p.k, p.v, p.shape, kQHeads, scale, 0,
                            workspace.get(), bytes, p.out, be.stream(), &error, DType::kBF16,
                            0, SplitKernelVersion::kV1)) {
                      return absl::InternalError(error);
                    }
                    return absl::OkStatus();
                  }});
}

// cuDNN 9's SDPA over the paged cache (kernels/cuda/cudnn_attention.h), where it was built
// and libcudnn loads. One object for the whole sweep: its graphs are cached per shape bucket.
class CudnnCandidate {
 public:
  CudnnCandidate() {
#ifdef TESSERA_HAVE_CUDNN_ATTENTION
    absl::StatusOr<std::unique_ptr<kernels::CudnnPagedPrefill>> created =
        kernels::CudnnPagedPrefill::Create();
    if (created.ok()) {
      prefill_ = *std::move(created);
    } else {
      unavailable_ = std::string(created.status().message());
    }
#endif
  }

  Candidate For(CudaBackend& be, const Problem& p, const AttentionBatch& batch, float scale) {
#ifdef TESSERA_HAVE_CUDNN_ATTENTION
    if (prefill_ == nullptr) return {"cudnn_sdpa", unavailable_, nullptr};
    kernels::CudnnHostBatchInfo host;
    for (int s = 0; s < p.num_seqs; ++s) {
      host.max_query_len = std::max(host.max_query_len, p.query_start[s + 1] - p.query_start[s]);
      host.max_context_len = std::max(host.max_context_len, p.context_lens[s]);
    }
    kernels::CudnnPagedPrefill* prefill = prefill_.get();
    return {"cudnn_sdpa", "", [&be, &p, batch, scale, host, prefill]() {
              return prefill->Run(p.q, p.q_stride, batch, p.shape, p.k, p.v, kQHeads, scale,
                                  p.out, be.stream(), host);
            }};
#else
    return {"cudnn_sdpa", unavailable_, nullptr};
#endif
  }

 private:
#ifdef TESSERA_HAVE_CUDNN_ATTENTION
  std::unique_ptr<kernels::CudnnPagedPrefill> prefill_;
#endif
  std::string unavailable_ = "not built (no cuDNN frontend headers)";
};

}  // namespace

absl::StatusOr<Json> RunAttentionBench(CudaBackend& be, const AttentionBenchOptions& o,
                                       double copy_bytes_per_s) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  Json result;
  result["shape"] = {{"q_heads", kQHeads},       {"kv_heads", kKvHeads},
                     {"head_dim", kHeadDim},     {"block_size", kBlockSize},
                     {"kv_dtype", "BF16"},       {"activation_dtype", "BF16"},
                     {"sm90_prefill_available", be.sm90_prefill_available()}};
  auto fits = [](size_t bytes, std::string* why) {
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    if (bytes <= free_bytes * 0.4) return true;
    *why = absl::StrCat("needs ", bytes >> 20, " MiB, 40% of the free ", free_bytes >> 20,
                        " MiB is the limit");
    return false;
  };

  std::printf("\nattention, Llama-3-8B layer (32 q / 8 kv heads, head_dim 128, BF16)\n");
  CudnnCandidate cudnn;
  Json prefill = Json::array();
  for (int tokens : o.prefill_tokens) {
    std::printf("prefill %d tokens, causal\n", tokens);
    std::string why;
    if (!fits(ProblemBytes(1, tokens, tokens), &why)) {
      prefill.push_back({{"tokens", tokens}, {"skipped", why}});
      std::printf("  skipped: %s\n", why.c_str());
      continue;
    }
    absl::StatusOr<Problem> p = MakeProblem(be, 1, tokens, tokens, 330 + tokens);
    if (!p.ok()) return p.status();
    const AttentionBatch batch = p->Device();
    const double flop = 4.0 * kHeadDim * kQHeads * (static_cast<double>(tokens) * (tokens + 1) / 2);
    // Long prompts take a second per call on the slowest candidate: fewer iterations there.
    const int iters = tokens >= 16384 ? std::min(o.iters, 2) : o.iters;
    std::vector<Candidate> candidates;
    candidates.push_back({"tensor_core", "", [&]() -> absl::Status {
                            std::string error;
                            if (!kernels::gpu::LaunchPagedAttentionPrefillTc(
                                    p->q, p->q_stride, batch, p->k, p->v, p->shape, kQHeads,
                                    scale, p->out, be.stream(), &error, DType::kBF16)) {
                              return absl::InternalError(error);
                            }
                            return absl::OkStatus();
                          }});
    candidates.push_back(
        {"flashinfer_sm90",
         be.sm90_prefill_available() ? "" : "needs compute capability 9.0 and the FlashInfer build",
         [&]() -> absl::Status {
           const int64_t before = be.sm90_prefill_launches();
           be.PlanAttention(p->Host(), p->shape, kQHeads);
           be.PagedAttention(p->q, p->q_stride, batch, p->k, p->v, p->shape, kQHeads, scale,
                             p->out);
           if (be.sm90_prefill_launches() == before) {
             return absl::InternalError("the backend did not take the sm_90 kernel");
           }
           return be.status();
         }});
    candidates.push_back(cudnn.For(be, *p, batch, scale));
    Json row = TimeCandidates(be, *p, std::move(candidates), iters, flop, "flop_per_s", 0);
    prefill.push_back({{"tokens", tokens}, {"flop", flop}, {"candidates", row}});
    Release(be, *p);
  }
  result["prefill"] = prefill;

  Json decode = Json::array();
  for (int context : o.decode_contexts) {
    for (int b : o.decode_batches) {
      std::printf("decode batch %d, context %d\n", b, context);
      std::string why;
      if (!fits(ProblemBytes(b, 1, context), &why)) {
        decode.push_back({{"batch", b}, {"context", context}, {"skipped", why}});
        std::printf("  skipped: %s\n", why.c_str());
        continue;
      }
      absl::StatusOr<Problem> p = MakeProblem(be, b, 1, context, 770 + b + context);
      if (!p.ok()) return p.status();
      const AttentionBatch batch = p->Device();
      const double kv_bytes = 2.0 * b * context * kKvHeads * kHeadDim * 2;
      std::vector<Candidate> candidates;
      candidates.push_back({"split_kv", "", [&]() -> absl::Status {
                              be.PagedAttention(p->q, p->q_stride, batch, p->k, p->v,
                                                p->shape, kQHeads, scale, p->out);
                              return be.status();
                            }});
      AddLegacyDecodeCandidate(be, *p, batch, scale, &candidates);
      Json row = TimeCandidates(be, *p, std::move(candidates), o.iters, kv_bytes,
                                "kv_bytes_per_s", copy_bytes_per_s);
      decode.push_back(
          {{"batch", b}, {"context", context}, {"kv_bytes", kv_bytes}, {"candidates", row}});
      Release(be, *p);
    }
  }
  result["decode"] = decode;
  return result;
}

}  // namespace tessera::bench
