// The grouped expert GEMM for prefill-sized batches. The host never learns how many rows
// each expert got (that would cost a sync and break graph capture), so the work is laid
// out on the device and the grids are sized by a bound: an align kernel buckets the
// (token, slot) pairs by held expert and writes one entry per 32-row tile of each expert's
// bucket; the GEMM grids have ceil(pairs / 32) + num_local tile slots, and slots past the
// real tile count exit at once. The GEMM stages 32 x 64 tiles in shared memory, decoding
// weights of any supported dtype as they are staged, and multiplies on the BF16 tensor
// cores (BF16 activations) or in float32 (float32 activations, the CPU's exact twin).
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/moe_common.cuh"

namespace tessera::kernels::gpu {
namespace {

using moe::LocalExpert;
using moe::MakeScales;
using moe::Scales;
using moe::Weight;

constexpr int kAlignThreads = 1024;
constexpr int kTileM = 32;  // Pairs (rows of one expert's bucket) per tile.
constexpr int kTileN = 64;  // Weight rows per block (gate_up: 32 gate and 32 up, interleaved).
constexpr int kTileK = 32;
constexpr int kGemmThreads = 256;
constexpr int kCombineThreads = 256;
// Workspace a chunk of tokens may take; larger batches run in several chunks (each re-reads
// the routed experts' weights, a small cost beside a chunk's arithmetic).
constexpr size_t kWorkspaceBudget = size_t{64} << 20;

// Buckets `pairs` routed (token, slot) pairs by held expert: perm[pos] = pair, expert by
// expert (pairs within an expert in no fixed order: each row's results depend only on its
// own row, so the order changes nothing). Tile t covers positions [tile_begin[t],
// tile_end[t]) of expert tile_expert[t]; *num_tiles of them. One block.
__global__ void __launch_bounds__(kAlignThreads)
    MoeAlignKernel(const int32_t* __restrict__ expert_ids,  // [pairs]
                   int pairs, int first_expert, int num_local,
                   int32_t* __restrict__ perm,         // [pairs]
                   int32_t* __restrict__ tile_expert,  // [max_tiles]
                   int32_t* __restrict__ tile_begin, int32_t* __restrict__ tile_end,
                   int32_t* __restrict__ num_tiles) {
  __shared__ int count[kMoeMaxExperts];
  __shared__ int fill[kMoeMaxExperts];
  __shared__ int first_tile[kMoeMaxExperts];
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int local = LocalExpert(expert_ids[p], first_expert, num_local);
    if (local >= 0) atomicAdd(&count[local], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // At most kMoeMaxExperts steps.
    int offset = 0;
    int tiles = 0;
    for (int e = 0; e < num_local; ++e) {
      fill[e] = offset;
      first_tile[e] = tiles;
      offset += count[e];
      tiles += (count[e] + kTileM - 1) / kTileM;
    }
    *num_tiles = tiles;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_local; e += blockDim.x) {
    const int begin = fill[e];
    const int end = begin + count[e];
    for (int i = 0; begin + i * kTileM < end; ++i) {
      tile_expert[first_tile[e] + i] = e;
      tile_begin[first_tile[e] + i] = begin + i * kTileM;
      tile_end[first_tile[e] + i] = min(begin + (i + 1) * kTileM, end);
    }
  }
  __syncthreads();  // `fill` was read above; now it counts up.
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int local = LocalExpert(expert_ids[p], first_expert, num_local);
    if (local >= 0) perm[atomicAdd(&fill[local], 1)] = p;
  }
}

// Shared memory of one GEMM block. float32 staging, k-major (+1: the staging stores, a
// warp along k, hit 32 different banks); or BF16 staging for the tensor cores, rows of
// kTileK + 8 (WMMA wants a multiple of 8; the shift spreads the rows over the banks) and
// the accumulators parked for the epilogue. Offsets stay multiples of 32 bytes (WMMA).
constexpr int kTcLd = kTileK + 8;
constexpr int kTcOutLd = kTileN + 4;
struct SimtTiles {
  float a[kTileK][kTileM + 1];
  float b[kTileK][kTileN + 1];
};
struct TensorCoreTiles {
  __nv_bfloat16 a[kTileM][kTcLd];  // Row-major M x K.
  __nv_bfloat16 b[kTileN][kTcLd];  // K x N column-major: weight rows as they are.
  float out[kTileM][kTcOutLd];
};
constexpr size_t kTileBytes =
    sizeof(SimtTiles) > sizeof(TensorCoreTiles) ? sizeof(SimtTiles) : sizeof(TensorCoreTiles);

// One kTileM x kTileN tile of one expert's GEMM, float32 accumulation. kTensorCores (BF16
// activations, sm_80+): BF16 WMMA, each of the 8 warps one 16 x 16 block, weights decoded
// and scaled in float32 then rounded to BF16 as staged (the dense prefill path's rounding);
// else float32 FMA, each thread 2 rows x 4 columns. kGateUp: A rows are
// x[perm[pos] / top_k]; tile columns alternate gate row j and up row inter + j, so a thread
// holds both halves of two outputs and applies SiLU-mul itself: act[pos, j] (activation
// dtype). Else A rows are act[pos] and the product goes to pair_out[perm[pos]] unweighted,
// in float32. grid: (max_tiles, ceil(outputs / outputs per block)).
template <DType W, typename TX, bool kGateUp, bool kTensorCores>
__global__ void __launch_bounds__(kGemmThreads)
    MoeGroupedGemmKernel(const TX* __restrict__ a,  // [n, hidden] or [pairs, inter]
                         const int32_t* __restrict__ perm, int top_k,
                         const int32_t* __restrict__ tile_expert,
                         const int32_t* __restrict__ tile_begin,
                         const int32_t* __restrict__ tile_end,
                         const int32_t* __restrict__ num_tiles, MoeExpertsArgs args,
                         TX* __restrict__ act,             // [pairs, inter] (kGateUp)
                         float* __restrict__ pair_out) {   // [pairs, hidden] (else)
  const int tile = blockIdx.x;
  if (tile >= *num_tiles) return;  // A spare slot of the bound.
  const int expert = tile_expert[tile];
  const int begin = tile_begin[tile];
  const int end = tile_end[tile];
  const int64_t inter = args.intermediate;
  const int64_t k = kGateUp ? args.hidden : inter;
  const int64_t outputs = kGateUp ? inter : args.hidden;
  constexpr int kOutputs = kGateUp ? kTileN / 2 : kTileN;
  const int64_t out0 = static_cast<int64_t>(blockIdx.y) * kOutputs;
  const MoeExpertPointers pointers = args.table[expert];
  const auto* w = static_cast<const uint8_t*>(kGateUp ? pointers.gate_up : pointers.down);
  const Scales scales = MakeScales(kGateUp ? pointers.gate_up_scales : pointers.down_scales,
                                   kGateUp ? args.gate_up_group : args.down_group, k);

  __shared__ __align__(32) unsigned char tiles[kTileBytes];
  auto& simt = *reinterpret_cast<SimtTiles*>(tiles);
  auto& tc = *reinterpret_cast<TensorCoreTiles*>(tiles);
  __shared__ int64_t a_row[kTileM];  // Element offset of A row m; -1 past the tile.
  __shared__ int64_t b_row[kTileN];  // Weight row of tile column c; -1 past the end.
  const int tid = threadIdx.x;
  if (tid < kTileM) {
    const int pos = begin + tid;
    const int64_t row = kGateUp ? perm[min(pos, end - 1)] / top_k : pos;
    a_row[tid] = pos < end ? row * k : -1;
  }
  if (tid < kTileN) {
    if constexpr (kGateUp) {
      const int64_t j = out0 + tid / 2;
      b_row[tid] = j < outputs ? (tid % 2 == 0 ? j : inter + j) : -1;
    } else {
      b_row[tid] = out0 + tid < outputs ? out0 + tid : -1;
    }
  }
  __syncthreads();

  const int ty = tid / 16;  // Rows 2 ty, 2 ty + 1.
  const int tx = tid % 16;  // Columns 4 tx .. 4 tx + 3.
  float acc[2][4] = {};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  const int warp = tid / 32;  // Its 16 x 16 block: rows 16 (warp / 4), columns 16 (warp % 4).
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c_frag;
  if constexpr (kTensorCores) wmma::fill_fragment(c_frag, 0.0f);
#endif
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
#pragma unroll
    for (int i = 0; i < kTileM * kTileK / kGemmThreads; ++i) {
      const int idx = tid + i * kGemmThreads;
      const int m = idx / kTileK;
      const int kk = idx % kTileK;
      const int64_t col = k0 + kk;
      const bool inside = a_row[m] >= 0 && col < k;
      if constexpr (kTensorCores) {
        tc.a[m][kk] = inside ? a[a_row[m] + col] : __float2bfloat16_rn(0.0f);
      } else {
        simt.a[kk][m] = inside ? ToFloat(a[a_row[m] + col]) : 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kTileN * kTileK / kGemmThreads; ++i) {
      const int idx = tid + i * kGemmThreads;
      const int c = idx / kTileK;
      const int kk = idx % kTileK;
      const int64_t col = k0 + kk;
      const int64_t row = b_row[c];
      const float v = row >= 0 && col < k
                          ? Weight<W>::Load1(w + (row * k + col) * Weight<W>::kBytes) *
                                scales.Of(row, col)
                          : 0.0f;
      if constexpr (kTensorCores) {
        tc.b[c][kk] = __float2bfloat16_rn(v);
      } else {
        simt.b[kk][c] = v;
      }
    }
    __syncthreads();
    if constexpr (kTensorCores) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#pragma unroll
      for (int ks = 0; ks < kTileK; ks += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a_frag;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b_frag;
        wmma::load_matrix_sync(a_frag, &tc.a[16 * (warp / 4)][ks], kTcLd);
        wmma::load_matrix_sync(b_frag, &tc.b[16 * (warp % 4)][ks], kTcLd);
        wmma::mma_sync(c_frag, a_frag, b_frag, c_frag);
      }
#endif
    } else {
#pragma unroll 8
      for (int kk = 0; kk < kTileK; ++kk) {
        const float a0 = simt.a[kk][2 * ty];
        const float a1 = simt.a[kk][2 * ty + 1];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float b = simt.b[kk][4 * tx + j];
          acc[0][j] = fmaf(a0, b, acc[0][j]);
          acc[1][j] = fmaf(a1, b, acc[1][j]);
        }
      }
    }
    __syncthreads();
  }
  if constexpr (kTensorCores) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // The epilogue below pairs gate and up columns within a thread: park the blocks.
    wmma::store_matrix_sync(&tc.out[16 * (warp / 4)][16 * (warp % 4)], c_frag, kTcOutLd,
                            wmma::mem_row_major);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = tc.out[2 * ty + i][4 * tx + j];
    }
