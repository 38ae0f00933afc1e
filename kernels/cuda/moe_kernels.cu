// Mixture-of-experts kernels: the router and the decode-sized expert GEMVs (the grouped
// GEMM for prefill is in moe_grouped_kernels.cu). The routing stays on the device: the
// expert kernels read expert_ids there and find each expert's weights in a device table
// of pointers (MoeExpertPointers), so a decode step is one graph with no host round trip.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/moe_common.cuh"

namespace tessera::kernels::gpu {
namespace {

using moe::LocalExpert;
using moe::MakeScales;
using moe::Scales;
using moe::Weight;

// ---- Router.
constexpr int kRouteWarps = 4;
constexpr int kRoutePerLane = kMoeMaxExperts / 32;

// True when (v, e) ranks before (best_v, best_e): a larger logit, or an equal one with a
// lower id. best_e < 0: nothing yet.
__device__ __forceinline__ bool RanksBefore(float v, int e, float best_v, int best_e) {
  if (e < 0) return false;
  if (best_e < 0) return true;
  return v > best_v || (v == best_v && e < best_e);
}

// One warp per row; lane l holds experts l, l + 32, ... in registers. The top_k are picked
// by logit, not by rounded probability: softmax is monotone, so this is the CPU's order
// (probabilities in double) exactly, with ties only where the logits tie.
__global__ void __launch_bounds__(kRouteWarps * 32)
    MoeRouteKernel(const float* __restrict__ logits,  // [n, num_experts]
                   int n, int num_experts, int top_k, bool renormalize,
                   int32_t* __restrict__ expert_ids,  // [n, top_k]
                   float* __restrict__ weights) {     // [n, top_k]
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRouteWarps + threadIdx.x / 32;
  if (row >= n) return;  // Whole warps.
  const float* in = logits + row * num_experts;
  float v[kRoutePerLane];
  float max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRoutePerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < num_experts ? in[e] : -INFINITY;
    max = fmaxf(max, v[i]);
  }
  max = WarpMax(max);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kRoutePerLane; ++i) {
    if (lane + 32 * i < num_experts) sum += expf(v[i] - max);
  }
  sum = WarpSum(sum);

  uint32_t taken = 0;  // Bit i: this lane's expert lane + 32 i is already picked.
  float picked[kMoeMaxTopK];
  float kept = 0.0f;
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j) {
    if (j >= top_k) break;
    float best_v = -INFINITY;
    int best_e = -1;
#pragma unroll
    for (int i = 0; i < kRoutePerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < num_experts && !(taken >> i & 1u) && RanksBefore(v[i], e, best_v, best_e)) {
        best_v = v[i];
        best_e = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float other_v = __shfl_xor_sync(kFullMask, best_v, o);
      const int other_e = __shfl_xor_sync(kFullMask, best_e, o);
      if (RanksBefore(other_v, other_e, best_v, best_e)) {
        best_v = other_v;
        best_e = other_e;
      }
    }
    if (best_e % 32 == lane) taken |= 1u << (best_e / 32);
    picked[j] = expf(best_v - max);
    kept += picked[j];
    if (lane == 0) expert_ids[row * top_k + j] = best_e;
  }
  if (lane != 0) return;
  const float denominator = renormalize ? kept : sum;
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j) {
    if (j >= top_k) break;
    weights[row * top_k + j] = picked[j] / denominator;
  }
}

// ---- Expert GEMVs. A warp owns kGemvRows outputs (intermediate columns for gate_up,
// hidden columns for down) and streams their weight rows with 8-element loads, lane l
// taking chunks l, l + 32, ...; float32 accumulation.
constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvRows = 2;
constexpr int kGemvRowsPerBlock = kGemvWarps * kGemvRows;

