// Paged attention for prefill on the CUDA cores: the tiled kernel every cache dtype and
// head size takes where the tensor-core (attention_tc_kernels.cu) and sm_90
// (attention_sm90.cu) kernels do not apply, and the exact float32 twin of the CPU backend.
#include <cmath>
#include <string>

#include "kernels/cuda/attention_args.h"
#include "kernels/cuda/attention_cache.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/paged_index.h"

namespace tessera::kernels::gpu {
namespace {

// ---------------------------------------------------------------------------------------
// Prefill kernel. Block = (tile of kRows consecutive tokens of one sequence, query head);
// 4 warps each own 4 query rows. Per key tile, lane j scores key j against a row; the PV
// product broadcasts each lane's probability with shuffles, lane owning dims lane + 32*i.
constexpr int kPrefillRows = 16;
constexpr int kPrefillKeys = 32;
constexpr int kPrefillThreads = 128;
constexpr int kRowsPerWarp = kPrefillRows / (kPrefillThreads / 32);

template <int D, class Cache>
__global__ void __launch_bounds__(kPrefillThreads) AttentionPrefillKernel(AttentionArgs a) {
  constexpr int kDimsPerLane = (D + 31) / 32;
  __shared__ float s_q[kPrefillRows][D];
  __shared__ float s_k[kPrefillKeys][D + 1];  // +1: lanes read different rows, no conflicts.
  __shared__ float s_v[kPrefillKeys][D];
  __shared__ int s_seq;
  __shared__ int s_tile;

  if (threadIdx.x == 0) {
    // Blocks map to sequences' tiles in order; surplus blocks (the grid is an upper bound)
    // find none and exit.
    int b = blockIdx.x;
    s_seq = -1;
    for (int s = 0; s < a.num_seqs; ++s) {
      const int tiles = (a.query_start[s + 1] - a.query_start[s] + kPrefillRows - 1) /
                        kPrefillRows;
      if (b < tiles) {
        s_seq = s;
        s_tile = b;
        break;
      }
      b -= tiles;
    }
  }
  __syncthreads();
  if (s_seq < 0) return;
  const int seq = s_seq;
  const int head = blockIdx.y;
  const int q_begin = a.query_start[seq];
  const int num_new = a.query_start[seq + 1] - q_begin;
  const int context_len = a.context_lens[seq];
  const int first = s_tile * kPrefillRows;  // First local token of the tile.
  const int rows = min(kPrefillRows, num_new - first);
  const int kv_head = paged::KvHeadOf(head, a.num_q_heads, a.num_kv_heads);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int kv_end = paged::TokenPosition(context_len, num_new, first + rows - 1) + 1;
  // Whole key tiles before the earliest key the tile's rows see are skipped.
  const int kv_begin = paged::FirstKeyTile(paged::TokenPosition(context_len, num_new, first),
                                           a.window, kPrefillKeys);

  for (int e = threadIdx.x; e < kPrefillRows * D; e += kPrefillThreads) {
    const int r = e / D;
    const int d = e % D;
    s_q[r][d] = r < rows ? LoadAct(a.q,
                                   static_cast<int64_t>(q_begin + first + r) * a.q_stride +
                                       head * D + d,
                                   a.bf16) *
                               a.scale
                         : 0.0f;
  }

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float m[kRowsPerWarp];
  float l[kRowsPerWarp];
  float acc[kRowsPerWarp][kDimsPerLane];
  int pos[kRowsPerWarp];
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
    for (int i = 0; i < kDimsPerLane; ++i) acc[rr][i] = 0.0f;
    pos[rr] = paged::TokenPosition(context_len, num_new, first + warp * kRowsPerWarp + rr);
  }