#else
    __trap();  // The launcher takes this path only on sm_80+.
#endif
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pos = begin + 2 * ty + i;
    if (pos >= end) continue;
    if constexpr (kGateUp) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int64_t j = out0 + 2 * tx + q;
        if (j >= outputs) continue;
        const float g = acc[i][2 * q];
        const float u = acc[i][2 * q + 1];
        StoreAs(g / (1.0f + expf(-g)) * u, &act[pos * inter + j]);
      }
    } else {
      const int64_t pair = perm[pos];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t c = out0 + 4 * tx + j;
        if (c < outputs) pair_out[pair * outputs + c] = acc[i][j];
      }
    }
  }
}

// out[t, c] = sum over the held slots s of token t, in slot order, of weights[t, s] *
// pair_out[t * top_k + s, c]; 0 when none is held.
template <typename TX>
__global__ void __launch_bounds__(kCombineThreads)
    MoeCombineKernel(const float* __restrict__ pair_out,      // [n * top_k, hidden]
                     const int32_t* __restrict__ expert_ids,  // [n * top_k]
                     const float* __restrict__ weights,       // [n * top_k]
                     int n, int top_k, int hidden, int first_expert, int num_local,
                     TX* __restrict__ out) {  // [n, hidden]
  const int64_t total = static_cast<int64_t>(n) * hidden;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = e / hidden;
    const int64_t c = e % hidden;
    float sum = 0.0f;
    for (int s = 0; s < top_k; ++s) {
      const int64_t pair = token * top_k + s;
      if (LocalExpert(expert_ids[pair], first_expert, num_local) < 0) continue;
      sum = fmaf(weights[pair], pair_out[pair * hidden + c], sum);
    }
    StoreAs(sum, &out[e]);
  }
}