// acc[r] += this lane's share of row r . x over k columns. `rows[r]` points at the row's
// bytes; kVector: k % 8 == 0, rows and x aligned for 8-element loads (group % 8 == 0 when
// grouped, so a chunk never straddles two scales).
template <DType W, typename TX, int R, bool kVector>
__device__ __forceinline__ void LaneDots(const uint8_t* const (&rows)[R],
                                         const int64_t (&row_index)[R], const Scales& scales,
                                         const TX* __restrict__ x, int64_t k,
                                         float (&acc)[R]) {
  const int lane = threadIdx.x % 32;
  if constexpr (kVector) {
    for (int64_t c = lane; c < k / 8; c += 32) {
      float xv[8];
      LoadAct8(x, 8 * c, xv);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float wf[8];
        Weight<W>::Load8(rows[r] + 8 * c * Weight<W>::kBytes, wf);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(wf[i], xv[i], dot);
        acc[r] = fmaf(dot, scales.Group(row_index[r], 8 * c), acc[r]);
      }
    }
  } else {
    for (int64_t kk = lane; kk < k; kk += 32) {
      const float xv = ToFloat(x[kk]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float w = Weight<W>::Load1(rows[r] + kk * Weight<W>::kBytes) *
                        scales.Group(row_index[r], kk);
        acc[r] = fmaf(w, xv, acc[r]);
      }
    }
  }
}

// act[p, j] = silu(gate_e(x[p / top_k])[j]) * up_e(x[p / top_k])[j] for every pair p =
// (token, slot) routed to a held expert e; other pairs' rows are left alone (never read).
// grid: (ceil(inter / kGemvRowsPerBlock), n * top_k).
template <DType W, typename TX, bool kVector>
__global__ void __launch_bounds__(kGemvThreads)
    MoeGateUpGemvKernel(const TX* __restrict__ x,               // [n, hidden]
                        const int32_t* __restrict__ expert_ids,  // [n * top_k]
                        int top_k, MoeExpertsArgs args,
                        float* __restrict__ act) {  // [n * top_k, inter]
  const int64_t pair = blockIdx.y;
  const int local = LocalExpert(expert_ids[pair], args.first_expert, args.num_local);
  if (local < 0) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t inter = args.intermediate;
  const int64_t hidden = args.hidden;
  const int64_t j0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp) * kGemvRows;
  if (j0 >= inter) return;  // Whole warps; no block-wide synchronisation follows.
  const MoeExpertPointers expert = args.table[local];
  const auto* base = static_cast<const uint8_t*>(expert.gate_up);
  const Scales scales = MakeScales(expert.gate_up_scales, args.gate_up_group, hidden);
  // Rows 2r and 2r + 1: gate and up of column j0 + r (past the end: the last column again,
  // never stored).
  const uint8_t* rows[2 * kGemvRows];
  int64_t row_index[2 * kGemvRows];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
    const int64_t j = min(j0 + r, inter - 1);
    row_index[2 * r] = j;
    row_index[2 * r + 1] = inter + j;
  }
#pragma unroll
  for (int r = 0; r < 2 * kGemvRows; ++r) {
    rows[r] = base + row_index[r] * hidden * Weight<W>::kBytes;
  }
  float acc[2 * kGemvRows] = {};
  LaneDots<W, TX, 2 * kGemvRows, kVector>(rows, row_index, scales,
                                          x + pair / top_k * hidden, hidden, acc);
#pragma unroll
  for (int r = 0; r < 2 * kGemvRows; ++r) acc[r] = WarpSum(acc[r]);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
    if (j0 + r >= inter) break;
    const float g = acc[2 * r] * scales.Row(row_index[2 * r]);
    const float u = acc[2 * r + 1] * scales.Row(row_index[2 * r + 1]);
    act[pair * inter + j0 + r] = g / (1.0f + expf(-g)) * u;
  }
}