  for (int k0 = kv_begin; k0 < kv_end; k0 += kPrefillKeys) {
    __syncthreads();  // The previous tile is consumed (and s_q is complete).
    for (int e = threadIdx.x; e < kPrefillKeys * D; e += kPrefillThreads) {
      const int j = e / D;
      const int d = e % D;
      const int key = k0 + j;
      float kv = 0.0f;
      float vv = 0.0f;
      if (key < kv_end) {
        const int64_t row_off = paged::CacheOffset(paged::SlotOf(table, key, a.block_size),
                                                   a.num_kv_heads, D, kv_head);
        kv = Cache::Load(a.k_cache, row_off + d) * Scale<Cache, D>(a.k_scales, row_off);
        vv = Cache::Load(a.v_cache, row_off + d) * Scale<Cache, D>(a.v_scales, row_off);
      }
      s_k[j][d] = kv;
      s_v[j][d] = vv;
    }
    __syncthreads();

    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      if (r >= rows) break;  // Same r for the whole warp.
      const int key = k0 + lane;
      float s = -INFINITY;
      if (key <= pos[rr] && key >= paged::FirstVisibleKey(pos[rr], a.window)) {
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += s_q[r][d] * s_k[lane][d];
        s = dot;
      }
      const float tile_max = WarpMax(s);
      if (tile_max == -INFINITY) continue;  // Whole tile masked for this row (warp-uniform).
      const float m_new = fmaxf(m[rr], tile_max);
      const float alpha = expf(m[rr] - m_new);
      const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
      l[rr] = l[rr] * alpha + WarpSum(p);
      for (int i = 0; i < kDimsPerLane; ++i) acc[rr][i] *= alpha;
      for (int j = 0; j < kPrefillKeys; ++j) {
        const float pj = __shfl_sync(kFullMask, p, j);
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < D) acc[rr][i] += pj * s_v[j][d];
        }
      }
      m[rr] = m_new;
    }
  }

  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp * kRowsPerWarp + rr;
    if (r >= rows) break;
    const int64_t o = (static_cast<int64_t>(q_begin + first + r) * a.num_q_heads + head) * D;
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) StoreAct(a.out, o + d, l[rr] > 0.0f ? acc[rr][i] / l[rr] : 0.0f, a.bf16);
    }
  }
}

template <int D, class Cache>
bool LaunchPrefillFor(const AttentionArgs& args, int num_tokens, cudaStream_t stream,
                      std::string* error) {
  // Tiles never straddle sequences, so each sequence adds at most one partial tile.
  const int tiles = (num_tokens + kPrefillRows - 1) / kPrefillRows + args.num_seqs;
  AttentionPrefillKernel<D, Cache><<<dim3(tiles, args.num_q_heads), kPrefillThreads, 0, stream>>>(
      args);
  return CheckLaunch("PagedAttentionPrefill", error);
}

}  // namespace

bool LaunchPagedAttentionPrefill(const void* q, int q_stride, const AttentionBatch& batch,
                                 const void* k_cache, const void* v_cache,
                                 const KvCacheShape& shape, int num_q_heads, float scale,
                                 void* out, cudaStream_t stream, std::string* error, DType act) {
  if (!CheckActivations("PagedAttentionPrefill", act, error)) return false;
  if (batch.num_tokens <= 0) return true;
  if (!CheckShapes("PagedAttentionPrefill", batch, shape, num_q_heads, error)) return false;
  const AttentionArgs args =
      MakeArgs(q, q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale, out, act);
  auto launch = [&](auto cache) {
    using Cache = decltype(cache);
    switch (shape.head_dim) {
      case 8: return LaunchPrefillFor<8, Cache>(args, batch.num_tokens, stream, error);
      case 16: return LaunchPrefillFor<16, Cache>(args, batch.num_tokens, stream, error);
      case 32: return LaunchPrefillFor<32, Cache>(args, batch.num_tokens, stream, error);
      case 64: return LaunchPrefillFor<64, Cache>(args, batch.num_tokens, stream, error);
      case 128: return LaunchPrefillFor<128, Cache>(args, batch.num_tokens, stream, error);
    }
    return Fail(error, "PagedAttentionPrefill: unreachable head_dim");
  };
  switch (shape.dtype) {
    case DType::kF32: return launch(F32Cache{});
    case DType::kBF16: return launch(Bf16Cache{});
    case DType::kF8E4M3: return launch(Fp8Cache{});
    default: return Fail(error, "PagedAttentionPrefill: unsupported cache dtype");
  }
}

}  // namespace tessera::kernels::gpu