// The workspace of one chunk, carved in order.
struct Workspace {
  int32_t* perm;
  int32_t* tile_expert;
  int32_t* tile_begin;
  int32_t* tile_end;
  int32_t* num_tiles;
  void* act;
  float* pair_out;
  size_t bytes;
};

int64_t MaxTiles(int64_t pairs, int num_local) {
  return (pairs + kTileM - 1) / kTileM + num_local;
}

Workspace Carve(void* base, int chunk_tokens, int top_k, int hidden, int intermediate,
                int num_local, DType act) {
  const int64_t pairs = static_cast<int64_t>(chunk_tokens) * top_k;
  const size_t tiles = static_cast<size_t>(MaxTiles(pairs, num_local));
  char* p = static_cast<char*>(base);
  size_t offset = 0;
  auto take = [&](size_t bytes) {
    char* at = p == nullptr ? nullptr : p + offset;
    offset += moe::AlignUp(bytes);
    return at;
  };
  Workspace ws;
  ws.perm = reinterpret_cast<int32_t*>(take(pairs * sizeof(int32_t)));
  ws.tile_expert = reinterpret_cast<int32_t*>(take(tiles * sizeof(int32_t)));
  ws.tile_begin = reinterpret_cast<int32_t*>(take(tiles * sizeof(int32_t)));
  ws.tile_end = reinterpret_cast<int32_t*>(take(tiles * sizeof(int32_t)));
  ws.num_tiles = reinterpret_cast<int32_t*>(take(sizeof(int32_t)));
  ws.act = take(static_cast<size_t>(pairs) * intermediate * DTypeSize(act));
  ws.pair_out = reinterpret_cast<float*>(take(static_cast<size_t>(pairs) * hidden * sizeof(float)));
  ws.bytes = offset;
  return ws;
}

}  // namespace