// out[t, c] = sum over slots s of token t routed to a held expert e, in slot order, of
// weights[t, s] * (down_e . act[t * top_k + s])[c]; 0 when none is held.
// grid: (ceil(hidden / kGemvRowsPerBlock), n).
template <DType W, typename TX, bool kVector>
__global__ void __launch_bounds__(kGemvThreads)
    MoeDownGemvKernel(const float* __restrict__ act,           // [n * top_k, inter]
                      const int32_t* __restrict__ expert_ids,  // [n * top_k]
                      const float* __restrict__ weights,       // [n * top_k]
                      int top_k, MoeExpertsArgs args,
                      TX* __restrict__ out) {  // [n, hidden]
  const int64_t token = blockIdx.y;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t inter = args.intermediate;
  const int64_t hidden = args.hidden;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp) * kGemvRows;
  if (c0 >= hidden) return;
  int64_t row_index[kGemvRows];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) row_index[r] = min(c0 + r, hidden - 1);
  float total[kGemvRows] = {};
  for (int s = 0; s < top_k; ++s) {
    const int64_t pair = token * top_k + s;
    const int local = LocalExpert(expert_ids[pair], args.first_expert, args.num_local);
    if (local < 0) continue;  // Uniform across the warp.
    const MoeExpertPointers expert = args.table[local];
    const auto* base = static_cast<const uint8_t*>(expert.down);
    const Scales scales = MakeScales(expert.down_scales, args.down_group, inter);
    const uint8_t* rows[kGemvRows];
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
      rows[r] = base + row_index[r] * inter * Weight<W>::kBytes;
    }
    float acc[kGemvRows] = {};
    LaneDots<W, float, kGemvRows, kVector>(rows, row_index, scales, act + pair * inter, inter,
                                           acc);
    const float w = weights[pair];
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
      total[r] = fmaf(w, WarpSum(acc[r]) * scales.Row(row_index[r]), total[r]);
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
    if (c0 + r < hidden) StoreAs(total[r], &out[token * hidden + c0 + r]);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool LaunchMoeRoute(const float* logits, int n, int num_experts, int top_k, bool renormalize,
                    int32_t* expert_ids, float* weights, cudaStream_t stream,
                    std::string* error) {
  if (num_experts < 1 || num_experts > kMoeMaxExperts) {
    return Fail(error, "MoeRoute: num_experts " + std::to_string(num_experts) +
                           " outside [1, " + std::to_string(kMoeMaxExperts) + "]");
  }
  if (top_k < 1 || top_k > kMoeMaxTopK || top_k > num_experts) {
    return Fail(error, "MoeRoute: top_k " + std::to_string(top_k) + " outside [1, " +
                           std::to_string(kMoeMaxTopK) + "] or above num_experts " +
                           std::to_string(num_experts));
  }
  if (n <= 0) return true;
  const unsigned grid = static_cast<unsigned>((n + kRouteWarps - 1) / kRouteWarps);
  MoeRouteKernel<<<grid, kRouteWarps * 32, 0, stream>>>(logits, n, num_experts, top_k,
                                                        renormalize, expert_ids, weights);
  return CheckLaunch("MoeRoute", error);
}

bool MoeExpertDtypeSupported(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
         dtype == DType::kI8 || dtype == DType::kF8E4M3;
}

bool CheckMoeExperts(const ExpertWeights& experts, int hidden, std::string* error) {
  if (experts.num_local <= 0) return true;
  if (experts.gate_up == nullptr || experts.down == nullptr) {
    return Fail(error, "MoeExperts: " + std::to_string(experts.num_local) +
                           " held experts but no weight views");
  }
  if (experts.intermediate <= 0 || hidden <= 0) {
    return Fail(error, "MoeExperts: intermediate " + std::to_string(experts.intermediate) +
                           " and hidden " + std::to_string(hidden) + " must be positive");
  }
  const DType dtype = experts.gate_up[0].dtype;
  const bool quantized = dtype == DType::kI8 || dtype == DType::kF8E4M3;
  auto check = [&](int e, const MatrixView& w, const MatrixView& first, int64_t rows,
                   int64_t cols, const char* name) {
    const std::string where = "MoeExperts: expert " + std::to_string(experts.first_expert + e) +
                              " " + name + ": ";
    if (w.dtype != dtype) {
      return Fail(error, where + "dtype " + DTypeName(w.dtype) + " differs from " +
                             DTypeName(dtype) + " of the first gate_up");
    }
    if (w.rows != rows || w.cols != cols) {
      return Fail(error, where + "shape [" + std::to_string(w.rows) + ", " +
                             std::to_string(w.cols) + "], expected [" + std::to_string(rows) +
                             ", " + std::to_string(cols) + "]");
    }
    if (w.data == nullptr || (quantized && w.scales == nullptr)) {
      return Fail(error, where + "missing data or scales");
    }
    if (w.layout != WeightLayout::kRowMajor) {
      return Fail(error, where + "only row-major weights are supported on CUDA");
    }
    if (dtype == DType::kI8 && (w.group_size < 0 || w.group_size != first.group_size)) {
      return Fail(error, where + "scale group " + std::to_string(w.group_size) +
                             " differs from the first expert's " +
                             std::to_string(first.group_size));
    }
    return true;
  };
  const int64_t inter = experts.intermediate;
  for (int e = 0; e < experts.num_local; ++e) {
    if (!check(e, experts.gate_up[e], experts.gate_up[0], 2 * inter, hidden, "gate_up") ||
        !check(e, experts.down[e], experts.down[0], hidden, inter, "down")) {
      return false;
    }
  }
  return true;
}

size_t MoeExpertsGemvWorkspaceBytes(int n, int top_k, int intermediate) {
  return moe::AlignUp(static_cast<size_t>(n) * top_k * intermediate * sizeof(float));
}

bool LaunchMoeExpertsGemv(const void* x, int n, const int32_t* expert_ids,
                          const float* weights, int top_k, const MoeExpertsArgs& args,
                          void* workspace, size_t workspace_bytes, void* out,
                          cudaStream_t stream, std::string* error, DType act) {
  if (n <= 0) return true;
  if (top_k < 1 || args.hidden <= 0 || args.intermediate <= 0) {
    return Fail(error, "MoeExpertsGemv: top_k " + std::to_string(top_k) + ", hidden " +
                           std::to_string(args.hidden) + ", intermediate " +
                           std::to_string(args.intermediate) + " must be positive");
  }
  const int64_t pairs = static_cast<int64_t>(n) * top_k;
  if (pairs > 65535) {  // grid.y holds the pairs (gate_up), and the tokens (down).
    return Fail(error, "MoeExpertsGemv: " + std::to_string(pairs) +
                           " (token, slot) pairs exceed the grid (65535)");
  }
  if (workspace_bytes < MoeExpertsGemvWorkspaceBytes(n, top_k, args.intermediate)) {
    return Fail(error, "MoeExpertsGemv: workspace of " + std::to_string(workspace_bytes) +
                           " bytes is too small");
  }
  auto* activations = static_cast<float*>(workspace);
  const bool grouped_ok = args.weight_dtype != DType::kI8 ||
                          (args.gate_up_group % 8 == 0 && args.down_group % 8 == 0);
  const bool vector = args.aligned && grouped_ok && args.hidden % 8 == 0 &&
                      args.intermediate % 8 == 0 && Aligned16(x);
  const dim3 gate_grid((args.intermediate + kGemvRowsPerBlock - 1) / kGemvRowsPerBlock,
                       static_cast<unsigned>(pairs));
  const dim3 down_grid((args.hidden + kGemvRowsPerBlock - 1) / kGemvRowsPerBlock,
                       static_cast<unsigned>(n));
  bool launched = false;
  const bool dtypes_ok = moe::WithActivation(act, "MoeExpertsGemv", error, [&](auto tx) {
    using TX = decltype(tx);
    launched = moe::WithWeightDtype(args.weight_dtype, "MoeExpertsGemv", error, [&](auto wt) {
      constexpr DType W = decltype(wt)::value;
      const auto* xs = static_cast<const TX*>(x);
      auto* ys = static_cast<TX*>(out);
      if (vector) {
        MoeGateUpGemvKernel<W, TX, true><<<gate_grid, kGemvThreads, 0, stream>>>(
            xs, expert_ids, top_k, args, activations);
        MoeDownGemvKernel<W, TX, true><<<down_grid, kGemvThreads, 0, stream>>>(
            activations, expert_ids, weights, top_k, args, ys);
      } else {
        MoeGateUpGemvKernel<W, TX, false><<<gate_grid, kGemvThreads, 0, stream>>>(
            xs, expert_ids, top_k, args, activations);
        MoeDownGemvKernel<W, TX, false><<<down_grid, kGemvThreads, 0, stream>>>(
            activations, expert_ids, weights, top_k, args, ys);
      }
    });
  });
  if (!dtypes_ok || !launched) return false;
  return CheckLaunch("MoeExpertsGemv", error);
}

}  // namespace tessera::kernels::gpu