int MoeGroupedChunkTokens(int n, int top_k, int hidden, int intermediate, DType act) {
  const size_t per_token = static_cast<size_t>(std::max(top_k, 1)) *
                           (static_cast<size_t>(hidden) * sizeof(float) +
                            static_cast<size_t>(intermediate) * DTypeSize(act) +
                            sizeof(int32_t));
  const size_t fits = kWorkspaceBudget / std::max<size_t>(per_token, 1);
  return static_cast<int>(std::clamp<size_t>(fits, 1, static_cast<size_t>(std::max(n, 1))));
}

size_t MoeExpertsGroupedWorkspaceBytes(int chunk_tokens, int top_k, int hidden,
                                       int intermediate, int num_local, DType act) {
  return Carve(nullptr, chunk_tokens, top_k, hidden, intermediate, num_local, act).bytes;
}

bool LaunchMoeExpertsGrouped(const void* x, int n, const int32_t* expert_ids,
                             const float* weights, int top_k, const MoeExpertsArgs& args,
                             int chunk_tokens, bool tensor_cores, void* workspace,
                             size_t workspace_bytes, void* out, cudaStream_t stream,
                             std::string* error, DType act) {
  if (n <= 0) return true;
  if (top_k < 1 || args.hidden <= 0 || args.intermediate <= 0 || chunk_tokens < 1) {
    return Fail(error, "MoeExpertsGrouped: top_k " + std::to_string(top_k) + ", hidden " +
                           std::to_string(args.hidden) + ", intermediate " +
                           std::to_string(args.intermediate) + ", chunk " +
                           std::to_string(chunk_tokens) + " must be positive");
  }
  if (args.num_local < 1 || args.num_local > kMoeMaxExperts) {
    return Fail(error, "MoeExpertsGrouped: " + std::to_string(args.num_local) +
                           " held experts outside [1, " + std::to_string(kMoeMaxExperts) + "]");
  }
  const int chunk = std::min(chunk_tokens, n);
  const Workspace ws = Carve(workspace, chunk, top_k, args.hidden, args.intermediate,
                             args.num_local, act);
  if (workspace_bytes < ws.bytes) {
    return Fail(error, "MoeExpertsGrouped: workspace of " + std::to_string(workspace_bytes) +
                           " bytes, " + std::to_string(ws.bytes) + " needed");
  }
  const int64_t max_tiles = MaxTiles(static_cast<int64_t>(chunk) * top_k, args.num_local);
  if (max_tiles > 0x7fffffff) {
    return Fail(error, "MoeExpertsGrouped: " + std::to_string(max_tiles) +
                           " tiles exceed the grid");
  }
  const unsigned gate_cols = static_cast<unsigned>(
      (args.intermediate + kTileN / 2 - 1) / (kTileN / 2));
  const unsigned down_cols = static_cast<unsigned>((args.hidden + kTileN - 1) / kTileN);
  bool launched = false;
  const bool dtypes_ok = moe::WithActivation(act, "MoeExpertsGrouped", error, [&](auto tx) {
    using TX = decltype(tx);
    launched = moe::WithWeightDtype(args.weight_dtype, "MoeExpertsGrouped", error,
                                    [&](auto wt) {
      constexpr DType W = decltype(wt)::value;
      for (int t0 = 0; t0 < n; t0 += chunk) {
        const int tokens = std::min(chunk, n - t0);
        const int pairs = tokens * top_k;
        const int64_t first_pair = static_cast<int64_t>(t0) * top_k;
        const int32_t* ids = expert_ids + first_pair;
        const int64_t tiles = MaxTiles(pairs, args.num_local);
        MoeAlignKernel<<<1, kAlignThreads, 0, stream>>>(
            ids, pairs, args.first_expert, args.num_local, ws.perm, ws.tile_expert,
            ws.tile_begin, ws.tile_end, ws.num_tiles);
        auto* act_rows = static_cast<TX*>(ws.act);
        const auto* x_rows = static_cast<const TX*>(x) + static_cast<int64_t>(t0) * args.hidden;
        const dim3 gate_grid(static_cast<unsigned>(tiles), gate_cols);
        const dim3 down_grid(static_cast<unsigned>(tiles), down_cols);
        auto gemms = [&](auto tensor_cores) {
          constexpr bool kTc = decltype(tensor_cores)::value;
          MoeGroupedGemmKernel<W, TX, true, kTc><<<gate_grid, kGemmThreads, 0, stream>>>(
              x_rows, ws.perm, top_k, ws.tile_expert, ws.tile_begin, ws.tile_end,
              ws.num_tiles, args, act_rows, nullptr);
          MoeGroupedGemmKernel<W, TX, false, kTc><<<down_grid, kGemmThreads, 0, stream>>>(
              act_rows, ws.perm, top_k, ws.tile_expert, ws.tile_begin, ws.tile_end,
              ws.num_tiles, args, nullptr, ws.pair_out);
        };
        // float32 activations keep float32 products: they are the CPU backend's exact twin.
        if constexpr (std::is_same_v<TX, __nv_bfloat16>) {
          if (tensor_cores) {
            gemms(std::true_type{});
          } else {
            gemms(std::false_type{});
          }
        } else {
          gemms(std::false_type{});
        }
        const int64_t outputs = static_cast<int64_t>(tokens) * args.hidden;
        MoeCombineKernel<TX><<<GridFor(outputs, kCombineThreads), kCombineThreads, 0, stream>>>(
            ws.pair_out, ids, weights + first_pair, tokens, top_k, args.hidden,
            args.first_expert, args.num_local,
            static_cast<TX*>(out) + static_cast<int64_t>(t0) * args.hidden);
      }
    });
  });
  if (!dtypes_ok || !launched) return false;
  return CheckLaunch("MoeExpertsGrouped", error);
}

}  // namespace tessera::kernels::gpu
